"""CPU time and peak memory of the AlphaFold2 model (``foldworks.models.af2``): forward (eval, no
grad) and forward + backward (train mode, AF2's loss), one torch thread, against OpenFold's figures
on the same hardware.

    nice -n 5 .venv/bin/python bench/bench_af2_step.py [--repeats 3] [--full-crops 64 128]
        [--cases crambin_tmpl ...] [--raw /tmp/af2_step.json] [--out bench/af2_step.md]

Configurations:

- every case folder of ``$FOLDWORKS_AF2_REFERENCE`` (default ``../shared/af2_reference``) with a
  ``config.json``: the case's config and weights (``params.npz``), its ``features.npz`` as input
  (recycles = the feature file's leading dimension). Training supervision is the case's
  ``loss_batch.npz`` (ground truth of the final recycle); OpenFold's figures come from the case's
  ``openfold_compare.json``;
- the full-size ``model_1_ptm`` preset (random AF2 initialisation) at crops ``--full-crops``, with
  activation checkpointing per Evoformer / extra-MSA block in training, on the inputs of each
  ``--full-workloads`` entry (``WORKLOADS``: MSA clusters, extra-MSA rows, template slots, passes):
  random features of AF2's layout; the sequence, ground truth and templates are the first ``crop``
  residues of the 4HHB A case's ground truth.

Eval rows also report the forward's matrix-product work (GFLOP, ``torch.utils.flop_counter``) and
its floor on this core: GFLOP divided by the best single-thread float32 matrix-product rate measured
in the same process, the time those products alone take at that rate (an implementation doing the
same work cannot be much faster).

Forward + backward = ``alphafold_loss`` (initial-training weights, clamped FAPE) on the outputs,
then ``backward()``; no optimiser step. Every (configuration, mode) runs in a fresh subprocess:
``--repeats`` timed calls after one warm-up (no warm-up at full size; medians reported), each
as wall and CPU seconds (``time.process_time``: on a shared machine the CPU seconds are the fairer
figure, the ratio column uses them), and the process's peak
resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``: weights, inputs, activations and
gradients, as the kernel counts them). The load average (1 min) is recorded before and after each
row: on a shared machine it says how much the row's time is to be trusted. Rows run with
``MALLOC_MMAP_THRESHOLD_`` set (glibc: allocations above it get their own pages, returned on
free) are named so: the default dynamic threshold lets freed activations fragment the heap, which
inflates the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("FOLDWORKS_AF2_REFERENCE", REPO.parent / "shared" / "af2_reference"))
TRUTH_CASE = "hba_notmpl"  # ground truth and sequence of the full-size rows (141 residues)
# OpenFold on this hardware, full-size model_1_ptm, 1 recycle, one thread (reference README,
# "Timings on this hardware"): crop -> (forward s, forward + backward s, peak RSS GB).
OPENFOLD_FULL = {64: (13.9, 37.9, 4.6), 128: (82.1, 207.7, 14.0)}
# Inputs of the full-size rows: MSA clusters, extra-MSA rows, template slots, passes (recycles + 1).
# "af2-training": AF2's training sizes, one pass. "reference-cases": the reference cases' sizes
# (16 clusters, 32 extra rows, 2 templates, 1 recycle), the only sizes the fixture README names.
WORKLOADS = {"af2-training": (128, 1024, 4, 1), "reference-cases": (16, 32, 2, 2)}


def _tensors(path: Path) -> dict:
    import numpy as np
    import torch

    with np.load(path) as z:
        return {k: torch.as_tensor(z[k]) for k in z.files}


def case_inputs(case: Path) -> tuple:
    """(model, features, supervision) of one reference case; weights from its ``params.npz``."""
    import torch

    from foldworks.models.af2 import AlphaFold2, from_reference_config
    from foldworks.models.weights import deepmind
    from foldworks.models.weights.errors import read_npz

    cfg = from_reference_config(json.loads((case / "config.json").read_text()))
    model = AlphaFold2(cfg)
    model.load_state_dict(deepmind.convert(read_npz(case / "params.npz")), strict=True)
    feats = _tensors(case / "features.npz")
    supervision = _tensors(case / "loss_batch.npz")
    supervision["use_clamped_fape"] = torch.tensor(1.0)
    return model, feats, supervision


def random_features(crop: int, clusters: int, extra: int, templates: int, truth: dict, seed: int = 0) -> dict:
    """AF2's processed-feature layout for one recycle (``[1, ...]``) at ``crop`` residues: random MSA
    and extra-MSA content, sequence and template coordinates from ``truth`` (first ``crop`` residues)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    aatype = truth["aatype"][:crop].long()
    n = crop
    target = torch.zeros(n, 22)
    target[torch.arange(n), aatype + 1] = 1.0
    msa = torch.randint(0, 22, (clusters, n), generator=g)
    msa[0] = aatype
    msa_feat = torch.zeros(clusters, n, 49)
    msa_feat[..., :23] = torch.nn.functional.one_hot(msa, 23).float()
    msa_feat[..., 23:25] = torch.rand(clusters, n, 2, generator=g)
    msa_feat[..., 25:48] = torch.softmax(torch.randn(clusters, n, 23, generator=g), -1)
    msa_feat[..., 48] = torch.rand(clusters, n, generator=g)
    pos, mask = truth["all_atom_positions"][:crop], truth["all_atom_mask"][:crop]
    feats = {
        "aatype": aatype, "target_feat": target, "msa_feat": msa_feat, "msa_mask": torch.ones(clusters, n),
        "seq_mask": torch.ones(n), "residue_index": torch.arange(n),
        "extra_msa": torch.randint(0, 22, (extra, n), generator=g), "extra_msa_mask": torch.ones(extra, n),
        "extra_has_deletion": (torch.rand(extra, n, generator=g) < 0.1).float(),
        "extra_deletion_value": torch.rand(extra, n, generator=g),
        "residx_atom37_to_atom14": truth["residx_atom37_to_atom14"][:crop],
        "atom37_atom_exists": truth["atom37_atom_exists"][:crop],
        "template_aatype": aatype.expand(templates, n).clone(),
        "template_all_atom_positions": pos.expand(templates, n, 37, 3).clone(),
        "template_all_atom_masks": mask.expand(templates, n, 37).clone(),
        "template_mask": torch.ones(templates),
        "template_pseudo_beta": truth["pseudo_beta"][:crop].expand(templates, n, 3).clone(),
        "template_pseudo_beta_mask": truth["pseudo_beta_mask"][:crop].expand(templates, n).clone(),
    }
    return {k: v[None] for k, v in feats.items()}


