"""CLI: ``python -m foldworks.parse --entry 1aki --input X.cif.gz --out-npz X.npz --out-json X.json``.

A broken entry is written as ``status: failed`` (empty npz) and the exit status is still 0;
invalid arguments (bad entry ID, missing input, bad ``--params``) exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from foldworks.ids import InvalidIdentifier, normalize_entry
from foldworks.logutil import setup_logging
from foldworks.parse.core import ParseOptions, parse_entry
from foldworks.parse.io import write_parsed

LOG = logging.getLogger("foldworks.parse")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.parse", description=__doc__.splitlines()[0])
    parser.add_argument("--entry", required=True, help="PDB ID, e.g. 1aki")
    parser.add_argument("--input", required=True, help="data/raw/{entry}.cif.gz (or a legacy .pdb.gz)")
    parser.add_argument("--out-npz", required=True, help="output .npz path")
    parser.add_argument("--out-json", required=True, help="output .json path")
    parser.add_argument("--params", default="{}", help='JSON, e.g. {"mse_to_met": true}')
    return parser


def main(argv: list[str] | None = None) -> int:
    setup_logging("parse")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        entry = normalize_entry(args.entry)
        options = ParseOptions.from_mapping(json.loads(args.params))
    except (InvalidIdentifier, ValueError, TypeError) as exc:
        parser.error(str(exc))
    if not Path(args.input).is_file():
        parser.error(f"entry {entry}: input {args.input} does not exist")
    start = time.perf_counter()
    parsed = parse_entry(args.input, entry, options)
    write_parsed(parsed, args.out_npz, args.out_json)
    LOG.info("entry %s: %s, %d chains (%d protein) in %.3f s", entry, parsed.status, len(parsed.chains),
             len(parsed.arrays), time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
