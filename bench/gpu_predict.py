"""GPU prediction time and memory of the AlphaFold2 presets (``foldworks.models.af2``), for a machine
with a CUDA GPU.

    .venv/bin/python bench/gpu_predict.py [--presets model_1_ptm model_3_ptm] [--lengths 128 256 384 512]
        [--dtypes fp32 bf16] [--chunks none 128 32] [--recycles 3] [--repeats 2] [--out bench/gpu_predict.md]

One structure per call: the whole prediction (``--recycles`` + 1 passes through the network, heads
and confidence metrics) in eval mode without gradients, random AF2-layout features (``--clusters``
MSA clusters, ``--extra`` extra-MSA rows, ``--templates`` template slots for the template presets)
on a synthetic chain (a 3.8 Å random-walk backbone). Weights are the preset's random AF2
initialisation, fp32; ``bf16`` runs under ``torch.autocast(bfloat16)`` (the structure module and
confidence metrics stay fp32). ``--chunks`` sets the attention chunk size (rows per chunk; ``none``
= unchunked): same outputs, less memory. Per row: seconds per structure (median of ``--repeats``
after one warm-up) and peak ``torch.cuda.max_memory_allocated``; an out-of-memory row says so.

``--device cpu`` is a smoke test of the script (the ``cpu_small`` preset at 16 residues, fp32, one
thread, seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_af2_step import random_features  # noqa: E402

from foldworks.models.af2 import AlphaFold2, preset  # noqa: E402
from foldworks.models.af2.loss import constants as rc  # noqa: E402
from foldworks.models.af2.loss import make_supervision  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# atom37 slots (AF2 order) of N, CA, C, O, CB and their offsets from the Cα (Å): a plausible residue
# geometry, enough for templates, supervision and losses (timing only).
_BACKBONE = {0: (-0.5, 1.4, 0.0), 1: (0.0, 0.0, 0.0), 2: (1.5, 0.0, 0.0), 4: (-0.5, -0.8, 1.2),
             3: (2.1, -1.0, 0.0)}


def _atom37_to_atom14() -> torch.Tensor:
    """``[21, 37]`` atom14 slot of each atom37 atom per residue type (0 where absent)."""
    to37, mask = torch.as_tensor(rc.ATOM14_TO_ATOM37).long(), torch.as_tensor(rc.ATOM14_MASK)
    table = torch.zeros(to37.shape[0], 37, dtype=torch.long)
    for restype in range(to37.shape[0]):
        for slot in range(14):
            if mask[restype, slot]:
                table[restype, to37[restype, slot]] = slot
    return table


def synthetic_truth(length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random chain of ``length`` residues (no UNK) with backbone + Cβ atoms on a 3.8 Å random-walk
    Cα trace: ``aatype [L]``, ``all_atom_positions [L, 37, 3]`` (Å), ``all_atom_mask [L, 37]``, the
    atom maps, pseudo-β and ``resolution`` (Å) — the keys :func:`random_features` reads."""
    g = torch.Generator().manual_seed(seed)
    aatype = torch.randint(0, 20, (length,), generator=g)
    steps = torch.nn.functional.normalize(torch.randn(length, 3, generator=g), dim=-1) * 3.8
    ca = steps.cumsum(0)
    pos, mask = torch.zeros(length, 37, 3), torch.zeros(length, 37)
    for slot, offset in _BACKBONE.items():
        pos[:, slot] = ca + torch.tensor(offset)
        mask[:, slot] = 1.0
    mask[aatype == rc.GLY, rc.CB37] = 0.0
    pos = pos * mask[..., None]
    truth = make_supervision(aatype, pos, mask)
    truth["residx_atom37_to_atom14"] = _atom37_to_atom14()[aatype]
    truth["resolution"] = torch.tensor(2.0)
    return truth


def prediction_inputs(name: str, length: int, args: argparse.Namespace) -> tuple[AlphaFold2, dict]:
    """The preset's model (``args.recycles`` recycles) and ``[R, ...]`` features of one chain."""
    cfg = dataclasses.replace(preset(name), num_recycle=args.recycles)
    torch.manual_seed(0)
    model = AlphaFold2(cfg).eval()
    feats = random_features(length, args.clusters, args.extra, args.templates, synthetic_truth(length))
    if not cfg.templates:
        feats = {k: v for k, v in feats.items() if not k.startswith("template_")}
    feats = {k: v.expand(args.recycles + 1, *v.shape[1:]).contiguous() for k, v in feats.items()}
    return model, feats


def time_prediction(model: AlphaFold2, feats: dict, dtype: str, chunk: int | None, repeats: int,
                    device: str) -> tuple[float, float]:
    """(median seconds per structure, peak GiB allocated on the GPU; NaN on CPU)."""
    model.set_chunk_size(chunk)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=dtype == "bf16")

    def predict() -> None:
        with torch.no_grad(), autocast:
            out = model(feats)
        float(out["plddt"].mean())  # synchronises

    predict()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        predict()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else float("nan")
    return statistics.median(times), peak


def _chunk(value: str) -> int | None:
    return None if value.lower() == "none" else int(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["model_1_ptm", "model_3_ptm"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 384, 512, 768])
    parser.add_argument("--dtypes", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--chunks", type=_chunk, nargs="+", default=[None, 128, 32],
                        help="attention chunk sizes ('none' = unchunked)")
    parser.add_argument("--recycles", type=int, default=3)
    parser.add_argument("--clusters", type=int, default=512, help="MSA clusters (AF2 monomer inference: 512)")
    parser.add_argument("--extra", type=int, default=1024, help="extra-MSA rows (AF2 monomer inference: 1024)")
    parser.add_argument("--templates", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, help="Markdown table (default: bench/gpu_predict.md on a GPU)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on a GPU machine (or --device cpu for a smoke test)")
    if args.device == "cpu":  # smoke test: tiny and single-threaded
        torch.set_num_threads(1)
        args.presets, args.lengths, args.dtypes, args.chunks = ["cpu_small"], [16], ["fp32"], [None, 4]
        args.recycles, args.clusters, args.extra, args.templates, args.repeats = 1, 8, 8, 2, 1
    elif args.out is None:
        args.out = REPO / "bench/gpu_predict.md"
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    lines = ["# AF2 prediction on one GPU (bench/gpu_predict.py)", "",
             f"Device {device}, torch {torch.__version__}; {args.recycles} recycles, {args.clusters} MSA clusters, "
             f"{args.extra} extra-MSA rows, {args.templates} templates (template presets); median of "
             f"{args.repeats} after one warm-up.", "",
             "| preset | residues | dtype | chunk | s per structure | peak GiB allocated |",
             "|---|---:|---|---:|---:|---:|"]
    for name in args.presets:
        for length in args.lengths:
            model, feats = prediction_inputs(name, length, args)
            model, feats = model.to(args.device), {k: v.to(args.device) for k, v in feats.items()}
            for dtype in args.dtypes:
                for chunk in args.chunks:
                    try:
                        seconds, peak = time_prediction(model, feats, dtype, chunk, args.repeats, args.device)
                        cells = f"{seconds:.2f} | {peak:.2f}"
                    except torch.cuda.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        cells = "out of memory | "
                    lines.append(f"| {name} | {length} | {dtype} | {chunk or 'none'} | {cells} |")
                    print(lines[-1], flush=True)
            del model, feats
            if args.device == "cuda":
                torch.cuda.empty_cache()
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
