"""Gather fetch records into ``data/raw/manifest.tsv`` (one row per stored entry, sorted by entry).

Records of failed fetches (``status: failed``) have no stored file and no row here; they are in
the failures report (``results/failures.tsv``).

CLI: ``python -m foldworks.fetch.manifest --entries data/raw/entries.txt --records-dir data/raw
--out data/raw/manifest.tsv`` reads ``<records-dir>/<entry>.json`` for each entry of the list file
(one ID per line, see foldworks.entrylist: one argument for any number of entries; the workflow's
form). ``--records data/raw/*.json`` lists the record files instead (a few entries, tests).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Iterable

from foldworks import fsutil
from foldworks.entrylist import entry_files, read_entry_list
from foldworks.ids import normalize_entry
from foldworks.logutil import setup_logging

LOG = logging.getLogger(__name__)

COLUMNS = ("entry", "source_format", "bytes", "sha256", "stored_sha256", "url_or_path", "source", "fetched_at")


def read_records(paths: Iterable[str | Path]) -> list[dict]:
    """Load the records of stored entries (failed fetches skipped), check their fields, refuse two
    records for one entry; sorted by entry."""
    by_entry: dict[str, dict] = {}
    for path in paths:
        try:
            record = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"record {path}: unreadable: {exc}") from exc
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
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--entries", help="entry list file (one PDB ID per line); with --records-dir")
    source.add_argument("--records", nargs="*", default=[], help="record JSON files (one per entry)")
    parser.add_argument("--records-dir", default=None, help="folder of the <entry>.json records of --entries")
    parser.add_argument("--out", required=True, help="output TSV path")
    args = parser.parse_args(argv)
    if (args.entries is None) != (args.records_dir is None):
        parser.error("--entries and --records-dir go together (or give --records files instead)")
    try:
        paths = args.records if args.entries is None else entry_files(read_entry_list(args.entries), args.records_dir)
        count = write_manifest(paths, args.out)
    except (ValueError, OSError) as exc:  # EntryListError is a ValueError
        LOG.error("manifest: %s", exc)
        return 1
    LOG.info("manifest: %d entries -> %s", count, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
