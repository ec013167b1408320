"""GPU training throughput of each model family (bf16-mixed), for a machine with a CUDA GPU.

Covers every experiment of ``config/config.yaml``, the design family (``mpnn``, ``mpnn_ft``) too:
the synthetic batches carry a backbone (N, CA, C, O) for it.

    .venv/bin/python bench/gpu_train.py [--crops 64 128 256] [--batch 8] [--steps 30]
                                        [--trainer-steps 40] [--out bench/gpu_train.md]

``--device cpu --crops 32 --steps 2 --trainer-steps 0`` is a smoke test of the script itself (the
AF2 rows then use the ``cpu_small`` preset at 16 residues; nothing is written without ``--out``).
Measures, per family (default ``config/config.yaml`` model configs) and crop size:

- model step: forward + loss + backward + AdamW under ``torch.autocast(bfloat16)`` on synthetic
  batches (random sequence/MSA, a random-walk Cα trace with 3.8 Å steps), ms per step after
  warm-up, chains/s and residues/s, peak GPU memory;
- the ``evoformer`` family, while its config is the analytic-FLOP one of ``bench/evoformer_flops.py``,
  also gets model FLOPs per step and MFU = model FLOP/s / the GPU's dense bf16 peak (H200/H100
  989 TFLOP/s);
- ``--openfold-crops`` adds the AlphaFold2 presets ``--af2-presets`` (default ``initial_training``:
  full-size ``model_1``, activation checkpointing per block) built from ``foldworks.models.af2``
  directly, batch ``--openfold-batch``, trained with AF2's loss (``alphafold_loss``, initial-training
  weights) on random AF2-layout features (``--af2-clusters`` MSA clusters, ``--af2-extra`` extra-MSA
  rows, 4 templates, ``--af2-recycles`` recycles every step) of a synthetic chain
  (``bench/gpu_predict.py``). Their TFLOP/step are counted by ``torch.utils.flop_counter`` on one
  step: hardware FLOPs, recomputed blocks and no-grad recycles included;
- with ``--trainer-steps N`` and the demo feature cache (``data/``): the whole trainer
  (``foldworks.train.run.fit``: loader workers, EMA, non-finite guard, validation, checkpoints)
  for N steps with ``accelerator=gpu, precision=bf16-mixed``, wall seconds per step.
Writes a Markdown table to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from evoformer_flops import bf16_peak, forward_flops, sizes_from_config
from gpu_predict import synthetic_truth
from bench_af2_step import random_features
from foldworks.models import build_model
from foldworks.models.af2 import AlphaFold2, preset
from foldworks.models.af2.loss import alphafold_loss

REPO = Path(__file__).resolve().parents[1]


def synthetic_batch(batch: int, length: int, rows: int, device: str) -> dict[str, torch.Tensor]:
    """A padded model batch (see foldworks.models.common) of random chains of ``length`` residues."""
    g = torch.Generator().manual_seed(length * 31 + batch)
    steps = torch.nn.functional.normalize(torch.randn(batch, length, 3, generator=g), dim=-1) * 3.8
    out = {
        "aatype": torch.randint(0, 20, (batch, length), generator=g),
        "msa": torch.randint(0, 22, (batch, rows, length), generator=g),
        "msa_mask": torch.ones(batch, rows, dtype=torch.bool),
        "deletion_matrix": torch.zeros(batch, rows, length),
        "mask": torch.ones(batch, length, dtype=torch.bool),
        "residue_mask": torch.ones(batch, length, dtype=torch.bool),
        "residue_index": torch.arange(length).expand(batch, length).clone(),
        "ca_coords": steps.cumsum(1),
    }
    # atom37 reference: N, CA, C, O, CB at fixed non-collinear offsets from the Cα (Å); enough for
    # the all-atom losses to run (timing only, not a physical structure)
    offsets = {0: (-0.5, 1.4, 0.0), 1: (0.0, 0.0, 0.0), 2: (1.5, 0.0, 0.0), 4: (2.1, -1.0, 0.0), 3: (-0.5, -0.8, 1.2)}
    positions = torch.zeros(batch, length, 37, 3)
    atom_mask = torch.zeros(batch, length, 37, dtype=torch.bool)
    for slot, offset in offsets.items():
        positions[:, :, slot] = out["ca_coords"] + torch.tensor(offset)
        atom_mask[:, :, slot] = True
    out.update(all_atom_positions=positions, all_atom_mask=atom_mask)
    return {k: v.to(device) for k, v in out.items()}


def time_model(name: str, model_config: dict[str, Any], batch: dict[str, torch.Tensor], steps: int,
               device: str) -> dict[str, float]:
    """ms per optimiser step, chains/s, residues/s and peak memory (GiB) of one family on one batch shape."""
    torch.manual_seed(0)
    model = build_model(name, model_config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    b, length = batch["aatype"].shape
    rows = batch["msa"].shape[1]
    cfg = getattr(model, "cfg", None) if name == "evoformer" else None
    cfg = cfg if isinstance(cfg, dict) else None  # analytic FLOPs need the dict config
    flops = [0.0]

    def step() -> None:
        with autocast:
            outputs = model(batch)
        loss, _ = model.loss(batch, outputs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if cfg is not None:  # no-grad recycling iterations: 1 forward each; the last: 3 (fwd + bwd)
            sizes = sizes_from_config(cfg)
            flops[0] += b * forward_flops(sizes, length, min(rows, sizes.max_msa_clusters)) * (
                model.last_n_recycles + 3)

    for _ in range(3):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    flops[0] = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else float("nan")
    result = {"ms": 1000 * seconds, "chains_s": b / seconds, "residues_s": b * length / seconds, "peak_gib": peak,
              "tflop_step": math.nan, "mfu": math.nan}
    if cfg is not None:
        result["tflop_step"] = flops[0] / steps / 1e12
        peak_flops = bf16_peak(torch.cuda.get_device_name(0)) if device == "cuda" else None
        if peak_flops:
            result["mfu"] = flops[0] / steps / seconds / peak_flops
    return result


def af2_batch(batch: int, crop: int, args: argparse.Namespace, device: str) -> tuple[dict, dict]:
    """``[B, R, ...]`` AF2 features and ``[B, ...]`` loss supervision of ``batch`` synthetic chains."""
    cycles = args.af2_recycles + 1
    feats, sups = [], []
    for i in range(batch):
        truth = synthetic_truth(crop, seed=i)
        f = random_features(crop, args.af2_clusters, args.af2_extra, 4, truth, seed=i)
        feats.append({k: v.expand(cycles, *v.shape[1:]) for k, v in f.items()})
        g = torch.Generator().manual_seed(i)
        sups.append({**truth, "seq_mask": torch.ones(crop), "residue_index": torch.arange(crop),
                     "true_msa": f["msa_feat"][-1, :, :, :23].argmax(-1),
                     "bert_mask": (torch.rand(args.af2_clusters, crop, generator=g) < 0.15).float(),
                     "seq_length": torch.tensor(crop), "use_clamped_fape": torch.tensor(1.0)})
    stack = lambda ds: {k: torch.stack([d[k] for d in ds]).to(device) for k in ds[0]}  # noqa: E731
    return stack(feats), stack(sups)


def time_af2(name: str, crop: int, batch: int, args: argparse.Namespace, device: str) -> dict[str, float]:
    """One AF2 preset trained as :func:`time_model` times a family, through ``models.af2`` and its loss."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = AlphaFold2(preset(name)).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    feats, sup = af2_batch(batch, crop, args, device)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    def step() -> None:
        with autocast:
            outputs = model(feats, batch_dims=1)
        loss, _ = alphafold_loss(outputs, sup)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    counter = FlopCounterMode(display=False)
    with counter:
        step()
    for _ in range(2):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    flops = counter.get_total_flops()
    peak_flops = bf16_peak(torch.cuda.get_device_name(0)) if device == "cuda" else None
    return {"ms": 1000 * seconds, "chains_s": batch / seconds, "residues_s": batch * crop / seconds,
            "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else float("nan"),
            "tflop_step": flops / 1e12, "mfu": flops / seconds / peak_flops if peak_flops else math.nan}


