"""CLI: ``python -m foldworks.predict --checkpoint C --chains P --features-dir D --out-dir D --splits test [--train-subset K] [--threads N] [--max-memory-gb G]``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from foldworks.logutil import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.predict", description=__doc__)
    parser.add_argument("--checkpoint", required=True, type=Path, help="results/checkpoints/NAME/best.ckpt")
    parser.add_argument("--chains", required=True, type=Path, help="data/chains.parquet")
    parser.add_argument("--features-dir", required=True, type=Path, help="data/features")
    parser.add_argument("--out-dir", required=True, type=Path, help="results/predictions/NAME")
    parser.add_argument("--splits", default="test", help="comma-separated splits to predict (default: test)")
    parser.add_argument("--train-subset", type=int, default=0, help="also predict up to K train chains")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-memory-gb", type=float, default=0.0,
                        help="refuse a chain whose estimated activation memory exceeds this (0: no limit)")
    args = parser.parse_args(argv)
    setup_logging("predict")
    splits = [s for s in args.splits.split(",") if s]
    if not set(splits) <= {"train", "val", "test"}:
        logging.error("--splits %r: expected train, val and/or test", args.splits)
        return 2
    import torch

    from foldworks.predict.run import predict

    torch.set_num_threads(max(1, args.threads))
    from foldworks.predict.memory import ChainTooLarge

    try:
        rows = predict(args.checkpoint, args.chains, args.features_dir, args.out_dir, splits, args.train_subset,
                       args.max_memory_gb)
    except ChainTooLarge as exc:
        logging.error("%s", exc)
        return 1
    logging.info("wrote %d predictions to %s", len(rows), args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
