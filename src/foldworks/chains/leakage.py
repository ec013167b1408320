"""Leakage check of the final split assignment; the ``chains`` stage fails when it finds any.

Two checks on chains in a split (``split != ""``):

1. bookkeeping: one ``cluster`` / ``split_group`` / identical sequence never spans two splits;
2. homology: an ``mmseqs easy-search`` of every val and test sequence against every train
   sequence; any hit with identity ≥ ``min_seq_id`` over ≥ ``coverage`` of both sequences
   (the clustering thresholds) is leakage.

The error names the chains (``{entry}_{chain}``) on both sides.
"""

from __future__ import annotations

import logging

import pandas as pd

from foldworks.chains.mmseqs import search_hits

log = logging.getLogger(__name__)

MAX_NAMED = 10


class LeakageError(RuntimeError):
    """A val/test chain is too similar to a train chain (or shares a cluster with one)."""


def _targets(rows: pd.DataFrame) -> dict[str, list[str]]:
    """sequence hash → sorted ``{entry}_{chain}`` names."""
    names = rows["entry"] + "_" + rows["chain"]
    return {h: sorted(group) for h, group in names.groupby(rows["sequence_hash"])}


def _check_bookkeeping(in_split: pd.DataFrame) -> None:
    for key in ("sequence_hash", "cluster", "split_group"):
        if key not in in_split:
            continue
        spread = in_split.groupby(key)["split"].nunique()
        leaked = spread[spread > 1]
        if not leaked.empty:
            rows = in_split[in_split[key] == leaked.index[0]]
            named = ", ".join(f"{e}_{c} ({s})" for e, c, s in zip(rows["entry"], rows["chain"], rows["split"]))
            raise LeakageError(f"split leakage: {key} {leaked.index[0]} spans several splits: {named}")


def check_no_leakage(frame: pd.DataFrame, min_seq_id: float, coverage: float, threads: int = 1) -> int:
    """Raise :class:`LeakageError` on any leakage (see module doc); return the number of
    val/test sequences searched against train."""
    in_split = frame[frame["split"].isin(["train", "val", "test"])]
    _check_bookkeeping(in_split)
    train = in_split[in_split["split"] == "train"]
    held_out = in_split[in_split["split"].isin(["val", "test"])]
    queries = dict(zip(held_out["sequence_hash"], held_out["sequence"]))
    hits = search_hits(queries, dict(zip(train["sequence_hash"], train["sequence"])), min_seq_id, coverage, threads)
    if hits:
        held_names, train_names = _targets(held_out), _targets(train)
        split_of = dict(zip(held_out["sequence_hash"], held_out["split"]))
        lines = [f"{'/'.join(held_names[h.query])} ({split_of[h.query]}) ~ {'/'.join(train_names[h.target])} (train): "
                 f"identity {h.fident:.2f}, coverage {h.qcov:.2f}/{h.tcov:.2f}" for h in hits[:MAX_NAMED]]
        more = f"; and {len(hits) - MAX_NAMED} more" if len(hits) > MAX_NAMED else ""
        raise LeakageError(f"split leakage: {len(hits)} val/test-train sequence pair(s) at identity >= {min_seq_id} "
                           f"and coverage >= {coverage}: " + "; ".join(lines) + more)
    log.info("leakage check passed: %d val/test sequences searched against %d train sequences",
             len(queries), train["sequence_hash"].nunique())
    return len(queries)