def time_trainer(experiments: dict[str, Any], steps: int, threads: int, device: str) -> dict[str, float]:
    """Wall seconds per step of the whole trainer on the demo cache (includes 2 validations)."""
    from foldworks.train.run import fit

    out = {}
    for name, params in experiments.items():
        params = json.loads(json.dumps(params))
        params.pop("init_from", None)  # chained experiments: timed from their own initial weights
        params.pop("predict", None)
        params.setdefault("trainer", {}).update({"max_steps": steps, "val_every_n_steps": steps})
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            fit(name, params, REPO / "data/chains.parquet", REPO / "data/features", Path(tmp), threads,
                {"accelerator": "gpu", "precision": "bf16-mixed"} if device == "cuda" else {"accelerator": "cpu"})
            out[name] = (time.perf_counter() - start) / steps
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--crops", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rows", type=int, default=64, help="MSA rows per chain")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--trainer-steps", type=int, default=40, help="0 skips the whole-trainer timing")
    parser.add_argument("--threads", type=int, default=8, help="trainer job threads (loader workers = threads - 1)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--families", nargs="*", help="experiments of config.yaml to time (default: all)")
    parser.add_argument("--openfold-crops", type=int, nargs="*", default=[128, 256],
                        help="crops for the AF2 preset rows (none: skip them)")
    parser.add_argument("--openfold-batch", type=int, default=1, help="chains per step of the AF2 preset rows")
    parser.add_argument("--af2-presets", nargs="+", default=["initial_training"],
                        help="AF2 presets (foldworks.models.af2.PRESETS) timed at --openfold-crops")
    parser.add_argument("--af2-clusters", type=int, default=128,
                        help="MSA clusters of the AF2 rows (AF2 training: 128)")
    parser.add_argument("--af2-extra", type=int, default=1024,
                        help="extra-MSA rows of the AF2 rows (AF2 training: 1024)")
    parser.add_argument("--af2-recycles", type=int, default=1, help="recycles of every AF2 training step")
    parser.add_argument("--out", type=Path, help="Markdown table (default: bench/gpu_train.md on a GPU)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on a GPU machine (or --device cpu for a smoke test)")
    if args.device == "cpu":  # smoke test on a shared machine: one thread, a tiny AF2 preset
        torch.set_num_threads(1)
        args.af2_presets, args.af2_clusters, args.af2_extra = ["cpu_small"], 8, 8
        args.openfold_crops = [16] if args.openfold_crops else []
    elif args.out is None:
        args.out = REPO / "bench/gpu_train.md"
    experiments = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    lines = ["# GPU training throughput (bench/gpu_train.py)", "",
             f"Device {gpu}, torch {torch.__version__}, batch {args.batch}, {args.rows} MSA rows, "
             f"{args.steps} timed steps after 3 warm-up steps, "
             f"{'bf16 autocast' if args.device == 'cuda' else 'fp32 (CPU smoke test)'}.", "",
             "| family | crop | batch | ms per step | chains/s | residues/s | peak GiB | model TFLOP/step | MFU |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cases = [(name, params["model"], params.get("model_config") or {}, crop, args.batch)
             for name, params in experiments.items() if not args.families or name in args.families
             for crop in args.crops]
    cases += [(f"af2 {name}", None, name, crop, args.openfold_batch)
              for name in args.af2_presets for crop in args.openfold_crops]
    for name, family, model_config, crop, batch_size in cases:
        if family is None:
            r = time_af2(model_config, crop, batch_size, args, args.device)
        else:
            batch = synthetic_batch(batch_size, crop, args.rows, args.device)
            r = time_model(family, model_config, batch, args.steps, args.device)
        tflop = "" if math.isnan(r["tflop_step"]) else f"{r['tflop_step']:.4g}"
        mfu = "" if math.isnan(r["mfu"]) else f"{100 * r['mfu']:.1f} %"
        lines.append(f"| {name} | {crop} | {batch_size} | {r['ms']:.1f} | {r['chains_s']:.1f} | {r['residues_s']:.0f} "
                     f"| {r['peak_gib']:.2f} | {tflop} | {mfu} |")
        print(lines[-1], flush=True)
    if args.openfold_crops:
        lines += ["", "AF2 rows: TFLOP/step counted by `torch.utils.flop_counter` on one step (recomputed "
                      "blocks and no-grad recycles included), so their MFU is a hardware-FLOP utilisation."]
    if args.trainer_steps > 0:
        lines += ["", f"Whole trainer on the demo cache, {args.trainer_steps} steps, "
                      f"{'bf16-mixed' if args.device == 'cuda' else 'fp32'}, "
                      f"{args.threads} threads:", "", "| experiment | s per step |", "|---|---:|"]
        chosen = {k: v for k, v in experiments.items() if not args.families or k in args.families}
        for name, seconds in time_trainer(chosen, args.trainer_steps, args.threads, args.device).items():
            lines.append(f"| {name} | {seconds:.3f} |")
    print("\n".join(lines))
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
