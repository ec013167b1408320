"""Data-loader time per batch against training-step time on CPU (one run).

    .venv/bin/python bench/bench_train.py [--chains data/chains.parquet] [--features-dir data/features]
                                          [--batches 40] [--out bench/train.md]

Uses the demo feature cache (``make demo``) with the default experiment configs
(``config/config.yaml``: crop 64, batch 8, 64 MSA rows). Measured, one torch thread:

- loader: the trainer's own train DataLoader (cluster-weighted sampler, length buckets, per-item
  npz read + crop + collate) with 0 and 1 worker processes, ms per batch as the consumer sees it
  (the first batch, worker start-up, is excluded);
- step: forward + loss + backward + AdamW step of each registered family on those same batches;
- iteration: the same step fed by a 1-worker loader (loading overlaps the step);
- padding: padded residue slots / all residue slots with length buckets vs without (window 1),
  at crop 64 and at crop 256 (where chains are shorter than the crop more often).
Writes a Markdown table to ``--out``.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from foldworks.models import build_model
from foldworks.train.config import resolve_config
from foldworks.train.data import FeatureDataModule
from foldworks.train.sampling import TrainBatchSampler

REPO = Path(__file__).resolve().parents[1]


def time_loader(module: FeatureDataModule, batches: int) -> tuple[float, list[dict[str, torch.Tensor]]]:
    """Milliseconds per batch over ``batches`` batches after the first; returns the batches too."""
    loader = module.train_dataloader()
    iterator = iter(loader)
    first = next(iterator)
    kept, start = [first], time.perf_counter()
    for _ in range(batches):
        kept.append(next(iterator))
    elapsed = time.perf_counter() - start
    del iterator
    return 1000.0 * elapsed / batches, kept


def time_steps(config: dict[str, Any], batches: list[dict[str, torch.Tensor]]) -> float:
    """Milliseconds per optimiser step (forward, loss, backward, AdamW) of the experiment's model."""
    torch.manual_seed(0)
    model = build_model(config["model"], config["model_config"]).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch: dict[str, torch.Tensor]) -> None:
        loss, _ = model.loss(batch, model(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step(batches[0])  # warm-up
    start = time.perf_counter()
    for batch in batches[1:]:
        step(batch)
    return 1000.0 * (time.perf_counter() - start) / (len(batches) - 1)


def time_iterations(config: dict[str, Any], module: FeatureDataModule, batches: int) -> float:
    """Milliseconds per training iteration (wait for the next batch + step) with the module's workers."""
    torch.manual_seed(0)
    model = build_model(config["model"], config["model_config"]).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    iterator = iter(module.train_dataloader())
    for index in range(batches + 1):
        if index == 1:
            start = time.perf_counter()  # the first batch pays for worker start-up
        batch = next(iterator)
        loss, _ = model.loss(batch, model(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return 1000.0 * (time.perf_counter() - start) / batches


def padding_fraction(lengths: np.ndarray, weights: np.ndarray, crop: int, batch: int, window: int) -> float:
    """Padded residue slots / all slots over 2000 batches of the trainer's sampler."""
    capped = np.minimum(lengths, crop)
    sampler = TrainBatchSampler(capped, weights, batch, window, seed=0, weighted=True, total=2000)
    padded = total = 0
    for keys in sampler:
        sizes = capped[[k[2] for k in keys]]
        padded += int(sizes.max() * len(sizes) - sizes.sum())
        total += int(sizes.max() * len(sizes))
    return padded / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=Path, default=REPO / "data/chains.parquet")
    parser.add_argument("--features-dir", type=Path, default=REPO / "data/features")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--out", type=Path, default=REPO / "bench/train.md")
    args = parser.parse_args()
    if not args.chains.exists():
        raise SystemExit(f"{args.chains} not found: run `make demo` first (the feature cache is the input)")
    torch.set_num_threads(1)
    experiments = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    configs = {name: resolve_config(params) for name, params in experiments.items()}
    first = next(iter(configs.values()))
    rows, batches = [], []
    for workers in (0, 1):
        module = FeatureDataModule(args.chains, args.features_dir, first["data"], 0, workers, 10 ** 6)
        ms, kept = time_loader(module, args.batches)
        batches = batches or kept
        rows.append((f"loader, {workers} worker{'s' if workers != 1 else ''}: next batch (no step in between)", ms))
    residues = float(np.mean([int(b["mask"].sum()) for b in batches]))
    steps = {name: time_steps(config, batches) for name, config in configs.items()}
    overlapped = {name: time_iterations(config, module, args.batches) for name, config in configs.items()}
    lengths, weights = module.train_rows["length"].to_numpy(), module.train_rows["weight"].to_numpy()
    pads = {(crop, window): padding_fraction(lengths, weights, crop, 8, window) for crop in (64, 256) for window in (1, 8)}
    write_report(args, rows, steps, overlapped, residues, pads, len(module.train_rows))


def write_report(args: argparse.Namespace, rows: list[tuple[str, float]], steps: dict[str, float],
                 overlapped: dict[str, float], residues: float, pads: dict[tuple[int, int], float], n_train: int) -> None:
    loader0 = rows[0][1]
    lines = ["# Trainer benchmark (bench/bench_train.py, one run)", "",
             f"Demo feature cache, {n_train} train chains; default experiment configs (crop 64, batch 8, 64 MSA rows); "
             f"{args.batches} batches, {residues:.0f} residues per batch on average; one torch thread, "
             f"{platform.machine()}, Python {platform.python_version()}, load average at end "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.", "",
             "| what | ms per batch | loader / step |", "|---|---:|---:|"]
    for name, ms in rows:
        lines.append(f"| {name} | {ms:.1f} | |")
    for name, ms in steps.items():
        lines.append(f"| {name}: training step (forward, loss, backward, AdamW) | {ms:.1f} | {loader0 / ms:.2f} |")
    for name, ms in overlapped.items():
        lines.append(f"| {name}: iteration = batch wait + step, 1 loader worker | {ms:.1f} | |")
    lines += ["", "| padded residue slots (batch 8) | no buckets | length buckets (window 8 batches) |",
              "|---|---:|---:|"]
    for crop in (64, 256):
        lines.append(f"| crop {crop} | {100 * pads[(crop, 1)]:.1f} % | {100 * pads[(crop, 8)]:.1f} % |")
    lines += ["", "With 0 workers (the default `threads: 1`) the loader time adds to every step; with `threads >= 2` "
              "the trainer uses `threads - 1` workers and loading overlaps the step (iteration rows).", ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
