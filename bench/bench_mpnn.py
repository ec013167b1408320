"""Design family (mpnn) on CPU: design throughput, and (``--training``) training throughput and test
recovery after a fixed CPU budget.

    nice -n 10 .venv/bin/python bench/bench_mpnn.py --design [--mirror ../shared/pdb_mirror] [--out bench/mpnn.md]
    nice -n 10 .venv/bin/python bench/bench_mpnn.py --training [--data data] [--budget-s 300] [--experiment mpnn]

``--design``: ProteinMPNN sampling (:func:`foldworks.models.mpnn.sample`, v_48_020 size: hidden
128, K = 48, 3+3 layers, random weights: the time does not depend on the values) on the
first L residues of 4HHB's chains (A, B, C, D concatenated: a real multi-chain backbone) for
L = 100 and 300; sequences/s (encoder + decoding + re-scoring, as the design command does per
sequence) and the process's peak resident memory. One torch thread. The figures are prepended
to ``--out``.

``--training``:
uses the experiment's config from ``config/config.yaml`` (model, crop, batch, lr) and the feature
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


def design_throughput(mirror: Path, lengths: tuple[int, ...], n_seq: int, batch: int) -> list[dict[str, float]]:
    """Sequences/s and peak RSS (MiB) of sampling + re-scoring at each length (v_48_020 size)."""
    import resource

    from foldworks.design.structure import featurize, read_chains
    from foldworks.models.mpnn import MPNNModel, sample

    torch.manual_seed(0)
    model = MPNNModel(preset="v_48_020").eval()
    full = featurize(read_chains(mirror / "4hhb.cif.gz"))
    rows = []
    for length in lengths:
        x = {k: full[k][:, :length].expand(batch, length, *full[k].shape[2:]).contiguous()
             for k in ("X", "S", "mask", "chain_M", "residue_idx", "chain_encoding_all")}
        omit = torch.tensor([1.0 if a == "X" else 0.0 for a in "ACDEFGHIKLMNPQRSTVWYX"])
        start, cpu = time.perf_counter(), time.process_time()
        with torch.no_grad():
            for _ in range(n_seq // batch):
                randn = torch.randn(x["mask"].shape)
                out = sample(model, x["X"], randn, x["S"], x["chain_M"], x["chain_encoding_all"], x["residue_idx"],
                             x["mask"], 0.1, omit_AAs=omit)
                model.log_probs(x["X"], out["S"], x["mask"], x["chain_M"], x["residue_idx"],
                                x["chain_encoding_all"], randn, order=out["decoding_order"])
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        rows.append({"L": length, "seqs": n_seq, "batch": batch, "wall_s": wall, "cpu_s": cpu,
                     "seq_per_s": n_seq / wall, "seq_per_cpu_s": n_seq / cpu,
                     "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    return rows


def design_report(rows: list[dict[str, float]], out: Path, command: str) -> None:
    lines = ["# ProteinMPNN design throughput on CPU (bench/bench_mpnn.py --design)", "",
             f"v_48_020 size (hidden 128, K = 48, 3+3 layers), temperature 0.1, X omitted; backbone = first L "
             f"residues of 4HHB (chains A-D concatenated); torch {torch.__version__}, 1 thread, load average "
             f"{os.getloadavg()[0]:.1f} at the end (2 shared cores: compare CPU seconds).", "",
             "| L | sequences (batch) | wall s | CPU s | sequences/s wall | sequences per CPU-s | peak RSS MiB |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['L']} | {r['seqs']} ({r['batch']}) | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['seq_per_s']:.2f} | {r['seq_per_cpu_s']:.2f} | {r['peak_rss_mib']:.0f} |")
    lines += ["", "Per sequence: the encoder, L decoding steps (each runs the 3 decoder layers on one position "
              "and its K neighbours) and the teacher-forced re-scoring. Peak RSS is the whole process's "
              "high-water mark (Python, torch, the model), cumulative over the rows.", "", f"Command: `{command}`",
              "", ""]
    previous = out.read_text() if out.exists() else ""
    out.write_text("\n".join(lines) + previous)
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--design", action="store_true", help="design throughput (default)")
    parser.add_argument("--training", action="store_true", help="training throughput + fixed-budget recovery")
    parser.add_argument("--mirror", type=Path, default=REPO.parent / "shared" / "pdb_mirror")
    parser.add_argument("--lengths", default="100,300")
    parser.add_argument("--seqs", type=int, default=4, help="sequences per length (--design)")
    parser.add_argument("--batch", type=int, default=1, help="sequences sampled together (--design)")
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
    if not args.training:
        import sys

        rows = design_throughput(args.mirror, tuple(int(v) for v in args.lengths.split(",")), args.seqs, args.batch)
        design_report(rows, args.out, "nice -n 10 .venv/bin/python bench/bench_mpnn.py " + " ".join(sys.argv[1:]))
        return
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