def full_inputs(crop: int, workload: str) -> tuple:
    """(model, features, supervision) of the full-size ``model_1_ptm`` preset at ``crop`` residues
    with the inputs of ``WORKLOADS[workload]`` (every feature repeated per pass)."""
    import dataclasses

    import torch

    from foldworks.models.af2 import AlphaFold2, preset
    from foldworks.models.af2.loss import make_supervision

    truth = _tensors(REFERENCE / TRUTH_CASE / "loss_batch.npz")
    truth["residx_atom37_to_atom14"] = _tensors(REFERENCE / TRUTH_CASE / "features.npz")["residx_atom37_to_atom14"][0]
    if truth["aatype"].shape[0] < crop:
        raise SystemExit(f"{TRUTH_CASE}: {truth['aatype'].shape[0]} residues, fewer than crop {crop}")
    cfg = dataclasses.replace(preset("model_1_ptm"), num_recycle=1, checkpointing=True)
    model = AlphaFold2(cfg)
    clusters, extra, templates, passes = WORKLOADS[workload]
    feats = random_features(crop, clusters, extra, templates, truth)
    feats = {k: v.expand(passes, *v.shape[1:]).clone() for k, v in feats.items()}
    aatype = truth["aatype"][:crop]
    sup = make_supervision(aatype, truth["all_atom_positions"][:crop], truth["all_atom_mask"][:crop])
    g = torch.Generator().manual_seed(1)
    sup.update(seq_mask=torch.ones(crop), residue_index=torch.arange(crop),
               true_msa=feats["msa_feat"][0, :, :, :23].argmax(-1),
               bert_mask=(torch.rand(clusters, crop, generator=g) < 0.15).float(),
               resolution=truth["resolution"], seq_length=torch.tensor(crop), use_clamped_fape=torch.tensor(1.0))
    return model, feats, sup


