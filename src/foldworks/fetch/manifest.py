"""Gather fetch records into ``data/raw/manifest.tsv`` (one row per stored entry, sorted by entry).

Records of failed fetches (``status: failed``) have no stored file and no row here; they are in
the failures report (``results/failures.tsv``).

CLI: ``python -m foldworks.fetch.manifest --records data/raw/*.json --out data/raw/manifest.tsv``
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Iterable

from foldworks import fsutil
from foldworks.ids import normalize_entry
from foldworks.logutil import setup_logging

LOG = logging.getLogger(__name__)

COLUMNS = ("entry", "source_format", "bytes", "sha256", "stored_sha256", "url_or_path", "source", "fetched_at")


def read_records(paths: Iterable[str | Path]) -> list[dict]:
    """Load the records of stored entries (failed fetches skipped), check their fields, refuse two
    records for one entry; sorted by entry."""
    by_entry: dict[str, dict] = {}
    for path in paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        if record.get("status", "ok") != "ok":
            continue
        missing = [c for c in COLUMNS if c not in record]
        if missing:
            raise ValueError(f"record {path}: missing field(s) {missing}")
        entry = normalize_entry(record["entry"])
        if entry in by_entry:
            raise ValueError(f"record {path}: entry {entry} appears in more than one record")
        by_entry[entry] = record
    return [by_entry[e] for e in sorted(by_entry)]


def write_manifest(paths: Iterable[str | Path], out: str | Path) -> int:
    """Write the manifest TSV atomically; returns the number of rows."""
    records = read_records(paths)
    rows = [[str(r[c]) for c in COLUMNS] for r in records]
    fsutil.write_tsv_atomic(out, COLUMNS, rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    setup_logging("fetch.manifest")
    parser = argparse.ArgumentParser(prog="python -m foldworks.fetch.manifest", description=__doc__.splitlines()[0])
    parser.add_argument("--records", nargs="*", default=[], help="record JSON files (one per entry)")
    parser.add_argument("--out", required=True, help="output TSV path")
    args = parser.parse_args(argv)
    try:
        count = write_manifest(args.records, args.out)
    except (ValueError, OSError) as exc:
        LOG.error("manifest: %s", exc)
        return 1
    LOG.info("manifest: %d entries -> %s", count, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
