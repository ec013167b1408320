"""Score an experiment's predictions: ``python -m foldworks.evaluate``.

    python -m foldworks.evaluate --predictions results/predictions/NAME --features-dir data/features \\
        --out results/metrics/NAME.tsv [--train-out results/metrics/train/NAME.tsv] \\
        [--residues-out results/metrics/residues/NAME.tsv] [--chains data/chains.parquet] --params '{}'

Every ``{target}.cif`` in the predictions directory is scored against
``{features-dir}/{target}.npz`` (and ``train/*.cif`` for ``--train-out``). With ``--chains``,
every test target of the chain table must have a prediction (a missing one is an error that
names it) and only test targets are scored. Columns: ``foldworks.evaluate.scoring.METRIC_COLUMNS``;
``--residues-out`` gets one row per resolved residue of the scored test targets
(``RESIDUE_COLUMNS``: target, residue, plddt, lddt_ca) for the calibration plot.
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
import sys
from pathlib import Path

from foldworks.logutil import setup_logging
from foldworks.evaluate.scoring import (
    EvaluationError, parse_params, score_file, split_targets, write_metrics, write_residues,
)
from foldworks.ids import InvalidIdentifier, split_target
from foldworks.provenance import provenance_record, write_sidecars

log = logging.getLogger("foldworks.evaluate")

def prediction_files(directory: Path) -> dict[str, Path]:
    """``{target: path}`` of the ``{target}.cif`` files directly in ``directory`` (validated IDs)."""
    found = {}
    for path in sorted(directory.glob("*.cif")):
        try:
            entry, chain = split_target(path.stem)
        except InvalidIdentifier as exc:
            raise EvaluationError(f"prediction {path}: file name is not a target ID ({exc})") from exc
        found[f"{entry}_{chain}"] = path
    return found


def score_directory(directory: Path, features_dir: Path, required: list[str] | None
                    ) -> tuple[list[dict], list[dict]]:
    """Score the predictions in ``directory`` (with ``required``, exactly those targets): metric
    rows and per-residue rows."""
    found = prediction_files(directory)
    if required is not None:
        missing = [target for target in required if target not in found]
        if missing:
            raise EvaluationError(
                f"no prediction in {directory} for {len(missing)} test target(s): {', '.join(missing)}")
        extra = sorted(set(found) - set(required))
        if extra:
            log.warning("%d predictions in %s are not test targets; not scored: %s",
                        len(extra), directory, ", ".join(extra[:10]))
        found = {target: found[target] for target in required}
    rows, residues = [], []
    for index, (target, path) in enumerate(sorted(found.items()), 1):
        row, per_residue = score_file(path, features_dir, target)
        residues.extend(per_residue)
        log.info("[%d/%d] %s lddt_ca=%.4f tm=%.4f gdt_ts=%.4f", index, len(found), target,
                 row["lddt_ca"], row["tm_score"], row["gdt_ts"])
        rows.append(row)
    return rows, residues


def evaluated_inputs(predictions: Path, features_dir: Path, chains: Path | None) -> list[Path]:
    """Files the scores depend on (for the provenance sidecar): every prediction ``*.cif`` under
    ``predictions``, the feature file of each predicted target that exists, and ``chains``."""
    cifs = sorted(predictions.rglob("*.cif"))
    features = sorted({features_dir / f"{cif.stem}.npz" for cif in cifs})
    return cifs + [path for path in features if path.exists()] + ([chains] if chains else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--predictions", required=True, type=Path, help="results/predictions/NAME")
    parser.add_argument("--features-dir", required=True, type=Path, help="data/features")
    parser.add_argument("--out", required=True, type=Path, help="test-split metrics TSV")
    parser.add_argument("--train-out", type=Path, help="metrics TSV for predictions/NAME/train/*.cif")
    parser.add_argument("--residues-out", type=Path, help="per-residue pLDDT / lDDT-Cα TSV (test)")
    parser.add_argument("--chains", type=Path, help="data/chains.parquet: require every test target")
    parser.add_argument("--params", default="{}", help="config slice `evaluate` as JSON")
    args = parser.parse_args(argv)
    setup_logging("evaluate")
    try:
        parse_params(args.params)
        if not args.predictions.is_dir():
            raise EvaluationError(f"predictions directory {args.predictions} not found")
        required = split_targets(args.chains, ["test"]) if args.chains else None
        rows, residues = score_directory(args.predictions, args.features_dir, required)
        write_metrics(args.out, rows)
        log.info("wrote %d rows to %s", len(rows), args.out)
        if args.residues_out is not None:
            write_residues(args.residues_out, residues)
            log.info("wrote %d residue rows to %s", len(residues), args.residues_out)
        if args.train_out is not None:
            train_dir = args.predictions / "train"
            train_rows = score_directory(train_dir, args.features_dir, None)[0] if train_dir.is_dir() else []
            if not train_rows:
                log.warning("no training-set predictions in %s; writing an empty table", train_dir)
            write_metrics(args.train_out, train_rows)
            log.info("wrote %d rows to %s", len(train_rows), args.train_out)
        outputs = [path for path in (args.out, args.residues_out, args.train_out) if path is not None]
        write_sidecars(outputs, provenance_record(
            "evaluate", json.loads(args.params or "{}"), ("evaluate",),
            inputs=evaluated_inputs(args.predictions, args.features_dir, args.chains)))
    except (EvaluationError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
