"""Training-step time and peak memory of the ``evoformer`` family on CPU, per crop size, with and
without activation checkpointing.

    nice -n 10 .venv/bin/python bench/bench_openfold_step.py [--preset cpu_small] [--crops 64 128 256]
        [--steps 3] [--batch 1] [--rows 32] [--features-dir ../main/data/features] [--out bench/openfold_step.md]

Input: one real chain of >= the largest crop, contiguous crops of it (``foldworks.train.data``
``make_example`` + ``collate``, the trainer's own batch path), its MSA capped at ``--rows``. From
``--features-dir`` when it holds such a chain (the demo cache, real MSAs), else 2SRC chain A (450
residues) from the offline mirror through the real parse and features stages (query-only MSA).

Each (crop, checkpointing) case runs in a fresh subprocess with one torch thread: the model and
AdamW are built directly (the trainer's Lightning loop adds EMA and logging, not model work), one
warm-up step, then ``--steps`` timed steps of forward + ``model.loss`` + backward + AdamW, with a
fixed number of recycling iterations (``--cycles``) so every step does the same work.
Peak memory = the process's peak resident set (``ru_maxrss``) minus its resident set just before
the warm-up step: activations, gradients and optimiser state of the step, measured by the kernel
(torch's CPU allocator is invisible to ``tracemalloc``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("FOLDWORKS_PDB_MIRROR", REPO.parent / "shared" / "pdb_mirror"))


def rss_mib() -> float:
    """Current resident set of this process (MiB) from ``/proc/self/status``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def load_chain(features_dir: Path | None, min_length: int) -> tuple[str, dict]:
    """A real chain of at least ``min_length`` residues: the longest in ``features_dir``, else 2src A."""
    import numpy as np

    from foldworks.train.data import load_feature_file

    if features_dir is not None and features_dir.is_dir():
        best = None
        for path in sorted(features_dir.glob("*.npz")):
            with np.load(path) as data:
                length = int(data["aatype"].shape[0])
            if length >= min_length and (best is None or length > best[0]):
                best = (length, path)
        if best is not None:
            return best[1].stem, load_feature_file(best[1])
    from foldworks.features.build import build_features
    from foldworks.ids import sequence_hash
    from foldworks.parse import parse_entry

    parsed = parse_entry(MIRROR / "2src.cif.gz", "2src")
    record = next(r for r in parsed.chains if r["chain"] == "A")
    sequence = record["sequence"]
    feats = build_features(parsed.arrays["A"], f">{sequence_hash(sequence)}\n{sequence}\n", "2src_A")
    return "2src_A", feats


def run_case(args: argparse.Namespace) -> dict:
    """One (crop, checkpointing) case in this process; returns its measurements."""
    import numpy as np
    import torch

    from foldworks.models import build_model
    from foldworks.train.data import collate, make_example

    torch.set_num_threads(1)
    torch.manual_seed(0)
    target, feats = load_chain(args.features_dir, args.crop)
    rng = np.random.default_rng(0)
    examples = [make_example(feats, args.crop, args.rows, rng) for _ in range(args.batch)]
    batch = collate(examples)
    config = {"preset": args.preset, "activation_checkpointing": bool(args.checkpointing)}
    config.update(json.loads(args.model_config))
    model = build_model("evoformer", config).train()
    model.cfg["max_recycles"] = args.cycles - 1  # training draws 0..max_recycles: 0..0 = fixed
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> float:
        outputs = model(batch)
        loss, _ = model.loss(batch, outputs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss)

    before = rss_mib()
    step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"target": target, "crop": args.crop, "checkpointing": bool(args.checkpointing),
            "s_per_step": float(np.median(times)), "s_min": float(np.min(times)),
            "peak_mib": peak - before, "params": sum(p.numel() for p in model.parameters()),
            "msa_rows": int(batch["msa"].shape[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu_small")
    parser.add_argument("--model-config", default="{}", help="JSON merged over the preset")
    parser.add_argument("--crops", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rows", type=int, default=32, help="MSA rows per chain")
    parser.add_argument("--cycles", type=int, default=1, help="recycling iterations per step (fixed)")
    parser.add_argument("--features-dir", type=Path, default=REPO.parent / "main" / "data" / "features")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "openfold_step.md")
    parser.add_argument("--crop", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.crop is not None:  # child: one case
        print(json.dumps(run_case(args)))
        return
    results = []
    for crop in args.crops:
        for checkpointing in (0, 1):
            command = [sys.executable, __file__, "--crop", str(crop), "--checkpointing", str(checkpointing),
                       "--preset", args.preset, "--model-config", args.model_config, "--steps", str(args.steps),
                       "--batch", str(args.batch), "--rows", str(args.rows), "--cycles", str(args.cycles),
                       "--features-dir", str(args.features_dir)]
            done = subprocess.run(command, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
            if done.returncode != 0:
                raise SystemExit(f"crop {crop} checkpointing {checkpointing} failed:\n{done.stderr[-3000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(results[-1], flush=True)
    load = os.getloadavg()[0]
    lines = ["# evoformer training step on CPU (bench/bench_openfold_step.py)", "",
             f"Preset `{args.preset}` (model_config overrides `{args.model_config}`), "
             f"{results[0]['params']:,} parameters; chain {results[0]['target']}, batch {args.batch}, "
             f"{min(args.rows, int(results[0].get('msa_rows', args.rows)))} MSA row(s), {args.cycles} recycling iteration(s) per step; forward + loss + backward "
             f"+ AdamW, median of {args.steps} steps after one warm-up; one torch thread, "
             f"{platform.machine()}, Python {platform.python_version()}, load average {load:.1f} on "
             f"{os.cpu_count()} cores. Peak memory: peak RSS (`ru_maxrss`) minus RSS before the first step, "
             "one subprocess per case.", "",
             "| crop | activation checkpointing | s per step (median) | min | peak memory MiB |",
             "|---:|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['crop']} | {'yes' if r['checkpointing'] else 'no'} | {r['s_per_step']:.2f} "
                     f"| {r['s_min']:.2f} | {r['peak_mib']:.0f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
