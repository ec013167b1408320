"""GPU training throughput of each model family (bf16-mixed), for a machine with a CUDA GPU.

Covers every experiment of ``config/config.yaml``, the design family (``mpnn``, ``mpnn_ft``) too:
the synthetic batches carry a backbone (N, CA, C, O) for it.

    .venv/bin/python bench/gpu_train.py [--crops 64 128 256] [--batch 8] [--steps 30]
                                        [--trainer-steps 40] [--out bench/gpu_train.md]

Not run on the 2-core development VM (no GPU); ``--device cpu --crops 32 --steps 2
--trainer-steps 0`` is a smoke test of the script itself. Measures, per family (default
``config/config.yaml`` model configs) and crop size:

- model step: forward + loss + backward + AdamW under ``torch.autocast(bfloat16)`` on synthetic
  batches (random sequence/MSA, a random-walk Cα trace with 3.8 Å steps), ms per step after
  warm-up, chains/s and residues/s, peak GPU memory;
- the ``evoformer`` family (AlphaFold2) gets its batches from AF2's input pipeline (the synthetic
  chain as the crop, training draws); ``--openfold-crops`` adds the ``initial_training`` preset
  (48 blocks, batch ``--openfold-batch``, activation checkpointing) at OpenFold's crop sizes;
- with ``--trainer-steps N`` and the demo feature cache (``data/``): the whole trainer
  (``foldworks.train.run.fit``: loader workers, EMA, non-finite guard, validation, checkpoints)
  for N steps with ``accelerator=gpu, precision=bf16-mixed``, wall seconds per step.
Writes a Markdown table to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from foldworks.models import build_model

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


def af2_batch(model: torch.nn.Module, batch: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    """The synthetic chains through AF2's input pipeline (training draws, whole chain as the crop)."""
    from foldworks.features.af2 import Af2Chain, make_af2_example
    from foldworks.train.data import collate_af2

    b, length = batch["aatype"].shape
    cfg = model.af2_data_config(True, length)
    examples = []
    for i in range(b):
        chain = Af2Chain(name=f"synthetic{i}", aatype=batch["aatype"][i].cpu().numpy(),
                         msa=batch["msa"][i].cpu().numpy(), deletion_matrix=batch["deletion_matrix"][i].cpu().numpy(),
                         residue_index=batch["residue_index"][i].cpu().numpy(),
                         between_segment_residues=torch.zeros(length, dtype=torch.long).numpy(),
                         all_atom_positions=batch["all_atom_positions"][i].cpu().numpy(),
                         all_atom_mask=batch["all_atom_mask"][i].float().cpu().numpy(),
                         residue_mask=batch["residue_mask"][i].cpu().numpy())
        examples.append(make_af2_example(chain, cfg, 0, i, True))
    return {k: v.to(device) for k, v in collate_af2(examples).items()}


def time_model(name: str, model_config: dict[str, Any], batch: dict[str, torch.Tensor], steps: int,
               device: str) -> dict[str, float]:
    """ms per optimiser step, chains/s, residues/s and peak memory (GiB) of one family on one batch shape."""
    torch.manual_seed(0)
    model = build_model(name, model_config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    b, length = batch["aatype"].shape
    if getattr(model, "input_pipeline", None) == "af2":
        batch = af2_batch(model, batch, device)

    def step() -> None:
        with autocast:
            outputs = model(batch)
        loss, _ = model.loss(batch, outputs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(3):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else float("nan")
    return {"ms": 1000 * seconds, "chains_s": b / seconds, "residues_s": b * length / seconds, "peak_gib": peak}


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
                        help="crops for the evoformer initial_training preset rows (none: skip them)")
    parser.add_argument("--openfold-batch", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "bench/gpu_train.md")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on a GPU machine (or --device cpu for a smoke test)")
    if args.device == "cpu":
        torch.set_num_threads(1)  # smoke test on a shared machine: no oversubscription
    experiments = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    lines = ["# GPU training throughput (bench/gpu_train.py)", "",
             f"Device {gpu}, torch {torch.__version__}, batch {args.batch}, {args.rows} MSA rows, "
             f"{args.steps} timed steps after 3 warm-up steps, "
             f"{'bf16 autocast' if args.device == 'cuda' else 'fp32 (CPU smoke test)'}.", "",
             "| family | crop | batch | ms per step | chains/s | residues/s | peak GiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    cases = [(name, params["model"], params.get("model_config") or {}, crop, args.batch)
             for name, params in experiments.items() if not args.families or name in args.families
             for crop in args.crops]
    cases += [("evoformer initial_training", "evoformer", {"preset": "initial_training"}, crop, args.openfold_batch)
              for crop in args.openfold_crops]
    for name, family, model_config, crop, batch_size in cases:
        batch = synthetic_batch(batch_size, crop, args.rows, args.device)
        r = time_model(family, model_config, batch, args.steps, args.device)
        lines.append(f"| {name} | {crop} | {batch_size} | {r['ms']:.1f} | {r['chains_s']:.1f} | {r['residues_s']:.0f} "
                     f"| {r['peak_gib']:.2f} |")
        print(lines[-1], flush=True)
    if args.trainer_steps > 0:
        lines += ["", f"Whole trainer on the demo cache, {args.trainer_steps} steps, "
                      f"{'bf16-mixed' if args.device == 'cuda' else 'fp32'}, "
                      f"{args.threads} threads:", "", "| experiment | s per step |", "|---|---:|"]
        chosen = {k: v for k, v in experiments.items() if not args.families or k in args.families}
        for name, seconds in time_trainer(chosen, args.trainer_steps, args.threads, args.device).items():
            lines.append(f"| {name} | {seconds:.3f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
