"""Local structure of predictions: do they have right-handed helices where the chain has them?

    .venv/bin/python bench/evoformer_local.py results/predictions/evoformer [--features-dir data/features]

For every ``{target}.cif`` in the predictions directory (whole-chain predictions, the predict
stage's layout, read by the evaluate stage's ``read_prediction``) and the reference Cα in
``{features-dir}/{target}.npz`` (``load_reference``): the Cα virtual dihedral of residues i..i+3
(degrees; about +50 in a right-handed α-helix, about −170/+190 in a strand), over the windows whose
four Cα are resolved in the reference and present in the prediction. Prints per target the fraction
of windows in the right-handed helix range (+20..+80) in the reference and in the prediction, the
fraction in the mirror range (−80..−20, left-handed) in the prediction, the fraction predicted
within 30 degrees of the reference and the median error; then the means. Distances-only terms
(smooth lDDT, the distogram) cannot tell the two hands apart; this shows whether a model learnt them.
Used for issue 14 in BENCHMARKS.md ("Training length and local handedness").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from foldworks.evaluate.scoring import load_reference, read_prediction


def ca_dihedrals(ca: np.ndarray) -> np.ndarray:
    """Virtual dihedrals (degrees, ``[N-3]``) of consecutive Cα quadruples of ``ca [N, 3]`` (Å)."""
    b0, b1, b2 = ca[1:-2] - ca[:-3], ca[2:-1] - ca[1:-2], ca[3:] - ca[2:-1]
    n1, n2 = np.cross(b0, b1), np.cross(b1, b2)
    m1 = np.cross(n1, b1 / np.maximum(np.linalg.norm(b1, axis=1, keepdims=True), 1e-8))
    return -np.degrees(np.arctan2((m1 * n2).sum(1), (n1 * n2).sum(1)))


def local_row(pred: np.ndarray, ref: np.ndarray, resolved: np.ndarray) -> tuple[float, ...]:
    """(helix ref, helix pred, left-handed pred, |err| < 30°, median |err|) over resolved windows."""
    ok = resolved[:-3] & resolved[1:-2] & resolved[2:-1] & resolved[3:]
    d_ref, d_pred = ca_dihedrals(ref)[ok], ca_dihedrals(pred)[ok]
    err = np.abs((d_pred - d_ref + 180.0) % 360.0 - 180.0)
    helix = lambda d: ((d > 20) & (d < 80)).mean()  # noqa: E731
    return helix(d_ref), helix(d_pred), ((d_pred > -80) & (d_pred < -20)).mean(), (err < 30).mean(), np.median(err)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("predictions", type=Path)
    parser.add_argument("--features-dir", type=Path, default=Path("data/features"))
    args = parser.parse_args()
    rows = []
    print("target\tL\thelix_ref\thelix_pred\tleft_pred\twithin_30\tmedian_err_deg")
    for path in sorted(args.predictions.glob("*.cif")):
        ref = load_reference(args.features_dir / f"{path.stem}.npz", path.stem)
        pred = read_prediction(path, path.stem, ref.length, ref.sequence)
        if ref.length < 4:
            continue
        rows.append(local_row(pred.ca, ref.ca, ref.resolved & pred.present))
        print(path.stem, ref.length, *(f"{x:.2f}" for x in rows[-1]), sep="\t")
    print("mean", "", *(f"{x:.3f}" for x in np.nanmean(rows, axis=0)), sep="\t")


if __name__ == "__main__":
    main()
