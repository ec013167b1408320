"""Shape of an ``evoformer`` model's predictions per chain: is it collapsed, a ball, or a chain?

    .venv/bin/python bench/evoformer_geometry.py [--checkpoint results/checkpoints/evoformer/best.ckpt]
        [--split val] [--chains data/chains.parquet] [--features-dir data/features] [--crop 0]

Without ``--checkpoint`` an untrained ``cpu_small`` model (seed 0, no recycling) is used. For every
chain of ``--split`` with a feature file, one eval forward (whole chain, or the first ``--crop``
residues) prints: the number of distinct rows of the single representation entering the
structure module (``[L, c_s]``, rounded to 1e-4; at initialisation = the number of amino-acid types
present), the predicted and true Cα radius of gyration (Å) and the mean predicted distance of
consecutive resolved Cα (Å; 3.8 in a real chain). One thread; ~1 s per chain on ``cpu_small``.

Issue-14 columns: ``rg_layers`` the Cα Rg (Å) after each structure-module layer, ``step_layers`` the
mean |Δtranslation| (Å) each layer applies to a residue, and ``d_sep{8,30}`` the mean Cα distance
(Å, predicted/true) of resolved pairs 8 and 30 residues apart in sequence: a ball shows a constant
step per layer and predicted distances that stop growing with separation.
Used for the collapse diagnosis in BENCHMARKS.md ("Demo quality and the collapse").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from foldworks.models.openfold.model import EvoformerModel
from foldworks.train.checkpoint import model_from_checkpoint
from foldworks.train.data import collate, load_feature_file, make_example


def radius_of_gyration(x: torch.Tensor) -> float:
    """Rg (Å) of ``x [N, 3]``."""
    return float(((x - x.mean(0)) ** 2).sum(-1).mean().sqrt())


def separation_distance(pred: torch.Tensor, true: torch.Tensor, resolved: torch.Tensor, k: int) -> str:
    """``"pred/true"`` mean Cα distance (Å) of resolved pairs ``k`` residues apart (``-`` if none)."""
    both = resolved[k:] & resolved[:-k]
    if k >= len(resolved) or not both.any():
        return "-"
    dist = lambda x: float((x[k:] - x[:-k]).norm(dim=-1)[both].mean())  # noqa: E731
    return f"{dist(pred):.1f}/{dist(true):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--split", default="val")
    parser.add_argument("--chains", type=Path, default=Path("data/chains.parquet"))
    parser.add_argument("--features-dir", type=Path, default=Path("data/features"))
    parser.add_argument("--crop", type=int, default=0, help="first N residues only (0: whole chain)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = model_from_checkpoint(args.checkpoint)[0] if args.checkpoint else EvoformerModel("cpu_small", max_recycles=0)
    model.eval()
    captured: dict[str, torch.Tensor] = {}
    model.structure.register_forward_hook(lambda mod, inp, out: captured.update(s=inp[0].detach()))
    table = pd.read_parquet(args.chains)
    print("target\tL\tdistinct_single_rows\trg_pred\trg_true\tconsecutive_ca_pred\trg_layers\tstep_layers"
          "\td_sep8\td_sep30")
    for row in table[table["split"] == args.split].itertuples():
        path = args.features_dir / f"{row.entry}_{row.chain}.npz"
        if not path.exists():
            continue
        batch = collate([make_example(load_feature_file(path), args.crop or None, 64, None)])
        with torch.no_grad():
            out = model(batch)
        ca, layers = out["ca_coords"][0], out["sm_frames_trans"][0]  # [L, 3], [S, L, 3] Å
        mask, resolved = batch["mask"][0], batch["residue_mask"][0]
        single = captured["s"][0][mask]
        distinct = len(torch.unique(single.round(decimals=4), dim=0))
        bonded = resolved[1:] & resolved[:-1]
        consecutive = (ca[1:] - ca[:-1]).norm(dim=-1)[bonded].mean()
        steps = torch.diff(layers, dim=0, prepend=torch.zeros_like(layers[:1])).norm(dim=-1)[:, resolved].mean(1)
        rgs = ",".join(f"{radius_of_gyration(x[resolved]):.1f}" for x in layers)
        seps = [separation_distance(ca, batch["ca_coords"][0], resolved, k) for k in (8, 30)]
        print(f"{row.entry}_{row.chain}\t{int(mask.sum())}\t{distinct}\t{radius_of_gyration(ca[resolved]):.2f}"
              f"\t{radius_of_gyration(batch['ca_coords'][0][resolved]):.2f}\t{float(consecutive):.2f}\t{rgs}"
              f"\t{','.join(f'{float(x):.1f}' for x in steps)}\t{seps[0]}\t{seps[1]}")


if __name__ == "__main__":
    main()
