"""CLI: ``python -m foldworks.fetch --entry 1aki --source <url-or-dir> --out X.cif.gz --record X.json``.

An entry that cannot be fetched (not found, corrupt or HTML content, over the size cap, network
trouble after every retry) is a result, not a crash: the record JSON gets ``status: failed``, a
one-line ``reason`` naming the entry and ``transient``; no structure file is left at ``--out``
(a stale one from an earlier fetch is removed); with ``--failures-dir`` a failure record goes to
``<dir>/fetch/<entry>.json`` (removed again after a later success). Exit status 0 in both cases,
so one bad entry never stops a ``--keep-going`` run; 2 for invalid arguments (bad entry ID, bad
source, bad ``--params``); 1 only when the outputs themselves cannot be written (disk full ...).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from foldworks import failures, fsutil
from foldworks.fetch.core import FetchParams, classify_source, failed_record, fetch_entry
from foldworks.fetch.http import FetchError
from foldworks.ids import InvalidIdentifier, normalize_entry
from foldworks.logutil import setup_logging

LOG = logging.getLogger("foldworks.fetch")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.fetch", description=__doc__.splitlines()[0])
    parser.add_argument("--entry", required=True, help="PDB ID, e.g. 1aki")
    parser.add_argument("--source", required=True, help="https URL prefix or local mirror directory")
    parser.add_argument("--out", required=True, help="output .cif.gz path")
    parser.add_argument("--record", required=True, help="output record .json path")
    parser.add_argument("--params", default="{}", help='JSON, e.g. {"timeout_s": 30, "retries": 4}')
    parser.add_argument("--failures-dir", default=None, help="write/clear <dir>/fetch/<entry>.json (data/failures)")
    parser.add_argument("--attempt-token", default="", help="copied into the record (workflow retry bookkeeping)")
    return parser


def record_failure(entry: str, args: argparse.Namespace, exc: BaseException) -> None:
    """Write the failed record (and failure record); remove a stale structure file."""
    record = failed_record(entry, args.source, exc, args.attempt_token)
    Path(args.out).unlink(missing_ok=True)  # never leave a structure the record disowns
    if args.failures_dir:
        failures.record_failure("fetch", entry, record["reason"], args.failures_dir)
    fsutil.write_json_atomic(args.record, record)  # the declared output comes last
    LOG.error("%s%s", record["reason"], " (transient: retried on the next run)" if record["transient"] else "")


def main(argv: list[str] | None = None) -> int:
    setup_logging("fetch")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        entry = normalize_entry(args.entry)
        params = FetchParams.from_mapping(json.loads(args.params))
        classify_source(args.source)
    except (InvalidIdentifier, ValueError, TypeError) as exc:  # json errors are ValueErrors
        parser.error(str(exc))
    if args.failures_dir:  # cleared first: a success must not leave an old failure behind
        failures.clear_failure("fetch", entry, args.failures_dir)
    try:
        fetch_entry(entry, args.source, args.out, args.record, params, attempt_token=args.attempt_token)
    except FetchError as exc:
        record_failure(entry, args, exc)
        return 0
    except (RuntimeError, ValueError, LookupError, MemoryError) as exc:  # a bug or odd file: one entry only
        LOG.exception("entry %s: unexpected error", entry)
        record_failure(entry, args, FetchError(f"entry {entry}: unexpected {type(exc).__name__}: {exc}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
