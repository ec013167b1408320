"""Trivial baseline: an ideal α-helix Cα trace of the full length for every chain.

    python -m foldworks.evaluate.baseline --features-dir data/features --chains data/chains.parquet \\
        --out results/metrics/baseline.tsv [--train-out results/metrics/train/baseline.tsv] --params '{}'

The helix has radius 2.3 Å, rise 1.5 Å and 100° per residue (consecutive Cα 3.83 Å apart). It
is scored like a prediction (same columns; ``mean_plddt`` is empty) against every test target,
and every train target for ``--train-out``; any model should beat it.
"""

from __future__ import annotations

import os

# One job uses one core (Snakemake runs jobs in parallel); multi-threaded BLAS on the small
# matrix products of the superposition search is 3-4x slower on a loaded machine.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json
import logging
import math
import sys
from pathlib import Path

import numpy as np

from foldworks.logutil import setup_logging
from foldworks.provenance import provenance_record, write_sidecars
from foldworks.evaluate.scoring import (
    EvaluationError, Prediction, load_reference, parse_params, score_prediction, split_targets,
    write_metrics,
)

log = logging.getLogger("foldworks.evaluate.baseline")

HELIX_RADIUS = 2.3  #: Å
HELIX_RISE = 1.5  #: Å per residue along the axis
HELIX_TWIST_DEGREES = 100.0  #: per residue


def ideal_helix(length: int) -> np.ndarray:
    """Cα coordinates ``[length, 3]`` (Å) of an ideal α-helix along z, starting at (r, 0, 0)."""
    angle = np.deg2rad(HELIX_TWIST_DEGREES) * np.arange(length)
    return np.stack([HELIX_RADIUS * np.cos(angle), HELIX_RADIUS * np.sin(angle),
                     HELIX_RISE * np.arange(length)], axis=-1)


def score_baseline(features_dir: Path, targets: list[str]) -> list[dict]:
    """Metric rows of the helix baseline for ``targets`` (feature files must exist)."""
    rows = []
    for index, target in enumerate(targets, 1):
        reference = load_reference(features_dir / f"{target}.npz", target)
        helix = ideal_helix(reference.length)
        prediction = Prediction(helix, np.ones(reference.length, bool),
                                np.full(reference.length, math.nan))
        row = score_prediction(prediction, reference)
        log.info("[%d/%d] %s lddt_ca=%.4f tm=%.4f", index, len(targets), target,
                 row["lddt_ca"], row["tm_score"])
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.evaluate.baseline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features-dir", required=True, type=Path)
    parser.add_argument("--chains", required=True, type=Path, help="data/chains.parquet")
    parser.add_argument("--out", required=True, type=Path, help="test-split baseline TSV")
    parser.add_argument("--train-out", type=Path, help="train-split baseline TSV")
    parser.add_argument("--params", default="{}", help="config slice `evaluate` as JSON")
    args = parser.parse_args(argv)
    setup_logging("evaluate_baseline")
    try:
        parse_params(args.params)
        outputs = [(args.out, "test")] + ([(args.train_out, "train")] if args.train_out else [])
        inputs = [args.chains]
        for out, split in outputs:
            targets = split_targets(args.chains, [split])
            rows = score_baseline(args.features_dir, targets)
            write_metrics(out, rows)
            log.info("wrote %d %s rows to %s", len(rows), split, out)
            inputs.extend(args.features_dir / f"{target}.npz" for target in targets)
        write_sidecars([out for out, _ in outputs], provenance_record(
            "evaluate", json.loads(args.params or "{}"), ("evaluate",), inputs=inputs))
    except (EvaluationError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
