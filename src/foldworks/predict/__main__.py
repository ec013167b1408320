"""CLI: ``python -m foldworks.predict --checkpoint C --chains P --features-dir D --out-dir D --splits test [--train-subset K] [--threads N] [--max-memory-gb G] [--precision fp32|bf16] [--device auto|cpu|cuda] [--chunk-size N] [--templates-dir D] [--design JSON]``.

The checkpoint's family decides the output: a structure family writes mmCIF
(:mod:`foldworks.predict.run`), a design family FASTA (:mod:`foldworks.predict.design`, sampled
with ``--design '{"n_samples": 8, "temperature": 0.1, "seed": 0}'``; ignored for structure).
"""

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
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="inference precision")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="attention rows per chunk (less memory for long chains; same results)")
    parser.add_argument("--templates-dir", type=Path, default=None,
                        help="data/templates/features: template features for a model that uses templates")
    parser.add_argument("--design", default="{}", help="design-family sampling settings as JSON (predict.design)")
    args = parser.parse_args(argv)
    setup_logging("predict")
    splits = [s for s in args.splits.split(",") if s]
    if not set(splits) <= {"train", "val", "test"}:
        logging.error("--splits %r: expected train, val and/or test", args.splits)
        return 2
    import torch

    from foldworks.predict.run import predict

    torch.set_num_threads(max(1, args.threads))
    from foldworks.models import model_task
    from foldworks.predict.memory import ChainTooLarge
    from foldworks.train.checkpoint import load_checkpoint

    config = load_checkpoint(args.checkpoint)["hyper_parameters"]["config"]
    if model_task(config["model"]) == "design":
        return _design(args, splits)
    try:
        rows = predict(args.checkpoint, args.chains, args.features_dir, args.out_dir, splits, args.train_subset,
                       args.max_memory_gb, args.precision, args.device, args.chunk_size, args.templates_dir)
    except (ChainTooLarge, ValueError) as exc:  # too large, or a chain without template features
        logging.error("%s", exc)
        return 1
    logging.info("wrote %d predictions to %s", len(rows), args.out_dir)
    return 0


def _design(args: argparse.Namespace, splits: list[str]) -> int:
    import json

    import pandas as pd

    from foldworks.predict.design import design_settings, predict_design
    from foldworks.predict.run import train_subset
    from foldworks.train.checkpoint import model_from_checkpoint
    from foldworks.train.data import select_targets

    try:
        settings = design_settings(json.loads(args.design or "{}"))
    except (ValueError, json.JSONDecodeError) as exc:
        logging.error("%s: --design: %s", args.checkpoint, exc)
        return 2
    model, _ = model_from_checkpoint(args.checkpoint)
    train_jobs = train_subset(select_targets(pd.read_parquet(args.chains), ["train"], args.features_dir),
                              args.train_subset) if args.train_subset > 0 else []
    rows = predict_design(model, args.chains, args.features_dir, args.out_dir, splits, train_jobs, settings)
    logging.info("wrote designs for %d chains to %s (%s)", len(rows), args.out_dir, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
