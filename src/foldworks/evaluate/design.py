"""Evaluate a design family: ``python -m foldworks.evaluate.design``.

    python -m foldworks.evaluate.design --predictions results/predictions/NAME --checkpoint \\
        results/checkpoints/NAME/best.ckpt --chains data/chains.parquet --features-dir data/features \\
        --out results/metrics/NAME.tsv [--train-out results/metrics/train/NAME.tsv]

Per target (:data:`DESIGN_COLUMNS`, DATA_FORMATS.md §8b), over the *designed* residues (present
with a complete N/CA/C/O backbone, as ProteinMPNN scores them; the native comes from the feature
file):

* ``recovery``: mean over the FASTA's samples of the identity to the native (0..1);
  ``recovery_best``: the best-scoring sample's (lowest ``score``, ProteinMPNN's mean NLL);
* ``perplexity``: exp(mean NLL) of the native sequence under the model (teacher-forced, one
  random decoding order from a fixed seed), per residue;
* composition baselines from the train split's residue frequencies ``p`` (chains.parquet
  ``sequence``): ``baseline_mode_recovery`` = fraction of native residues equal to the most
  frequent train residue; ``baseline_background_recovery`` = expected identity when sampling each
  residue from ``p`` = mean over residues of ``p[native]`` (its average over a background-like
  target set is Σ p²).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from foldworks.constants import RESTYPES, UNK_INDEX
from foldworks.design import fasta
from foldworks.fsutil import write_tsv_atomic
from foldworks.logutil import setup_logging

log = logging.getLogger("foldworks.evaluate.design")
DESIGN_COLUMNS = ("target", "length", "designed", "masked_backbone", "n_samples", "recovery", "recovery_best",
                  "perplexity", "baseline_mode_recovery", "baseline_background_recovery")


class DesignEvaluationError(ValueError):
    """A missing or malformed design prediction (message names the target)."""


def read_design_fasta(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(native record, samples)`` of a design FASTA (:func:`foldworks.design.fasta.read_design_fasta`)."""
    try:
        return fasta.read_design_fasta(path)
    except ValueError as exc:
        raise DesignEvaluationError(str(exc)) from exc


def train_composition(chains: Path) -> np.ndarray:
    """Residue frequencies ``[20]`` of the train split's sequences (passed filters; X and others ignored)."""
    table = pd.read_parquet(chains, columns=["split", "passed_filters", "sequence"])
    rows = table[(table["split"] == "train") & table["passed_filters"].astype(bool)]
    counts = Counter("".join(rows["sequence"]).upper())
    freq = np.array([counts.get(aa, 0) for aa in RESTYPES], dtype=np.float64)
    if freq.sum() == 0:
        raise DesignEvaluationError(f"{chains}: no train-split sequences for the composition baseline")
    return freq / freq.sum()


def score_target(target: str, fasta: Path, native_aatype: np.ndarray, designed: np.ndarray,
                 native_nll: np.ndarray, composition: np.ndarray, masked_backbone: int = 0) -> dict[str, Any]:
    """Metric row of one target: ``native_aatype [L]`` (0..20), ``designed [L]`` bool, ``native_nll [L]`` nats,
    ``composition [20]`` train frequencies, ``masked_backbone`` resolved residues with incomplete backbone."""
    _, samples = read_design_fasta(fasta)
    letters = RESTYPES + "X"
    native = "".join(letters[a] for a in native_aatype)
    count = int(designed.sum())
    if count == 0:  # e.g. a Cα-only trace (1FFK): nothing to design or score; reported, not fatal
        log.warning("%s: no residue with a complete N/CA/C/O backbone (%d resolved residues masked): "
                    "recovery, perplexity and baselines are NaN for this target", target, masked_backbone)
        nan = float("nan")
        return {"target": target, "length": len(native), "designed": 0, "masked_backbone": masked_backbone,
                "n_samples": len(samples), "recovery": nan, "recovery_best": nan, "perplexity": nan,
                "baseline_mode_recovery": nan, "baseline_background_recovery": nan}
    recoveries, scores = [], []
    for sample in samples:
        seq = sample["sequence"]
        if len(seq) != len(native):
            raise DesignEvaluationError(f"{target}: sample {sample.get('sample')} has length {len(seq)}, "
                                        f"native {len(native)}")
        same = np.array([a == b for a, b in zip(seq, native)]) & designed
        recoveries.append(float(same.sum()) / count)
        scores.append(float(sample.get("score", "nan")))
    best = int(np.nanargmin(scores)) if not all(math.isnan(s) for s in scores) else 0
    aa = native_aatype[designed]
    return {"target": target, "length": len(native), "designed": count,
            "masked_backbone": masked_backbone,
            "n_samples": len(samples), "recovery": float(np.mean(recoveries)), "recovery_best": recoveries[best],
            "perplexity": float(math.exp(native_nll[designed].mean())),
            "baseline_mode_recovery": float((aa == int(composition.argmax())).mean()),
            "baseline_background_recovery": float(composition[aa.clip(max=UNK_INDEX - 1)].mean())}


