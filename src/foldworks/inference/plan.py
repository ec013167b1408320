"""Paths the ``inference`` rules plan from the query FASTA (pure; no Snakemake import)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from foldworks.inference.fasta import QueryRecord


def alignment_path(record: QueryRecord, out_dir: str, alignments_dir: str | os.PathLike[str] | None) -> str:
    """The record's a3m: ``<alignments_dir>/<name>.a3m`` or ``<alignments_dir>/<hash>.a3m`` when
    one exists (precomputed, in that order), else the searched ``<out_dir>/msa/<hash>.a3m``."""
    if alignments_dir:
        for stem in (record.name, record.sequence_hash):
            candidate = Path(alignments_dir, f"{stem}.a3m")
            if candidate.is_file():
                return str(candidate)
    return f"{out_dir}/msa/{record.sequence_hash}.a3m"


def inference_targets(records: Sequence[QueryRecord], out_dir: str) -> list[str]:
    """``<out_dir>/ranking.tsv`` (needs every valid record's prediction) and the record JSON of
    each refused record (its job fails, naming the record); nothing without records."""
    if not records:
        return []
    return [f"{out_dir}/ranking.tsv", *(f"{out_dir}/records/{r.name}.json" for r in records if not r.valid)]