def worker(spec: dict, args: argparse.Namespace) -> dict:
    """One (configuration, mode) in this process: seconds per call and peak RSS (GB)."""
    import torch

    from foldworks.models.af2.loss import alphafold_loss

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.memory_limit_gb:  # fail with an allocation error instead of starving the machine
        limit = int(args.memory_limit_gb * 1e9)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if spec["kind"] == "case":
        model, feats, sup = case_inputs(REFERENCE / spec["name"])
    else:
        model, feats, sup = full_inputs(spec["crop"], spec["workload"])
    params = sum(p.numel() for p in model.parameters())

    def forward() -> float:
        with torch.no_grad():
            out = model(feats)
        return float(out["final_atom_positions"].sum())

    def train_step() -> float:
        model.zero_grad(set_to_none=True)
        loss, _ = alphafold_loss(model(feats), sup)
        loss.backward()
        return float(loss)

    model.train(spec["mode"] == "train")
    fn = train_step if spec["mode"] == "train" else forward
    if spec["warmup"]:
        fn()
    times, cpu, value = [], [], 0.0
    for _ in range(spec["repeats"]):
        start, start_cpu = time.perf_counter(), time.process_time()
        value = fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # ru_maxrss is KiB on Linux
    work = forward_gflop(model, feats) if spec["mode"] == "eval" else {}
    return {**work, "times": times, "cpu_times": cpu, "peak_gb": peak, "params": params, "value": value,
            "residues": int(feats["aatype"].shape[-1]), "templates": "template_aatype" in feats}


