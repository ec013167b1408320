"""CLI: ``python -m foldworks.train --experiment NAME --params JSON --chains P --features-dir D --out-dir D --threads N``."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from foldworks.logutil import setup_logging
from foldworks.ids import InvalidIdentifier, validate_experiment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.train", description=__doc__)
    parser.add_argument("--experiment", required=True, help="experiment name (letters, digits, _ and -)")
    parser.add_argument("--params", required=True, help="experiment config as JSON")
    parser.add_argument("--chains", required=True, help="data/chains.parquet")
    parser.add_argument("--features-dir", required=True, help="data/features")
    parser.add_argument("--out-dir", required=True, help="results/checkpoints/NAME")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    setup_logging("train")
    try:
        experiment = validate_experiment(args.experiment)
        params = json.loads(args.params)
    except (InvalidIdentifier, json.JSONDecodeError) as exc:
        logging.error("experiment %r: %s", args.experiment, exc)
        return 2
    from foldworks.train.run import fit  # torch import only after argument checks

    try:
        fit(experiment, params, args.chains, args.features_dir, args.out_dir, args.threads)
    except ValueError as exc:
        logging.error("experiment %s: %s", experiment, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
