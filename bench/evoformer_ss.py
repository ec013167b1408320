"""Where is the helix information lost? Sequence → trunk → heads, on the demo's splits.

    .venv/bin/python bench/evoformer_ss.py results/checkpoints/evoformer/best.ckpt
        [--chains data/chains.parquet] [--features-dir data/features] [--window 7] [--steps 500]

Label: residue i+1 is "helix" when the reference Cα virtual dihedral of i..i+3 is in +20..+80°
(right-handed α-helix, ``evoformer_local.ca_dihedrals``); windows with an unresolved Cα are left out,
so Cα-only chains (1FFK) count too. Three readouts, each as accuracy / majority-class accuracy /
precision / recall of "helix" per split, pooled over residues:

* ``sequence`` — logistic regression on the one-hot sequence window ±``--window`` residues, fitted
  on the train split: what single sequences of this dataset can tell at all (no MSA depth here);
* ``trunk`` — the same regression on the trained model's single representation entering the
  structure module (``[L, c_s]``, rows i−3..i+3 concatenated, standardised): does the trunk carry it;
* ``torsion_head`` — the model's own torsion head: its (φ, ψ) of the final structure layer in
  φ −100..−30°, ψ −80..−10° (backbone chains only, against the same box on the reference torsions).

Then the torsion loss itself (Alg 27 squared chord of (sin, cos), π-periodic chis against the nearer
alternative; final structure layer, whole chains, unweighted mean over residues) of the torsion head
against the per-residue-type mean direction fitted on train: how much more than the residue type the
head has learnt (overall, φ, ψ and χ1), with the helix-box accuracy of that residue-type prediction.

Then, per test chain, the reference helix fraction and what the trunk probe and the torsion head call
helical. One thread, eval mode, whole chains; ~1 min on ``cpu_small``. Used for issue 14 in
BENCHMARKS.md ("What the trunk knows about helices").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from evoformer_local import ca_dihedrals
from foldworks.models.openfold import losses
from foldworks.train.checkpoint import model_from_checkpoint
from foldworks.train.data import collate, load_feature_file, make_example

SPLITS = ("train", "val", "test")


def helix_labels(ca: np.ndarray, resolved: np.ndarray) -> np.ndarray:
    """``[L]`` int: 1 helix, 0 not, −1 unknown (residue i+1 of the Cα window i..i+3; ``ca [L, 3]`` Å)."""
    labels = np.full(len(ca), -1)
    if len(ca) < 4:
        return labels
    d = ca_dihedrals(ca)
    ok = resolved[:-3] & resolved[1:-2] & resolved[2:-1] & resolved[3:]
    labels[1:-2] = np.where(ok, ((d > 20) & (d < 80)).astype(int), -1)
    return labels


def windows(x: np.ndarray, half: int) -> np.ndarray:
    """``[L, (2·half+1)·C]``: rows i−half..i+half of ``x [L, C]`` side by side, zero-padded at the ends."""
    padded = np.pad(x, ((half, half), (0, 0)))
    return np.concatenate([padded[k:k + len(x)] for k in range(2 * half + 1)], 1)


def torsion_helix(torsions: torch.Tensor) -> np.ndarray:
    """``[L]`` bool: (φ, ψ) of ``torsions [L, 7, 2]`` (sin, cos; AF2 order ω, φ, ψ, χ1–4) in the helix box."""
    phi = np.degrees(torch.atan2(torsions[:, 1, 0], torsions[:, 1, 1]).numpy())
    psi = np.degrees(torch.atan2(torsions[:, 2, 0], torsions[:, 2, 1]).numpy())
    return (phi > -100) & (phi < -30) & (psi > -80) & (psi < -10)


def chain_readouts(model: torch.nn.Module, path: Path, window: int) -> dict[str, np.ndarray]:
    """Labels, sequence and trunk windows, torsion-head and reference-torsion helix calls of one chain."""
    captured: dict[str, torch.Tensor] = {}
    hook = model.structure.register_forward_hook(lambda mod, inp, out: captured.update(s=inp[0].detach()))
    feats = load_feature_file(path)
    batch = collate([make_example(feats, None, 64, None)])
    with torch.no_grad():
        out = model(batch)
    hook.remove()
    ref = losses.reference_geometry(batch)
    aatype = np.asarray(feats["aatype"]).astype(int).clip(0, 20)
    onehot = np.eye(21)[aatype]
    tors_ok = (ref["torsion_mask"][0, :, 1] & ref["torsion_mask"][0, :, 2]).numpy()
    return {"y": helix_labels(np.asarray(feats["atom_positions"][:, 1]), np.asarray(feats["residue_mask"], bool)),
            "seq": windows(onehot, window), "trunk": windows(captured["s"][0].numpy(), 3),
            "head": torsion_helix(out["sm_angles"][0, -1]), "ref_tors": torsion_helix(ref["torsions"][0]),
            "tors_ok": tors_ok, "aatype": aatype, "head_angles": out["sm_angles"][0, -1].numpy(),
            "torsions": ref["torsions"][0].numpy(), "alt_torsions": ref["alt_torsions"][0].numpy(),
            "torsion_mask": ref["torsion_mask"][0].numpy()}


def residue_type_torsions(train: list[dict[str, np.ndarray]]) -> np.ndarray:
    """``[21, 7, 2]``: per residue type and torsion, the normalised mean (sin, cos) over the train
    residues where it is defined (0° where never defined)."""
    aatype = np.concatenate([c["aatype"] for c in train])
    sin_cos, mask = (np.concatenate([c[k] for c in train]) for k in ("torsions", "torsion_mask"))
    mean = np.zeros((21, 7, 2))
    mean[..., 1] = 1.0
    for a in range(21):
        for k in range(7):
            rows = (aatype == a) & mask[:, k]
            if rows.any():
                v = sin_cos[rows, k].mean(0)
                mean[a, k] = v / max(float(np.linalg.norm(v)), 1e-9)
    return mean


def torsion_errors(chains: list[dict[str, np.ndarray]], predict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Alg 27 squared chord distances of ``predict(chain) [L, 7, 2]`` per defined torsion, as
    ``(sum [7], count [7])``, and the (predicted, reference) helix-box calls ``[2, N]``."""
    total, count, calls = np.zeros(7), np.zeros(7), []
    for c in chains:
        pred = predict(c)
        d = np.minimum(((pred - c["torsions"]) ** 2).sum(-1), ((pred - c["alt_torsions"]) ** 2).sum(-1))
        total += (d * c["torsion_mask"]).sum(0)
        count += c["torsion_mask"].sum(0)
        calls.append(np.stack([torsion_helix(torch.tensor(pred))[c["tors_ok"]], c["ref_tors"][c["tors_ok"]]]))
    return total, count, np.concatenate(calls, 1)


