"""CLI: ``python -m foldworks.fetch --entry 1aki --source <url-or-dir> --out X.cif.gz --record X.json``.

Exit status 0 on success, 1 when the entry cannot be fetched (the message names it), 2 for
invalid arguments (bad entry ID, bad source, bad ``--params``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from foldworks.fetch.core import FetchParams, classify_source, fetch_entry
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
    return parser


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
    try:
        fetch_entry(entry, args.source, args.out, args.record, params)
    except FetchError as exc:
        LOG.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
