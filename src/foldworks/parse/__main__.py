"""CLI: ``python -m foldworks.parse --entry 1aki --input X.cif.gz --out-npz X.npz --out-json X.json``.

A broken entry is written as ``status: failed`` (empty npz) and the exit status is still 0;
invalid arguments (bad entry ID, missing input, bad ``--params``) exit with status 2.

With ``--fetch-record data/raw/{entry}.json`` (the workflow's form) the record decides: a failed
fetch gives a failed parsed entry (``failed_stage: fetch``, the fetch's reason) without reading
``--input``; an ok record's file must exist and match the record's ``stored_sha256``.
``--failures-dir`` writes/clears ``<dir>/parse/<entry>.json`` (see :mod:`foldworks.failures`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

from foldworks import failures
from foldworks.ids import InvalidIdentifier, normalize_entry
from foldworks.logutil import setup_logging
from foldworks.parse.core import ParsedEntry, ParseOptions, failed_entry, parse_entry
from foldworks.parse.io import write_parsed

LOG = logging.getLogger("foldworks.parse")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.parse", description=__doc__.splitlines()[0])
    parser.add_argument("--entry", required=True, help="PDB ID, e.g. 1aki")
    parser.add_argument("--input", required=True, help="data/raw/{entry}.cif.gz (or a legacy .pdb.gz)")
    parser.add_argument("--out-npz", required=True, help="output .npz path")
    parser.add_argument("--out-json", required=True, help="output .json path")
    parser.add_argument("--params", default="{}", help='JSON, e.g. {"mse_to_met": true}')
    parser.add_argument("--fetch-record", default=None, help="data/raw/{entry}.json written by the fetch stage")
    parser.add_argument("--failures-dir", default=None, help="write/clear <dir>/parse/<entry>.json (data/failures)")
    return parser


def check_fetch_record(entry: str, record_path: str, raw: str) -> ParsedEntry | None:
    """A failed :class:`ParsedEntry` if the fetch record says the entry has no usable file, else None."""
    try:
        record = json.loads(Path(record_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return failed_entry(entry, f"fetch record {record_path} unreadable: {exc}")
    if record.get("status", "ok") != "ok":
        parsed = failed_entry(entry, str(record.get("reason") or "fetch failed"))
        parsed.failed_stage = "fetch"
        return parsed
    path = Path(raw)
    if not path.is_file():
        return failed_entry(entry, f"{raw} is missing although its fetch record is ok; "
                                   f"refetch with: snakemake --forcerun {record_path}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if record.get("stored_sha256") and digest != record["stored_sha256"]:
        return failed_entry(entry, f"{raw} does not match its fetch record (sha256 {digest[:12]}... != "
                                   f"{str(record['stored_sha256'])[:12]}...); refetch with: snakemake --forcerun {record_path}")
    return None


def main(argv: list[str] | None = None) -> int:
    setup_logging("parse")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        entry = normalize_entry(args.entry)
        options = ParseOptions.from_mapping(json.loads(args.params))
    except (InvalidIdentifier, ValueError, TypeError) as exc:
        parser.error(str(exc))
    if args.fetch_record is None and not Path(args.input).is_file():
        parser.error(f"entry {entry}: input {args.input} does not exist")
    if args.failures_dir:  # cleared first: a success must not leave an old failure behind
        failures.clear_failure("parse", entry, args.failures_dir)
    start = time.perf_counter()
    parsed = check_fetch_record(entry, args.fetch_record, args.input) if args.fetch_record else None
    if parsed is None:
        parsed = parse_entry(args.input, entry, options)
    if parsed.status != "ok":
        LOG.error("%s", parsed.reason)
        if args.failures_dir and parsed.failed_stage == "parse":  # a fetch failure is recorded by fetch
            failures.record_failure("parse", entry, str(parsed.reason), args.failures_dir)
    write_parsed(parsed, args.out_npz, args.out_json)
    LOG.info("entry %s: %s, %d chains (%d protein) in %.3f s", entry, parsed.status, len(parsed.chains),
             len(parsed.arrays), time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
