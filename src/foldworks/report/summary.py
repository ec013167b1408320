"""Summary statistics of per-target metric tables (``results/metrics/*.tsv``).

One row per experiment plus a ``baseline`` row: the number of test targets, mean and median of
lDDT-Cα, RMSD-Cα (Å), GDT-TS and TM-score, percentile-bootstrap confidence intervals of the
mean and of the median lDDT-Cα (resampling targets with a fixed seed, so reruns give identical
numbers), the
train-split mean lDDT-Cα where a train table is given, and the mean all-atom lDDT and heavy-atom
RMSD (Å) of all-atom predictions (empty for Cα-only experiments and the baseline).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from foldworks.fsutil import write_tsv_atomic
from foldworks.ids import validate_experiment

BASELINE = "baseline"
SUMMARY_METRICS: tuple[str, ...] = ("lddt_ca", "rmsd_ca", "gdt_ts", "tm_score")
SUMMARY_COLUMNS: tuple[str, ...] = (
    "experiment", "n_targets",
    "lddt_ca_mean", "lddt_ca_median", "lddt_ca_ci_low", "lddt_ca_ci_high",
    "lddt_ca_median_ci_low", "lddt_ca_median_ci_high",
    "rmsd_ca_mean", "rmsd_ca_median", "gdt_ts_mean", "gdt_ts_median",
    "tm_score_mean", "tm_score_median", "train_lddt_ca_mean",
    "lddt_all_atom_mean", "rmsd_heavy_mean",
)
#: Means over the targets that have a value (all-atom predictions only; NaN for Cα-only ones).
ALL_ATOM_METRICS: tuple[str, ...] = ("lddt_all_atom", "rmsd_heavy")
DEFAULT_PARAMS: dict[str, Any] = {"n_bootstrap": 2000, "seed": 0, "confidence": 0.95}


def experiment_name(path: str | Path) -> str:
    """``results/metrics/A.tsv`` → ``A``; ``results/checkpoints/A/metrics.csv`` → ``A``."""
    path = Path(path)
    name = path.parent.name if path.name == "metrics.csv" else path.stem
    return validate_experiment(name)


def read_metric_table(path: str | Path) -> pd.DataFrame:
    """A metrics TSV as a DataFrame (empty cells → NaN, IDs kept as strings)."""
    return pd.read_csv(path, sep="\t", dtype={"target": str, "entry": str, "chain": str},
                       keep_default_na=False, na_values=[""])


def bootstrap_ci(values: Sequence[float], n_resamples: int, seed: int, confidence: float = 0.95,
                 statistic: str = "mean") -> tuple[float, float]:
    """Percentile bootstrap interval of the mean or median of ``values`` (NaNs dropped; NaN if empty)."""
    data = np.asarray(values, np.float64)
    data = data[~np.isnan(data)]
    if data.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    samples = data[rng.integers(0, data.size, size=(n_resamples, data.size))]
    stats = np.median(samples, axis=1) if statistic == "median" else samples.mean(axis=1)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


def bootstrap_mean_ci(values: Sequence[float], n_resamples: int, seed: int,
                      confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (see :func:`bootstrap_ci`)."""
    return bootstrap_ci(values, n_resamples, seed, confidence, "mean")


def summarise_table(name: str, table: pd.DataFrame, train: pd.DataFrame | None,
                    params: Mapping[str, Any]) -> dict[str, Any]:
    """One summary row for experiment ``name`` from its test (and optional train) metrics."""
    row: dict[str, Any] = {"experiment": name, "n_targets": int(len(table))}
    for metric in SUMMARY_METRICS:
        column = pd.to_numeric(table[metric], errors="coerce") if metric in table else pd.Series(dtype=float)
        row[f"{metric}_mean"] = float(column.mean()) if column.notna().any() else math.nan
        row[f"{metric}_median"] = float(column.median()) if column.notna().any() else math.nan
    values = table["lddt_ca"] if "lddt_ca" in table else []
    settings = (int(params["n_bootstrap"]), int(params["seed"]), float(params["confidence"]))
    row["lddt_ca_ci_low"], row["lddt_ca_ci_high"] = bootstrap_ci(values, *settings, "mean")
    row["lddt_ca_median_ci_low"], row["lddt_ca_median_ci_high"] = bootstrap_ci(values, *settings, "median")
    for metric in ALL_ATOM_METRICS:
        column = pd.to_numeric(table[metric], errors="coerce") if metric in table else pd.Series(dtype=float)
        row[f"{metric}_mean"] = float(column.mean()) if column.notna().any() else math.nan
    if train is not None and "lddt_ca" in train and train["lddt_ca"].notna().any():
        row["train_lddt_ca_mean"] = float(train["lddt_ca"].mean())
    else:
        row["train_lddt_ca_mean"] = math.nan
    return row


def summarise(tables: Mapping[str, pd.DataFrame], train_tables: Mapping[str, pd.DataFrame],
              params: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Summary DataFrame (columns :data:`SUMMARY_COLUMNS`), rows in the order of ``tables``
    (put the baseline last)."""
    merged = {**DEFAULT_PARAMS, **(params or {})}
    rows = [summarise_table(name, table, train_tables.get(name), merged) for name, table in tables.items()]
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def restrict_baseline_train(train_tables: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The baseline's train table cut to the train targets the experiments were scored on.

    Experiments score a subset of train chains (``predict.train_subset``) while the baseline scores
    them all; without this, ``train_lddt_ca_mean`` would compare different chains.
    """
    tables = dict(train_tables)
    experiments = [t for name, t in tables.items() if name != BASELINE and "target" in t]
    if BASELINE in tables and experiments and "target" in tables[BASELINE]:
        targets = set().union(*(set(t["target"]) for t in experiments))
        tables[BASELINE] = tables[BASELINE][tables[BASELINE]["target"].isin(targets)]
    return tables


def write_summary(path: str | Path, summary: pd.DataFrame) -> None:
    """Write the summary TSV atomically; floats with 4 decimals, NaN as an empty cell."""
    def cell(value: Any) -> str:
        if isinstance(value, (float, np.floating)):
            return "" if math.isnan(value) else f"{float(value):.4f}"
        return str(value)

    rows = [[cell(value) for value in record] for record in summary[list(SUMMARY_COLUMNS)].itertuples(index=False)]
    write_tsv_atomic(path, SUMMARY_COLUMNS, rows)