def evaluate_design(predictions: Path, checkpoint: Path, chains: Path, features_dir: Path,
                    targets: list[str], seed: int = 0) -> list[dict[str, Any]]:
    """Metric rows for ``targets`` (each must have ``{predictions}/{target}.fasta``)."""
    import torch

    from foldworks.models.mpnn import batch_inputs
    from foldworks.train.checkpoint import model_from_checkpoint
    from foldworks.train.data import collate, load_feature_file, make_example

    missing = [t for t in targets if not (predictions / f"{t}.fasta").exists()]
    if missing:
        raise DesignEvaluationError(f"no design in {predictions} for {len(missing)} target(s): {', '.join(missing)}")
    model, config = model_from_checkpoint(checkpoint)
    if getattr(model, "task", "structure") != "design":
        raise DesignEvaluationError(f"{checkpoint}: model {config['model']!r} is not a design family")
    composition = train_composition(chains)
    log.info("train composition: most frequent %s (%.3f); background expected identity sum p^2 = %.4f",
             RESTYPES[int(composition.argmax())], composition.max(), float((composition ** 2).sum()))
    rows = []
    for target in targets:
        batch = collate([make_example(load_feature_file(features_dir / f"{target}.npz"), None, 1, None)])
        with torch.no_grad():
            nll, scored = model.native_nll(batch, torch.Generator().manual_seed(seed))
            node_mask = batch_inputs(batch)["mask"][0].numpy() > 0
        masked = int((batch["residue_mask"][0].numpy() & ~node_mask).sum())
        row = score_target(target, predictions / f"{target}.fasta", batch["aatype"][0].numpy(), scored[0].numpy(),
                           nll[0].double().numpy(), composition, masked)
        rows.append(row)
        log.info("%s: recovery %.3f (best-score sample %.3f), perplexity %.2f, baselines %.3f / %.3f", target,
                 row["recovery"], row["recovery_best"], row["perplexity"], row["baseline_mode_recovery"],
                 row["baseline_background_recovery"])
    return rows


def write_design_metrics(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as a TSV with :data:`DESIGN_COLUMNS` (floats to 4 decimals; NaN as an empty cell,
    the metrics tables' convention for "not scored", which ``read_metric_table`` reads back as NaN)."""
    def fmt(v: Any) -> Any:
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:.4f}"
        return v
    write_tsv_atomic(path, DESIGN_COLUMNS, [[fmt(row[c]) for c in DESIGN_COLUMNS] for row in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.evaluate.design", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--predictions", required=True, type=Path, help="results/predictions/NAME")
    parser.add_argument("--checkpoint", required=True, type=Path, help="results/checkpoints/NAME/best.ckpt")
    parser.add_argument("--chains", required=True, type=Path, help="data/chains.parquet")
    parser.add_argument("--features-dir", required=True, type=Path, help="data/features")
    parser.add_argument("--out", required=True, type=Path, help="test-split design metrics TSV")
    parser.add_argument("--train-out", type=Path, help="metrics TSV for predictions/NAME/train/*.fasta")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--params", default="{}", help="config slice `evaluate` as JSON (provenance only)")
    args = parser.parse_args(argv)
    setup_logging("evaluate")
    import torch

    from foldworks.evaluate.scoring import split_targets
    from foldworks.provenance import provenance_record, write_sidecars

    torch.set_num_threads(max(1, args.threads))
    try:
        rows = evaluate_design(args.predictions, args.checkpoint, args.chains, args.features_dir,
                               split_targets(args.chains, ["test"]))
        write_design_metrics(args.out, rows)
        log.info("wrote %d rows to %s; mean recovery %.4f", len(rows), args.out,
                 float(np.nanmean([r["recovery"] for r in rows])) if rows else float("nan"))
        outputs = [args.out]
        if args.train_out is not None:
            train_dir = args.predictions / "train"
            train = sorted(p.stem for p in train_dir.glob("*.fasta")) if train_dir.is_dir() else []
            write_design_metrics(args.train_out, evaluate_design(train_dir, args.checkpoint, args.chains,
                                                                 args.features_dir, train))
            outputs.append(args.train_out)
        write_sidecars(outputs, provenance_record(
            "evaluate", json.loads(args.params or "{}"), ("evaluate",),
            inputs=sorted(args.predictions.rglob("*.fasta")) + [args.checkpoint, args.chains]))
    except (DesignEvaluationError, ValueError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
