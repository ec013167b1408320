"""Sequence clusters, split groups, train/val/test splits and sampling weights.

- ``cluster``: MMseqs2 ``easy-cluster`` representative (≥ ``min_seq_id`` identity over
  ≥ ``coverage`` of both sequences). Used for ``cluster_size`` and ``sample_weight``.
- ``split_group``: clusters joined by any all-vs-all ``easy-search`` hit meeting the same
  thresholds (single linkage, union-find), because greedy clustering can leave two similar
  sequences in different clusters. Splits are assigned per split group, so the leakage check
  (:mod:`foldworks.chains.leakage`) holds by construction.
- Random split (default): whole split groups are drawn in a seeded order into ``test`` then
  ``val`` up to their chain fractions; the rest is ``train``.
- Date split (``test_release_after: YYYY-MM-DD``): chains released after the cutoff are
  ``test``; ``val`` takes split groups without a test chain up to ``val`` × the chains released
  on or before the cutoff; chains released on or before the cutoff whose split group holds a
  test chain are dropped (``passed_filters = False``, ``filter_reason = "shares_cluster_with_test"``).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Mapping

import numpy as np
import pandas as pd

from foldworks.chains.mmseqs import Hit, cluster_sequences, search_hits
from foldworks.chains.table import EmptyDatasetError

log = logging.getLogger(__name__)

SPLITS: tuple[str, ...] = ("test", "val", "train")
DROPPED_REASON = "shares_cluster_with_test"
LENGTH_CROP, LENGTH_FLOOR = 512, 256


def link_groups(membership: dict[str, str], hits: list[Hit]) -> dict[str, str]:
    """``{hash: group}``: clusters of ``membership`` joined by ``hits`` (union-find); a group is
    named by its lexicographically smallest representative, so the result is deterministic."""
    parent = {rep: rep for rep in membership.values()}

    def find(node: str) -> str:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for hit in hits:
        a, b = find(membership[hit.query]), find(membership[hit.target])
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {member: find(rep) for member, rep in membership.items()}


def _order_key(group: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{group}".encode()).hexdigest()


def assign_splits(group_sizes: dict[str, int], fractions: dict[str, float], seed: int) -> dict[str, str]:
    """Assign whole groups to splits so each split gets about its fraction of chains.

    Groups are visited in a seeded pseudo-random order; a group goes to ``test`` (then ``val``)
    while it fits the split's target chain count, else to ``train``. A split with a fraction > 0
    that is still empty then takes the smallest remaining train group (if train keeps one).
    Deterministic for a given seed and group set.
    """
    total = sum(group_sizes.values())
    targets = {name: fractions.get(name, 0.0) * total for name in ("test", "val")}
    counts = {name: 0 for name in SPLITS}
    assignment: dict[str, str] = {}
    order = sorted(group_sizes, key=lambda g: _order_key(g, seed))
    for group in order:
        size = group_sizes[group]
        split = next((n for n in ("test", "val") if counts[n] + size <= targets[n]), "train")
        assignment[group] = split
        counts[split] += size
    for name in ("test", "val"):
        train_groups = [g for g in order if assignment[g] == "train"]
        if targets[name] > 0 and counts[name] == 0 and len(train_groups) > 1:
            smallest = min(train_groups, key=lambda g: group_sizes[g])
            assignment[smallest] = name
            counts[name] += group_sizes[smallest]
            counts["train"] -= group_sizes[smallest]
    log.info("split sizes (chains): %s", counts)
    return assignment


def date_split(passed: pd.DataFrame, cutoff: str, val_fraction: float, seed: int) -> pd.Series:
    """Split of each passed row (index-aligned): ``test`` after ``cutoff``, ``""`` = dropped."""
    released = passed["release_date"].astype("string")
    is_test = released.notna() & (released > cutoff)
    if not is_test.any():
        raise EmptyDatasetError(f"chains.splits.test_release_after={cutoff}: no chain passing the filters "
                                "was released after the cutoff")
    test_groups = set(passed.loc[is_test, "split_group"])
    in_test_group = passed["split_group"].isin(test_groups)
    split = pd.Series("train", index=passed.index, dtype=object)
    split[is_test] = "test"
    split[in_test_group & ~is_test] = ""
    rest = passed[~in_test_group]
    if rest.empty:
        raise EmptyDatasetError(f"chains.splits.test_release_after={cutoff}: every chain released before the "
                                "cutoff shares a cluster with a test chain; no training data left")
    sizes = rest["split_group"].value_counts().to_dict()
    val_of = assign_splits(sizes, {"val": val_fraction, "test": 0.0}, seed)
    split[rest.index] = rest["split_group"].map(val_of)
    log.info("date split at %s: %d test chains (%d undated), %d dropped for sharing a cluster with test",
             cutoff, int(is_test.sum()), int(released.isna().sum()), int((split == "").sum()))
    return split


def sample_weights(length: pd.Series, cluster_size: pd.Series) -> pd.Series:
    """OpenFold/AF2 chain weight: ``(1 / cluster_size) * max(min(L, 512), 256) / 512``.

    ``L`` is the full polymer length (residues), ``cluster_size`` the chains of the same MMseqs2
    cluster that are in a split. Rows with ``cluster_size == 0`` (not in any split) get 0.
    """
    size = cluster_size.to_numpy(dtype=np.float64)
    factor = np.clip(length.to_numpy(dtype=np.float64), LENGTH_FLOOR, LENGTH_CROP) / LENGTH_CROP
    with np.errstate(divide="ignore"):
        weight = np.where(size > 0, factor / np.maximum(size, 1.0), 0.0)
    return pd.Series(weight, index=length.index, dtype="float64")


def add_clusters_and_splits(frame: pd.DataFrame, min_seq_id: float, coverage: float,
                            splits: Mapping[str, Any], threads: int = 1) -> pd.DataFrame:
    """Fill ``cluster``, ``split_group``, ``split``, ``cluster_size``, ``sample_weight``.

    ``splits``: ``{val, test, seed, test_release_after}`` (config ``chains.splits``). Rows that
    failed the filters get ``""`` / 0.
    """
    frame = frame.copy()
    passed = frame["passed_filters"]
    seed, cutoff = int(splits.get("seed", 0)), splits.get("test_release_after")
    if cutoff and not (frame.loc[passed, "release_date"].astype("string").fillna("") > str(cutoff)).any():
        raise EmptyDatasetError(f"chains.splits.test_release_after={cutoff}: no chain passing the filters "
                                "was released after the cutoff")
    unique = dict(zip(frame.loc[passed, "sequence_hash"], frame.loc[passed, "sequence"]))
    membership = cluster_sequences(unique, min_seq_id, coverage, threads)
    groups = link_groups(membership, search_hits(unique, unique, min_seq_id, coverage, threads))
    frame["cluster"] = frame["sequence_hash"].map(membership).where(passed, "").fillna("")
    frame["split_group"] = frame["sequence_hash"].map(groups).where(passed, "").fillna("")
    log.info("%d unique sequences, %d clusters, %d split groups", len(unique), len(set(membership.values())),
             len(set(groups.values())))
    frame["split"] = ""
    if cutoff:
        frame.loc[passed, "split"] = date_split(frame[passed], str(cutoff), float(splits.get("val", 0.0)), seed)
        dropped = passed & (frame["split"] == "")
        frame.loc[dropped, ["passed_filters", "filter_reason"]] = [False, DROPPED_REASON]
    else:
        sizes = frame.loc[passed, "split_group"].value_counts().to_dict()
        fractions = {"val": float(splits.get("val", 0.0)), "test": float(splits.get("test", 0.0))}
        frame.loc[passed, "split"] = frame.loc[passed, "split_group"].map(assign_splits(sizes, fractions, seed))
    in_split = frame["split"] != ""
    sizes = frame.loc[in_split, "cluster"].value_counts()
    frame["cluster_size"] = frame["cluster"].map(sizes).where(in_split, 0).fillna(0).astype("int64")
    frame["sample_weight"] = sample_weights(frame["length"], frame["cluster_size"])
    return frame
