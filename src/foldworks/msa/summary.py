"""Completeness check of the MSA store (rule ``msa_summary`` → ``data/msa/summary.tsv``).

Every unique sequence of a chain that passed the filters must have a contract a3m: first row
exactly the query, every row ``L`` match columns once insertions are removed. One row per
sequence: ``sequence_hash, length, status, depth, tool, databases, reason`` where status is

- ``ok``: a searched alignment (depth = rows, query included);
- ``failed``: a placeholder written after the last failed attempt (query row only); the
  reason is also in ``data/failures/msa/<hash>.json``;
- ``invalid`` / ``missing``: the contract is broken: the check exits with status 1.

``--list-failed`` prints the msa shard manifests (``data/msa/shards/<prefix>.tsv``) holding
failed placeholders instead, e.g. to retry them (a shard job retries its failed sequences):
``snakemake --forcerun $(python -m foldworks.msa.summary --list-failed --table data/chains.parquet)``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Sequence

import pandas as pd

from foldworks import fsutil
from foldworks.shards import read_manifest
from foldworks.ids import msa_relpath
from foldworks.logutil import setup_logging
from foldworks.msa.a3m import A3MError, read_header, validate_a3m

LOG = logging.getLogger("foldworks.msa.summary")
COLUMNS = ("sequence_hash", "length", "status", "depth", "tool", "databases", "reason")


def check_one(path: Path, seq_hash: str, sequence: str) -> dict[str, object]:
    """One summary row for the a3m at ``path`` (see the module docstring for ``status``)."""
    row: dict[str, object] = {"sequence_hash": seq_hash, "length": len(sequence), "status": "missing",
                              "depth": 0, "tool": "", "databases": "", "reason": ""}
    if not path.is_file():
        row["reason"] = f"{path} does not exist"
        return row
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        meta = read_header(text) or {}
        row["depth"] = validate_a3m(text, sequence, name=seq_hash)
    except A3MError as exc:
        row.update(status="invalid", reason=str(exc))
        return row
    databases = meta.get("databases") or {}
    row.update(status=str(meta.get("status", "ok")), tool=str(meta.get("tool", "")),
               databases=",".join(f"{k}:{v}" for k, v in sorted(databases.items())),
               reason=str(meta.get("reason", "")))
    if row["status"] == "ok" and meta and int(meta.get("depth", -1)) != row["depth"]:
        row.update(status="invalid", reason=f"metadata depth {meta.get('depth')} != {row['depth']} rows")
    return row


def summarize(table: pd.DataFrame, data_dir: Path) -> list[dict[str, object]]:
    """Rows for every unique sequence of the passed chains in ``table``, sorted by hash."""
    passed = table[table["passed_filters"].astype(bool)]
    unique = dict(zip(passed["sequence_hash"], passed["sequence"]))
    return [check_one(data_dir / msa_relpath(h), h, unique[h]) for h in sorted(unique)]


def failed_manifests(hashes: Sequence[str], shards_dir: Path, shard_chars: int | None = None) -> list[Path]:
    """The msa shard manifests to force-rerun for ``hashes``: ``<prefix>.tsv`` with ``shard_chars``
    hex characters when given, else the newest manifest whose key prefixes the hash and that lists
    it (so the answer follows the run's `msa.shard_chars`, even with old-length manifests left)."""
    if shard_chars:
        return [shards_dir / f"{prefix}.tsv" for prefix in sorted({h[:shard_chars] for h in hashes})]
    found, items = set(), {}  # items: each manifest read once
    for seq_hash in hashes:
        listing = [shards_dir / f"{seq_hash[:n]}.tsv" for n in (1, 2, 3)]
        for path in listing:
            if path not in items:
                items[path] = set(read_manifest(path)) if path.is_file() else set()
        listing = [path for path in listing if seq_hash in items[path]]
        if listing:
            found.add(max(listing, key=lambda path: path.stat().st_mtime_ns))
    return sorted(found)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.summary", description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="data/chains.parquet")
    parser.add_argument("--data-dir", default="data", help="directory holding msa/<xx>/<hash>.a3m")
    parser.add_argument("--out", help="summary TSV")
    parser.add_argument("--list-failed", action="store_true", help="print msa shard manifests with failed placeholders")
    parser.add_argument("--shard-chars", type=int, help="msa shard prefix length (default: the shard"
                        " manifest that lists the sequence, whatever the run's msa.shard_chars)")
    args = parser.parse_args(argv)
    rows = summarize(pd.read_parquet(args.table), Path(args.data_dir))
    if args.list_failed:
        failed = [str(row["sequence_hash"]) for row in rows if row["status"] == "failed"]
        for path in failed_manifests(failed, Path(args.data_dir) / "msa" / "shards", args.shard_chars):
            print(path)
        return 0
    setup_logging("msa_summary")
    if args.out:
        fsutil.write_tsv_atomic(args.out, COLUMNS, [[row[c] for c in COLUMNS] for row in rows])
    counts = pd.Series([row["status"] for row in rows]).value_counts().to_dict() if rows else {}
    depths = [int(row["depth"]) for row in rows if row["status"] == "ok"]
    LOG.info("msa summary: %d sequences, %s; depth median %s, max %s", len(rows), counts,
             int(pd.Series(depths).median()) if depths else "-", max(depths, default="-"))
    broken = [row for row in rows if row["status"] in ("missing", "invalid")]
    for row in broken[:20]:
        LOG.error("msa %s: %s: %s", row["sequence_hash"], row["status"], row["reason"])
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
