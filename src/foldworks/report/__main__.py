"""Summary table and plots of all experiments: ``python -m foldworks.report``.

    python -m foldworks.report --metrics results/metrics/A.tsv results/metrics/B.tsv \\
        --baseline results/metrics/baseline.tsv --train-metrics results/metrics/train/*.tsv \\
        --train-logs results/checkpoints/A/metrics.csv ... \\
        --residues results/metrics/residues/A.tsv ... \\
        --summary results/summary.tsv --plots-dir results/plots [--params '{"seed": 0}']

Experiment names come from the file names (``A.tsv`` → ``A``, ``checkpoints/A/metrics.csv`` →
``A``); train tables are matched to experiments (and ``baseline``) by name. ``--residues``
tables (target, residue, plddt, lddt_ca) feed the pLDDT calibration plot.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import pandas as pd

from foldworks.logutil import setup_logging
from foldworks.ids import InvalidIdentifier
from foldworks.report import plots
from foldworks.report.summary import (
    BASELINE, DEFAULT_PARAMS, experiment_name, read_metric_table, restrict_baseline_train, summarise,
    write_summary,
)

log = logging.getLogger("foldworks.report")


def read_tables(paths: list[Path]) -> dict[str, pd.DataFrame]:
    """``{experiment: metrics table}`` in the order given; duplicate names are an error."""
    tables: dict[str, pd.DataFrame] = {}
    for path in paths:
        name = experiment_name(path)
        if name in tables:
            raise ValueError(f"experiment {name}: given twice ({path})")
        tables[name] = read_metric_table(path)
    return tables


def read_logs(paths: list[Path]) -> dict[str, pd.DataFrame]:
    """``{experiment: training log}`` from ``checkpoints/{experiment}/metrics.csv`` files."""
    logs = {}
    for path in paths:
        frame = pd.read_csv(path)
        missing = {"step", "train_loss", "val_lddt_ca"} - set(frame.columns)
        if missing:
            raise ValueError(f"training log {path}: missing columns {sorted(missing)}")
        logs[experiment_name(path)] = frame
    return logs


def read_residues(paths: list[Path]) -> dict[str, pd.DataFrame]:
    """``{experiment: per-residue table}`` from ``metrics/residues/{experiment}.tsv`` files."""
    tables = {}
    for path in paths:
        frame = pd.read_csv(path, sep="\t", dtype={"target": str}, keep_default_na=False, na_values=[""])
        missing = {"target", "residue", "plddt", "lddt_ca"} - set(frame.columns)
        if missing:
            raise ValueError(f"per-residue table {path}: missing columns {sorted(missing)}")
        tables[experiment_name(path)] = frame
    return tables


def run(args: argparse.Namespace) -> None:
    params = {**DEFAULT_PARAMS, **json.loads(args.params or "{}")}
    tables = read_tables(args.metrics)
    if BASELINE in tables:
        raise ValueError("experiment name 'baseline' is reserved for --baseline")
    baseline = read_metric_table(args.baseline)
    train_tables = restrict_baseline_train(read_tables(args.train_metrics))
    with_baseline = {**tables, BASELINE: baseline}
    summary = summarise(with_baseline, train_tables, params)
    write_summary(args.summary, summary)
    log.info("summary of %d experiments + baseline written to %s", len(tables), args.summary)
    logs = read_logs(args.train_logs)
    plots_dir = args.plots_dir
    plots.plot_distribution(with_baseline, plots_dir / "lddt_ca_distribution.png")
    plots.plot_vs_length(with_baseline, plots_dir / "lddt_ca_vs_length.png")
    plots.plot_training_curves(logs, plots_dir / "training_curves.png")
    plots.plot_per_target(tables, baseline, plots_dir / "per_target_comparison.png")
    plots.plot_calibration(read_residues(args.residues), plots_dir / "plddt_calibration.png")
    log.info("plots written to %s", plots_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrics", nargs="+", required=True, type=Path, help="results/metrics/NAME.tsv")
    parser.add_argument("--baseline", required=True, type=Path, help="results/metrics/baseline.tsv")
    parser.add_argument("--train-metrics", nargs="*", default=[], type=Path)
    parser.add_argument("--train-logs", nargs="*", default=[], type=Path)
    parser.add_argument("--residues", nargs="*", default=[], type=Path,
                        help="results/metrics/residues/NAME.tsv (pLDDT calibration)")
    parser.add_argument("--summary", required=True, type=Path, help="results/summary.tsv")
    parser.add_argument("--plots-dir", required=True, type=Path, help="results/plots")
    parser.add_argument("--params", default="{}",
                        help="JSON: n_bootstrap (2000), seed (0), confidence (0.95)")
    args = parser.parse_args(argv)
    setup_logging("report")
    try:
        run(args)
    except (ValueError, InvalidIdentifier, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
