"""Design family (mpnn) on CPU: training throughput, and test recovery after a fixed CPU budget.

    nice -n 10 .venv/bin/python bench/bench_mpnn.py [--data data] [--budget-s 300] [--experiment mpnn]
                                                    [--out bench/mpnn.md]

Uses the experiment's config from ``config/config.yaml`` (model, crop, batch, lr) and the feature
cache under ``--data`` (``chains.parquet`` + ``features/``; the demo's, or any cache with the same
layout). One torch thread.

1. Throughput: forward + loss + backward + AdamW of the model on real training crops (the
   DataModule's first batches), residues/s over ``--probe-steps`` steps after 2 warm-up steps.
2. Fixed budget: the whole trainer (``foldworks.train.run.fit``: loader, EMA, validation,
   checkpoints) for as many steps as the measured step time allows in ``--budget-s`` (two
   validations), then design of every test chain (``--samples`` at T = 0.1) and the design
   evaluation: mean test recovery and perplexity against the composition baselines.
Writes a Markdown report to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]


def throughput(params: dict, chains: Path, features: Path, steps: int) -> dict[str, float]:
    """Model step time on real crops: ms per step, residues/s (real residues, padding excluded)."""
    from foldworks.models import build_model
    from foldworks.train.config import resolve_config
    from foldworks.train.data import FeatureDataModule

    config = resolve_config(params)
    data = FeatureDataModule(chains, features, config["data"], 0, 0, steps + 2, 1)
    data.setup("fit")
    torch.manual_seed(0)
    model = build_model(config["model"], config["model_config"]).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = list(b for _, b in zip(range(steps + 2), data.train_dataloader()))
    elapsed, cpu, residues = 0.0, 0.0, 0
    for index, batch in enumerate(batches):
        start, cpu_start = time.perf_counter(), time.process_time()
        loss, _ = model.loss(batch, model(batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if index >= 2:
            elapsed += time.perf_counter() - start
            cpu += time.process_time() - cpu_start
            residues += int(batch["mask"].sum())
    return {"ms": 1000 * elapsed / steps, "cpu_ms": 1000 * cpu / steps, "residues_s": residues / elapsed,
            "residues_cpu_s": residues / cpu,
            "residues_per_step": residues / steps}


def budget_run(name: str, params: dict, chains: Path, features: Path, budget: float, step_s: float,
               samples: int, work: Path, fixed_steps: int = 0) -> dict[str, float]:
    """Trainer for ~``budget`` s (or ``fixed_steps``), then design + evaluation of the test split."""
    from foldworks.evaluate.design import evaluate_design
    from foldworks.evaluate.scoring import split_targets
    from foldworks.predict.design import design_settings, predict_design
    from foldworks.train.checkpoint import model_from_checkpoint
    from foldworks.train.run import fit

    steps = fixed_steps or max(2, int(budget / step_s) // 2 * 2)
    params = json.loads(json.dumps(params))
    params.pop("init_from", None)
    params["trainer"] = {**params.get("trainer", {}), "max_steps": steps, "val_every_n_steps": steps // 2}
    start, cpu = time.perf_counter(), time.process_time()
    fit(name, params, chains, features, work / "ckpt", 1, {"accelerator": "cpu"})
    train_s, train_cpu = time.perf_counter() - start, time.process_time() - cpu
    model, _ = model_from_checkpoint(work / "ckpt" / "best.ckpt")
    start = time.perf_counter()
    predict_design(model, chains, features, work / "pred", ["test"], [],
                   design_settings({"n_samples": samples, "temperature": 0.1}))
    predict_s = time.perf_counter() - start
    rows = pd.DataFrame(evaluate_design(work / "pred", work / "ckpt" / "best.ckpt", chains, features,
                                        split_targets(chains, ["test"])))
    log = pd.read_csv(work / "ckpt" / "metrics.csv")
    return {"steps": steps, "train_s": train_s, "train_cpu": train_cpu, "predict_s": predict_s, "targets": len(rows),
            "recovery": rows["recovery"].mean(), "recovery_best": rows["recovery_best"].mean(),
            "perplexity": rows["perplexity"].mean(), "mode": rows["baseline_mode_recovery"].mean(),
            "background": rows["baseline_background_recovery"].mean(),
            "val_recovery": log["val_recovery"].tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "data", help="holds chains.parquet and features/")
    parser.add_argument("--experiment", default="mpnn")
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--probe-steps", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--steps", type=int, default=0, help="fixed trainer steps instead of --budget-s")
    parser.add_argument("--lr", type=float, default=0.0, help="override the experiment's trainer.lr")
    parser.add_argument("--out", type=Path, default=REPO / "bench/mpnn.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    params = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"][args.experiment]
    if args.lr:
        params.setdefault("trainer", {})["lr"] = args.lr
    chains, features = args.data / "chains.parquet", args.data / "features"
    table = pd.read_parquet(chains)
    tp = throughput(params, chains, features, args.probe_steps)
    with tempfile.TemporaryDirectory() as tmp:
        result = budget_run(args.experiment, params, chains, features, args.budget_s, tp["ms"] / 1000,
                            args.samples, Path(tmp), args.steps)
    load = os.getloadavg()[0]
    lines = [
        "# Design family on CPU (bench/bench_mpnn.py)", "",
        f"Experiment `{args.experiment}` of config/config.yaml: `{json.dumps(params.get('model_config', {}))}`, "
        f"data `{json.dumps(params.get('data', {}))}`; feature cache {args.data} "
        f"({int((table['split'] == 'train').sum())} train / {int((table['split'] == 'val').sum())} val / "
        f"{int((table['split'] == 'test').sum())} test chains); torch {torch.__version__}, 1 thread, "
        f"load average {load:.1f} at the end (2 shared cores).", "",
        "| measure | value |", "|---|---:|",
        f"| model step (forward, loss, backward, AdamW), ms wall / CPU | {tp['ms']:.0f} / {tp['cpu_ms']:.0f} |",
        f"| residues per step (real, crop {params['data']['crop_size']}) | {tp['residues_per_step']:.0f} |",
        f"| training throughput, residues/s wall / per CPU-second | {tp['residues_s']:.0f} / {tp['residues_cpu_s']:.0f} |",
        f"| trainer steps ({'fixed' if args.steps else f'budget {args.budget_s:.0f} s'}): wall / CPU s | "
        f"{result['steps']}: {result['train_s']:.0f} / {result['train_cpu']:.0f} |",
        f"| validation recovery at steps 0 / {result['steps'] // 2} / {result['steps']} | "
        f"{' / '.join(f'{v:.3f}' for v in result['val_recovery'])} |",
        f"| design of {result['targets']} test chains ({args.samples} samples, T 0.1), s | {result['predict_s']:.0f} |",
        f"| **test recovery** (mean over chains of the sample mean) | **{result['recovery']:.3f}** |",
        f"| test recovery, highest-scoring sample | {result['recovery_best']:.3f} |",
        f"| native perplexity (per residue) | {result['perplexity']:.2f} |",
        f"| baseline: most-frequent train residue | {result['mode']:.3f} |",
        f"| baseline: sampling train background (mean p[native]) | {result['background']:.3f} |",
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
