"""Design-family report: ``python -m foldworks.report.design``.

    python -m foldworks.report.design --metrics results/metrics/A.tsv ... \\
        [--train-metrics results/metrics/train/A.tsv ...] [--train-logs results/checkpoints/A/metrics.csv ...] \\
        --summary results/design_summary.tsv --plot results/plots/design_recovery.png

A separate table from ``results/summary.tsv`` (DATA_FORMATS.md §9b): design metrics
(recovery, perplexity, composition baselines) share no column with the structure summary
(lDDT/RMSD/GDT/TM), and one table per task keeps each readable and keeps summary.tsv's
schema unchanged for its consumers. One row per design experiment: :data:`SUMMARY_COLUMNS`.
The plot: per-target test recovery per experiment with the two composition baselines, and
validation recovery against optimiser step.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pandas as pd

from foldworks.fsutil import write_tsv_atomic
from foldworks.logutil import setup_logging
from foldworks.report.summary import experiment_name, read_metric_table

log = logging.getLogger("foldworks.report.design")
SUMMARY_COLUMNS = ("experiment", "n_targets", "recovery_mean", "recovery_median", "recovery_best_mean",
                   "perplexity_mean", "baseline_mode_recovery_mean", "baseline_background_recovery_mean",
                   "above_baselines", "train_recovery_mean", "best_val_recovery")


def summarise_design(metrics: dict[str, pd.DataFrame], train: dict[str, pd.DataFrame],
                     logs: dict[str, pd.DataFrame]) -> list[list[object]]:
    """Summary rows (:data:`SUMMARY_COLUMNS`); ``above_baselines`` = mean recovery above both baselines' means."""
    rows = []
    for name, table in metrics.items():
        if table.empty:
            raise ValueError(f"experiment {name}: empty design metrics table")
        mode, background = table["baseline_mode_recovery"].mean(), table["baseline_background_recovery"].mean()
        mean = table["recovery"].mean()
        train_mean = train[name]["recovery"].mean() if name in train and not train[name].empty else float("nan")
        best_val = logs[name]["val_recovery"].max() if name in logs else float("nan")
        rows.append([name, len(table), round(mean, 4), round(table["recovery"].median(), 4),
                     round(table["recovery_best"].mean(), 4), round(table["perplexity"].mean(), 3),
                     round(mode, 4), round(background, 4), bool(mean > max(mode, background)),
                     round(train_mean, 4), round(best_val, 4)])
        log.info("%s: mean test recovery %.4f over %d targets; baselines most-frequent %.4f, background %.4f",
                 name, mean, len(table), mode, background)
    return rows


def plot_design(metrics: dict[str, pd.DataFrame], logs: dict[str, pd.DataFrame], path: Path) -> None:
    """Per-target recovery (points + box) per experiment with baseline means; validation recovery curves."""
    from foldworks.report.plots import plt, save_figure, sns

    frame = pd.concat([t.assign(experiment=n) for n, t in metrics.items()], ignore_index=True)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    sns.boxplot(data=frame, x="experiment", y="recovery", ax=axes[0], color="lightgray", showfliers=False)
    sns.stripplot(data=frame, x="experiment", y="recovery", ax=axes[0], size=4)
    axes[0].axhline(frame["baseline_mode_recovery"].mean(), ls="--", c="tab:red", label="most-frequent residue")
    axes[0].axhline(frame["baseline_background_recovery"].mean(), ls=":", c="tab:purple",
                    label="background sampling")
    axes[0].set_ylabel("test sequence recovery")
    axes[0].legend(fontsize=8)
    for name, log_frame in logs.items():
        axes[1].plot(log_frame["step"], log_frame["val_recovery"], marker="o", label=name)
    axes[1].set_xlabel("optimiser step")
    axes[1].set_ylabel("validation recovery (teacher-forced)")
    if logs:
        axes[1].legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.report.design", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrics", nargs="+", required=True, type=Path)
    parser.add_argument("--train-metrics", nargs="*", default=[], type=Path)
    parser.add_argument("--train-logs", nargs="*", default=[], type=Path)
    parser.add_argument("--summary", required=True, type=Path)
    parser.add_argument("--plot", required=True, type=Path)
    args = parser.parse_args(argv)
    setup_logging("report")
    try:
        metrics = {experiment_name(p): read_metric_table(p) for p in args.metrics}
        train = {experiment_name(p): read_metric_table(p) for p in args.train_metrics}
        logs = {experiment_name(p): pd.read_csv(p) for p in args.train_logs}
        for name, frame in logs.items():
            if "val_recovery" not in frame.columns:
                raise ValueError(f"training log of {name}: no val_recovery column (not a design experiment?)")
        write_tsv_atomic(args.summary, SUMMARY_COLUMNS, summarise_design(metrics, train, logs))
        plot_design(metrics, logs, args.plot)
    except (ValueError, KeyError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