def print_torsion_losses(chains: dict[str, dict[str, dict[str, np.ndarray]]]) -> None:
    """Torsion loss of the head and of the residue-type mean per split (see the module docstring)."""
    mean = residue_type_torsions(list(chains["train"].values()))
    predictors = {"torsion_head": lambda c: c["head_angles"], "residue_type_mean": lambda c: mean[c["aatype"]]}
    print("\ntorsion loss\tsplit\tresidues\tall\tphi\tpsi\tchi1\thelix_box_accuracy")
    for name, predict in predictors.items():
        for s in SPLITS:
            total, count, calls = torsion_errors(list(chains[s].values()), predict)
            per = total / np.maximum(count, 1)
            print(name, s, int(count[2]), f"{total.sum() / count.sum():.3f}", f"{per[1]:.3f}", f"{per[2]:.3f}",
                  f"{per[3]:.3f}", f"{(calls[0] == calls[1]).mean():.3f}", sep="\t")


def fit_probe(x: np.ndarray, y: np.ndarray, steps: int, seed: int):
    """Logistic regression (Adam 1e-2, weight decay 1e-3, full batch) on standardised ``x``; returns a
    function ``x → bool [N]``."""
    torch.manual_seed(seed)
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    mu, sd = xt.mean(0), xt.std(0) + 1e-6
    lin = torch.nn.Linear(x.shape[1], 1)
    opt = torch.optim.Adam(lin.parameters(), 1e-2, weight_decay=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(lin((xt - mu) / sd)[:, 0], yt).backward()
        opt.step()
    return lambda z: (lin((torch.tensor(z, dtype=torch.float32) - mu) / sd)[:, 0] > 0).numpy()


def scores(pred: np.ndarray, y: np.ndarray) -> str:
    """``acc / majority / precision / recall`` of boolean ``pred`` against 0/1 ``y``."""
    tp = float((pred & (y == 1)).sum())
    acc, base = float((pred == (y == 1)).mean()), float(max(y.mean(), 1 - y.mean()))
    return f"{acc:.3f}\t{base:.3f}\t{tp / max(pred.sum(), 1):.3f}\t{tp / max((y == 1).sum(), 1):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--chains", type=Path, default=Path("data/chains.parquet"))
    parser.add_argument("--features-dir", type=Path, default=Path("data/features"))
    parser.add_argument("--window", type=int, default=7, help="sequence window half-width (residues)")
    parser.add_argument("--steps", type=int, default=500, help="probe optimiser steps")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = model_from_checkpoint(args.checkpoint)[0].eval()
    table = pd.read_parquet(args.chains)
    chains: dict[str, dict[str, dict[str, np.ndarray]]] = {s: {} for s in SPLITS}
    for row in table[table["split"].isin(SPLITS)].itertuples():
        path = args.features_dir / f"{row.entry}_{row.chain}.npz"
        if path.exists():
            chains[row.split][f"{row.entry}_{row.chain}"] = chain_readouts(model, path, args.window)
    pooled = {s: {k: np.concatenate([c[k][c["y"] >= 0] for c in chains[s].values()])
                  for k in ("y", "seq", "trunk")} for s in SPLITS}
    probes = {k: fit_probe(pooled["train"][k], pooled["train"]["y"], args.steps, 0) for k in ("seq", "trunk")}
    print("readout\tsplit\tresidues\taccuracy\tmajority\tprecision\trecall")
    for name, key in (("sequence", "seq"), ("trunk", "trunk")):
        for s in SPLITS:
            print(name, s, len(pooled[s]["y"]), scores(probes[key](pooled[s][key]), pooled[s]["y"]), sep="\t")
    for s in SPLITS:
        ok = [c["tors_ok"] for c in chains[s].values()]
        head = np.concatenate([c["head"][m] for c, m in zip(chains[s].values(), ok)])
        truth = np.concatenate([c["ref_tors"][m] for c, m in zip(chains[s].values(), ok)]).astype(int)
        print("torsion_head", s, len(truth), scores(head, truth), sep="\t")
    print_torsion_losses(chains)
    print("\ntest chain\tresidues\thelix_ref\thelix_trunk_probe\thelix_torsion_head")
    for name, c in chains["test"].items():
        known = c["y"] >= 0
        head = f"{c['head'][c['tors_ok']].mean():.2f}" if c["tors_ok"].any() else "-"
        print(name, int(known.sum()), f"{c['y'][known].mean():.2f}",
              f"{probes['trunk'](c['trunk'][known]).mean():.2f}", head, sep="\t")


if __name__ == "__main__":
    main()
