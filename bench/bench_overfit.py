"""Overfit the ``evoformer`` family on one real chain (CPU, minutes): can it fit a structure at all?

    nice -n 10 .venv/bin/python bench/bench_overfit.py [--target 1ubq_A] [--preset cpu_small]
        [--model-config '{}'] [--minutes 9] [--lr 1e-3] [--eval-every 25]
        [--features-dir ../main/data/features] [--out bench/overfit.md]

The chain's feature file comes from ``--features-dir`` (the demo cache: real MSA) or, when it is
not there, from the offline mirror through the real parse and features stages (query-only MSA).
The model and AdamW are built directly (no Lightning loop, EMA or validation: a bench of what the
family can fit, not of the trainer); each step is forward + ``model.loss`` + backward + AdamW on
the whole chain (no crop). Every ``--eval-every`` steps the model predicts the chain in eval mode
through the predict stage's own code (``predict_chain`` + ``write_prediction``: an all-atom mmCIF)
and the evaluate stage scores that file (``score_file``): lDDT-Cα, all-atom lDDT, RMSDs, TM-score.
The idealised-helix baseline is scored on the same chain. Goals: lDDT-Cα >= 0.90 and all-atom
lDDT >= 0.80 within 10 minutes on one CPU thread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from foldworks.evaluate.baseline import ideal_helix
from foldworks.evaluate.scoring import Prediction, load_reference, score_file, score_prediction
from foldworks.models import build_model
from foldworks.predict.run import predict_chain, write_prediction
from foldworks.train.data import collate, load_feature_file, make_example

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("FOLDWORKS_PDB_MIRROR", REPO.parent / "shared" / "pdb_mirror"))


def chain_features(target: str, features_dir: Path | None, work: Path) -> Path:
    """Path of ``{target}.npz``: copied from ``features_dir`` or built from the mirror into ``work``."""
    out = work / f"{target}.npz"
    if features_dir is not None and (features_dir / f"{target}.npz").exists():
        shutil.copy(features_dir / f"{target}.npz", out)
        return out
    from foldworks.features.build import build_features
    from foldworks.ids import sequence_hash
    from foldworks.parse import parse_entry

    entry, chain = target.split("_")
    parsed = parse_entry(MIRROR / f"{entry}.cif.gz", entry)
    sequence = next(r for r in parsed.chains if r["chain"] == chain)["sequence"]
    feats = build_features(parsed.arrays[chain], f">{sequence_hash(sequence)}\n{sequence}\n", target)
    np.savez_compressed(out, **feats)
    return out


def evaluate(model: torch.nn.Module, feats: dict, rows: int, target: str, work: Path) -> dict:
    """Predict the chain (eval mode), write the mmCIF, score it like the evaluate stage."""
    model.eval()
    outputs = predict_chain(model, feats, rows)
    model.train()
    path = work / "pred" / f"{target}.cif"
    write_prediction(path, str(feats["sequence"]), target, outputs)
    row, _ = score_file(path, work, target)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="1ubq_A")
    parser.add_argument("--preset", default="cpu_small")
    parser.add_argument("--model-config", default="{}", help="JSON merged over the preset")
    parser.add_argument("--minutes", type=float, default=9.0, help="training time budget")
    parser.add_argument("--max-steps", type=int, default=100000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--rows", type=int, default=32, help="MSA rows")
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features-dir", type=Path, default=REPO.parent / "main" / "data" / "features")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "overfit.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    work = Path(tempfile.mkdtemp(prefix="overfit_"))
    source = chain_features(args.target, args.features_dir, work)
    feats = load_feature_file(source)
    reference = load_reference(source, args.target)
    helix = ideal_helix(reference.length)
    baseline = score_prediction(Prediction(helix, np.ones(reference.length, bool),
                                           np.full(reference.length, np.nan)), reference)
    config = {"preset": args.preset, **json.loads(args.model_config)}
    model = build_model("evoformer", config).train()
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    batch = collate([make_example(feats, None, args.rows, None)])
    history, start, step = [], time.perf_counter(), 0
    budget = args.minutes * 60.0
    while step < args.max_steps and time.perf_counter() - start < budget:
        warm = min(1.0, (step + 1) / 20)  # short linear warm-up
        for group in optimizer.param_groups:
            group["lr"] = args.lr * warm
        outputs = model(batch)
        loss, terms = model.loss(batch, outputs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        step += 1
        if step % args.eval_every == 0:
            row = evaluate(model, feats, args.rows, args.target, work)
            elapsed = time.perf_counter() - start
            history.append({"step": step, "seconds": elapsed, "loss": float(loss.detach()), **row})
            print(f"step {step} {elapsed:.0f}s loss {float(loss):.3f} lddt_ca {row['lddt_ca']:.3f} "
                  f"lddt_all_atom {row['lddt_all_atom']:.3f} rmsd_ca {row['rmsd_ca']:.2f}", flush=True)
            if row["lddt_ca"] >= 0.95 and row["lddt_all_atom"] >= 0.9:
                break
    elapsed = time.perf_counter() - start
    final = evaluate(model, feats, args.rows, args.target, work)
    if not history or history[-1]["step"] != step:
        history.append({"step": step, "seconds": elapsed, "loss": float(loss), **final})
    best = max(history, key=lambda r: r["lddt_ca"])
    msa_rows = int(min(args.rows, feats["msa"].shape[0]))
    lines = ["# Overfitting one chain (bench/bench_overfit.py)", "",
             f"Chain {args.target} ({reference.length} residues, {reference.ca.shape[0] and int(reference.resolved.sum())} "
             f"resolved, {msa_rows} MSA rows from {args.features_dir if args.features_dir and (args.features_dir / (args.target + '.npz')).exists() else 'the mirror, query only'}); "
             f"evoformer preset `{args.preset}` + `{args.model_config}` ({n_params:,} parameters); AdamW lr {args.lr} "
             f"(20-step warm-up), grad clip 0.1, whole chain, batch 1, one torch thread, {platform.machine()}, "
             f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. Model + optimiser built directly "
             "(no Lightning loop); predictions written and scored by the predict/evaluate stage code.", "",
             "| model | steps | train s | lDDT-Cα | all-atom lDDT | RMSD-Cα Å | heavy-atom RMSD Å | TM-score | GDT-TS |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| evoformer, final | {step} | {elapsed:.0f} | **{final['lddt_ca']:.3f}** | **{final['lddt_all_atom']:.3f}** "
             f"| {final['rmsd_ca']:.2f} | {final['rmsd_heavy']:.2f} | {final['tm_score']:.3f} | {final['gdt_ts']:.3f} |",
             f"| evoformer, best eval (step {best['step']}) | | | {best['lddt_ca']:.3f} "
             f"| {best['lddt_all_atom']:.3f} | {best['rmsd_ca']:.2f} | {best['rmsd_heavy']:.2f} | {best['tm_score']:.3f} "
             f"| {best['gdt_ts']:.3f} |",
             f"| idealised helix baseline | | | {baseline['lddt_ca']:.3f} | | {baseline['rmsd_ca']:.2f} | | "
             f"{baseline['tm_score']:.3f} | {baseline['gdt_ts']:.3f} |", "",
             "Goals: lDDT-Cα ≥ 0.90, all-atom lDDT ≥ 0.80 within 10 minutes.", "",
             "| step | s | loss | lDDT-Cα | all-atom lDDT |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['step']} | {r['seconds']:.0f} | {r['loss']:.3f} | {r['lddt_ca']:.3f} | {r['lddt_all_atom']:.3f} |"
              for r in history]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
