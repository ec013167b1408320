"""CLI of the features stage::

    python -m foldworks.features --parsed data/parsed/1aki.npz --chain A \\
        --a3m data/msa/ab/<hash>.a3m --target 1aki_A --out data/features/1aki_A.npz \\
        --params '{"max_msa_rows": 256, "seed": 0}'
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Sequence

from foldworks.logutil import setup_logging
from foldworks import fsutil
from foldworks.features.build import build_features, load_chain_arrays
from foldworks.ids import validate_chain

LOG = logging.getLogger("foldworks.features")
DEFAULT_PARAMS = {"max_msa_rows": 256, "seed": 0}


def main(argv: Sequence[str] | None = None) -> int:
    """Build one target's features file; exit status 1 with a logged error naming the target."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.features", description="Build one chain's features npz")
    parser.add_argument("--parsed", required=True, help="parse-stage npz of the entry")
    parser.add_argument("--chain", required=True, help="author chain ID")
    parser.add_argument("--a3m", required=True, help="the chain sequence's a3m")
    parser.add_argument("--target", required=True, help="{entry}_{chain}")
    parser.add_argument("--out", required=True, help="output npz")
    parser.add_argument("--params", default="{}", help='JSON: {"max_msa_rows": 256, "seed": 0}')
    args = parser.parse_args(argv)
    setup_logging("features")
    try:
        params = {**DEFAULT_PARAMS, **json.loads(args.params)}
        unknown = set(params) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"unknown features params: {', '.join(sorted(unknown))}")
        chain_arrays = load_chain_arrays(args.parsed, validate_chain(args.chain), args.target)
        a3m_text = Path(args.a3m).read_text(encoding="utf-8", errors="replace")
        features = build_features(chain_arrays, a3m_text, args.target,
                                  int(params["max_msa_rows"]), int(params["seed"]))
        fsutil.write_npz_atomic(args.out, features)
    except (ValueError, OSError, KeyError) as exc:
        message = str(exc)
        LOG.error("features %s", message if message.startswith(args.target) else f"{args.target}: {message}")
        return 1
    LOG.info("features %s: L=%d, %d MSA rows -> %s", args.target, features["aatype"].shape[0],
             features["msa"].shape[0], args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
