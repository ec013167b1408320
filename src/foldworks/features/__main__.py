"""CLI of the features stage::

    python -m foldworks.features --parsed data/parsed/1aki.npz --chain A \\
        --a3m data/msa/ab/<hash>.a3m --target 1aki_A --out data/features/1aki_A.npz \\
        --params '{"max_msa_rows": 5632, "seed": 0, "allow_single_sequence_fallback": false}' \\
        --failure-record data/failures/features/1aki_A.json

A refused target (its MSA failed and fallback is off, or any other inconsistency) exits with
status 1, logs an error naming it and writes a failure record; a later success removes it.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Sequence

from foldworks import fsutil
from foldworks.failures import write_failure
from foldworks.features.build import DEFAULT_MAX_MSA_ROWS, build_features, load_chain_arrays
from foldworks.ids import validate_chain
from foldworks.logutil import setup_logging

LOG = logging.getLogger("foldworks.features")
DEFAULT_PARAMS = {"max_msa_rows": DEFAULT_MAX_MSA_ROWS, "seed": 0, "allow_single_sequence_fallback": False}


def main(argv: Sequence[str] | None = None) -> int:
    """Build one target's features file; exit status 1 with a logged error naming the target."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.features", description="Build one chain's features npz")
    parser.add_argument("--parsed", required=True, help="parse-stage npz of the entry")
    parser.add_argument("--chain", required=True, help="author chain ID")
    parser.add_argument("--a3m", required=True, help="the chain sequence's a3m (need not exist with fallback)")
    parser.add_argument("--target", required=True, help="{entry}_{chain}")
    parser.add_argument("--out", required=True, help="output npz")
    parser.add_argument("--params", default="{}", help=f"JSON: {json.dumps(DEFAULT_PARAMS)}")
    parser.add_argument("--failure-record", help="failure record path (written when the target is refused)")
    args = parser.parse_args(argv)
    setup_logging("features")
    try:
        params = {**DEFAULT_PARAMS, **json.loads(args.params)}
        unknown = set(params) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"unknown features params: {', '.join(sorted(unknown))}")
        chain_arrays = load_chain_arrays(args.parsed, validate_chain(args.chain), args.target)
        a3m = Path(args.a3m)
        a3m_text = a3m.read_text(encoding="utf-8", errors="replace") if a3m.exists() else None
        if a3m_text is None:
            LOG.warning("features %s: %s does not exist", args.target, a3m)
        features = build_features(chain_arrays, a3m_text, args.target, int(params["max_msa_rows"]),
                                  int(params["seed"]), bool(params["allow_single_sequence_fallback"]))
        fsutil.write_npz_atomic(args.out, features)
    except (ValueError, OSError, KeyError) as exc:
        message = str(exc) if str(exc).startswith(args.target) else f"{args.target}: {exc}"
        LOG.error("features %s", message)
        if args.failure_record:
            write_failure(args.failure_record, "features", args.target, message)
        return 1
    if args.failure_record and Path(args.failure_record).exists():
        Path(args.failure_record).unlink()
    level = logging.WARNING if str(features["msa_source"]) == "single_sequence_fallback" else logging.INFO
    LOG.log(level, "features %s: L=%d, %d MSA rows (%s) -> %s", args.target, features["aatype"].shape[0],
            features["msa"].shape[0], features["msa_source"], args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