def forward_gflop(model, feats: dict) -> dict:
    """Matrix-product work of one forward (``torch.utils.flop_counter``, GFLOP) and this core's
    single-thread float32 matrix-product rate (GFLOP/s, best of 5 ``[4096, 256] @ [256, 1024]``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(feats)
    a, b = torch.randn(4096, 256), torch.randn(256, 1024)
    rates = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        rates.append(10 * 2 * 4096 * 256 * 1024 / (time.perf_counter() - start) / 1e9)
    return {"gflop": counter.get_total_flops() / 1e9, "matmul_gflops": max(rates)}


def run_subprocess(spec: dict, args: argparse.Namespace) -> dict:
    """Run :func:`worker` for ``spec`` in a fresh interpreter; adds the load averages around it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec), "--memory-limit-gb", str(args.memory_limit_gb or 0)]
    load_start = os.getloadavg()[0]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    load_end = os.getloadavg()[0]
    if proc.returncode != 0:
        raise SystemExit(f"{spec['name']} {spec['mode']}: worker failed\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    threshold = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    name = f"{spec['name']}, MALLOC_MMAP_THRESHOLD_={threshold}" if threshold else spec["name"]
    return {**spec, **result, "name": name, "load": [load_start, load_end]}


def openfold_figure(spec: dict) -> tuple[float | None, float | None]:
    """OpenFold's (seconds, peak GB) for the same configuration and mode on this hardware."""
    if spec["kind"] == "full":
        fwd, train, peak = OPENFOLD_FULL.get(spec["crop"], (None, None, None))
        return (train, peak) if spec["mode"] == "train" else (fwd, None)
    ref = json.loads((REFERENCE / spec["name"] / "openfold_compare.json").read_text())
    times = ref["train_fwd_bwd_s"] if spec["mode"] == "train" else ref["forward_s"]
    return statistics.median(times), None


def render(results: list[dict], args: argparse.Namespace) -> str:
    """The Markdown page: table first, then how it was measured."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    cpu_model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    rows = ["| configuration | residues | mode | foldworks CPU s | wall s | n | OpenFold s | ratio (CPU s) | "
            "peak RSS GB | OpenFold GB | forward GFLOP | floor s | load start / end |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(results, key=lambda r: (r["kind"] == "full", r.get("crop", 0), r["name"], r["mode"])):
        theirs, their_peak = openfold_figure(r)
        cpu, wall = statistics.median(r["cpu_times"]), statistics.median(r["times"])
        ratio = f"{cpu / theirs:.2f}" if theirs else ""
        mode = "forward + backward" if r["mode"] == "train" else "forward"
        work = f"{r['gflop']:.4g}" if "gflop" in r else ""
        floor = f"{r['gflop'] / r['matmul_gflops']:.3g}" if "gflop" in r else ""
        rows.append(f"| {r['name']} | {r['residues']} | {mode} | {cpu:.3g} | {wall:.3g} | {len(r['times'])} "
                    f"| {f'{theirs:.3g}' if theirs else ''} | {ratio} | {r['peak_gb']:.2f} | {their_peak or ''} "
                    f"| {work} | {floor} | {r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    machine = f"{os.cpu_count()} CPUs ({cpu_model}); Python {platform.python_version()}"
    return "\n".join(rows) + f"\n\nCommit {commit}; {machine}.\n"


def specs(args: argparse.Namespace) -> list[dict]:
    """Every (configuration, mode) to measure."""
    out = []
    for case in sorted(p.parent for p in REFERENCE.glob("*/config.json")):
        if args.cases is None or case.name in args.cases:
            out += [{"kind": "case", "name": case.name, "mode": m, "repeats": args.repeats, "warmup": True}
                    for m in ("eval", "train")]
    for workload in args.full_workloads:
        clusters, extra, templates, passes = WORKLOADS[workload]
        for crop in args.full_crops:
            name = (f"model_1_ptm crop {crop}, {clusters} clusters + {extra} extra rows, {templates} templates, "
                    f"{passes} pass{'es' if passes > 1 else ''}")
            out += [{"kind": "full", "name": name, "crop": crop, "workload": workload, "mode": m,
                     "repeats": args.full_repeats, "warmup": False} for m in args.modes]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per reference case and mode")
    parser.add_argument("--full-crops", type=int, nargs="*", default=[64, 128])
    parser.add_argument("--full-repeats", type=int, default=1)
    parser.add_argument("--full-workloads", nargs="*", choices=sorted(WORKLOADS), default=sorted(WORKLOADS),
                        help="inputs of the full-size rows (see WORKLOADS)")
    parser.add_argument("--modes", nargs="*", choices=["eval", "train"], default=["eval", "train"],
                        help="full-size rows: forward (eval) and/or forward + backward (train)")
    parser.add_argument("--memory-limit-gb", type=float, default=0.0,
                        help="address-space limit of each worker (GB; 0 = none): a row that needs more fails")
    parser.add_argument("--cases", nargs="*", help="reference case folders to run (default: all)")
    parser.add_argument("--raw", type=Path, help="JSON file of results: rows are merged into it by key")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args)))
        return
    if not REFERENCE.is_dir():
        raise SystemExit(f"AF2 reference fixtures not found at {REFERENCE} (set FOLDWORKS_AF2_REFERENCE)")
    known = json.loads(args.raw.read_text()) if args.raw and args.raw.is_file() else {}
    for spec in specs(args):
        result = run_subprocess(spec, args)
        known[f"{result['name']}|{spec['mode']}"] = result
        print(json.dumps(result), flush=True)
        if args.raw:
            tmp = args.raw.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=1))
            tmp.replace(args.raw)
    table = render(list(known.values()), args)
    print(table)
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(table)
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
