"""The MSA index (checkpoint ``msa_index`` → ``data/msa/index.tsv``): every msa shard's rows in one file.

Why it exists (a no-op run at full-PDB size): a features shard (an entry shard) used to list the
manifest of every msa shard holding one of its chains' sequences as inputs: ~650,000
features→msa edges at 230,000 entries, which Snakemake resolves on every call, no-op included.
Now one checkpoint collects the msa manifests (256 edges at `msa.shard_chars: 2`) into this index; a features shard
takes the index as an ``ancient`` input (ordering only, never a rerun by mtime) plus a params
digest of exactly its sequences' index rows (:func:`shard_digest`, read at DAG time), so a
changed a3m reruns exactly the features shards whose chains use it, once the checkpoint has run.

Format: a shard manifest (:mod:`foldworks.shards`, columns ``item status input_sha256 stamp
output_sha256 reason``), one row per unique sequence hash of the passed chains, sorted; the
features job reads its a3m digests from it (``--msa-manifests data/msa/index.tsv``). A hash
without a manifest row (its msa shard never ran) has no row.

CLI::

    python -m foldworks.msa.index --table data/chains.parquet --shards-dir data/msa/shards \\
        --shard-chars 2 --out data/msa/index.tsv
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd

from foldworks.logutil import setup_logging
from foldworks.shards import COLUMNS, SEQ_SHARD_CHARS, Row, read_manifest, write_manifest

LOG = logging.getLogger("foldworks.msa.index")


def passed_hashes(table: pd.DataFrame) -> list[str]:
    """Sorted unique sequence hashes of the chains that passed the filters."""
    passed = table[table["passed_filters"].astype(bool)]
    return sorted(set(passed["sequence_hash"].astype(str)))


def build_index(hashes: Iterable[str], shards_dir: str | Path, shard_chars: int) -> list[Row]:
    """The rows of ``hashes`` from their msa shard manifests ``<shards_dir>/<hash[:shard_chars]>.tsv``
    (each manifest read once); hashes without a row are left out (logged)."""
    rows, missing, by_shard = [], [], {}
    for seq_hash in hashes:
        key = seq_hash[:shard_chars]
        if key not in by_shard:
            by_shard[key] = read_manifest(Path(shards_dir) / f"{key}.tsv")
        row = by_shard[key].get(seq_hash)
        if row is None:
            missing.append(seq_hash)
        else:
            rows.append(row)
    if missing:
        LOG.warning("msa index: %d sequence(s) without a manifest row, e.g. %s", len(missing), missing[:5])
    return rows


def read_digest_rows(path: str | Path) -> dict[str, str]:
    """``{sequence hash: "status:output_sha256"}`` of an index file (what a features shard's
    digest covers: the a3m a chain would read and whether it is a failed placeholder). Plain
    string splitting: the workflow reads it once per Snakemake process (120,000 rows at full PDB)."""
    status, digest = COLUMNS.index("status"), COLUMNS.index("output_sha256")
    rows = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) < len(COLUMNS) - 1 or line.startswith("#") or fields[0] == COLUMNS[0]:
            continue
        rows[fields[0]] = f"{fields[status]}:{fields[digest]}"
    return rows


def shard_digest(rows: Mapping[str, str], hashes: Iterable[str]) -> str:
    """16 hex characters over the index rows of ``hashes`` (a features shard's sequences; order and
    duplicates do not matter; a hash without a row counts as ``missing``)."""
    lines = sorted(f"{h}={rows.get(h, 'missing')}" for h in set(hashes))  # hashes hold no "=" or newline
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.index", description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="data/chains.parquet")
    parser.add_argument("--shards-dir", default="data/msa/shards", help="the msa shard manifests")
    parser.add_argument("--shard-chars", type=int, default=SEQ_SHARD_CHARS, help="msa shard prefix length")
    parser.add_argument("--out", required=True, help="data/msa/index.tsv")
    args = parser.parse_args(argv)
    setup_logging("msa_index")
    hashes = passed_hashes(pd.read_parquet(args.table, columns=["sequence_hash", "passed_filters"]))
    rows = build_index(hashes, args.shards_dir, args.shard_chars)
    write_manifest(args.out, rows)
    failed = sum(row.status != "ok" for row in rows)
    LOG.info("msa index: %d of %d sequences, %d not ok -> %s", len(rows), len(hashes), failed, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
