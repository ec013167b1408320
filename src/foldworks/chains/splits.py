"""Sequence clustering with MMseqs2 and cluster-level train/val/test splits.

Whole clusters go to one split, so no two chains with ≥ ``min_seq_id`` identity over
``coverage`` of their length end up on both sides of a split.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd

log = logging.getLogger(__name__)

SPLITS: tuple[str, ...] = ("test", "val", "train")


def cluster_sequences(sequences: dict[str, str], min_seq_id: float, coverage: float, threads: int = 1) -> dict[str, str]:
    """Cluster unique sequences with ``mmseqs easy-cluster``; return ``{hash: representative hash}``.

    ``sequences`` maps sequence hash → one-letter sequence. Coverage mode 0 (both sequences).
    """
    if not sequences:
        return {}
    mmseqs = shutil.which("mmseqs")
    if mmseqs is None:
        raise FileNotFoundError("mmseqs not found on PATH (install mmseqs2; `make` does it on Debian)")
    with tempfile.TemporaryDirectory(prefix="foldworks-cluster-") as tmp:
        fasta = Path(tmp) / "in.fasta"
        fasta.write_text("".join(f">{h}\n{s}\n" for h, s in sorted(sequences.items())))
        cmd = [mmseqs, "easy-cluster", str(fasta), str(Path(tmp) / "out"), str(Path(tmp) / "work"),
               "--min-seq-id", str(min_seq_id), "-c", str(coverage), "--cov-mode", "0",
               "--threads", str(threads), "-v", "1"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        pairs = (Path(tmp) / "out_cluster.tsv").read_text().split("\n")
    membership = {}
    for line in filter(None, pairs):
        rep, member = line.split("\t")
        membership[member] = rep
    missing = set(sequences) - set(membership)
    if missing:
        raise RuntimeError(f"mmseqs dropped {len(missing)} sequences, e.g. {sorted(missing)[0]}")
    return membership


def _cluster_order_key(cluster: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{cluster}".encode()).hexdigest()


def assign_splits(cluster_sizes: dict[str, int], fractions: dict[str, float], seed: int) -> dict[str, str]:
    """Assign whole clusters to splits so each split gets about its fraction of chains.

    Clusters are visited in a seeded pseudo-random order; ``test`` then ``val`` are filled up to
    their target chain counts (at least one cluster each when fractions are > 0), the rest is
    ``train``. Deterministic for a given seed and cluster set.
    """
    total = sum(cluster_sizes.values())
    targets = {name: fractions.get(name, 0.0) * total for name in ("test", "val")}
    counts = {name: 0 for name in SPLITS}
    assignment: dict[str, str] = {}
    for cluster in sorted(cluster_sizes, key=lambda c: _cluster_order_key(c, seed)):
        size = cluster_sizes[cluster]
        split = "train"
        for name in ("test", "val"):
            if targets[name] > 0 and (counts[name] == 0 or counts[name] + size <= targets[name]):
                split = name
                break
        assignment[cluster] = split
        counts[split] += size
    log.info("split sizes (chains): %s", counts)
    return assignment


def add_clusters_and_splits(frame: pd.DataFrame, min_seq_id: float, coverage: float,
                            fractions: dict[str, float], seed: int, threads: int = 1) -> pd.DataFrame:
    """Fill ``cluster`` and ``split`` for chains that passed the filters (others get "")."""
    frame = frame.copy()
    passed = frame[frame["passed_filters"]]
    unique = dict(zip(passed["sequence_hash"], passed["sequence"]))
    membership = cluster_sequences(unique, min_seq_id, coverage, threads)
    frame["cluster"] = frame["sequence_hash"].map(membership).where(frame["passed_filters"], "").fillna("")
    sizes = frame.loc[frame["passed_filters"], "cluster"].value_counts().to_dict()
    split_of = assign_splits(sizes, fractions, seed)
    frame["split"] = frame["cluster"].map(split_of).where(frame["passed_filters"], "").fillna("")
    frame["cluster_size"] = frame["cluster"].map(sizes).fillna(0).astype("int64")
    # Sampling weight: inverse cluster size (every cluster equally likely), 0 for filtered rows.
    frame["sample_weight"] = (1.0 / frame["cluster_size"].where(frame["cluster_size"] > 0)).fillna(0.0)
    return frame


def check_no_leakage(frame: pd.DataFrame) -> None:
    """Raise if any cluster or identical sequence appears in more than one split."""
    passed = frame[frame["passed_filters"]]
    for key in ("cluster", "sequence_hash"):
        spread = passed.groupby(key)["split"].nunique()
        leaked = spread[spread > 1]
        if not leaked.empty:
            raise RuntimeError(f"split leakage: {key} {leaked.index[0]} spans several splits")
