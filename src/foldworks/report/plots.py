"""Seaborn figures of the report (PNG, matplotlib Agg backend, each written atomically).

- ``lddt_ca_distribution.png``: per-target lDDT-Cα of each experiment and the baseline.
- ``lddt_ca_vs_length.png``: lDDT-Cα against chain length (residues).
- ``training_curves.png``: training loss and validation lDDT-Cα against optimiser step.
- ``per_target_comparison.png``: each experiment's per-target lDDT-Cα against the baseline's.
- ``plddt_calibration.png``: predicted confidence (pLDDT, per residue) against per-residue
  lDDT-Cα (x 100), with the mean lDDT-Cα per 10-point pLDDT bin; perfect calibration is y = x.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from typing import Mapping

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from foldworks.fsutil import atomic_path  # noqa: E402

PLOT_FILES: tuple[str, ...] = (
    "lddt_ca_distribution.png", "lddt_ca_vs_length.png", "training_curves.png",
    "per_target_comparison.png", "plddt_calibration.png",
)
CALIBRATION_BINS: tuple[float, ...] = tuple(float(x) for x in range(0, 101, 10))  #: pLDDT bin edges
_MAX_POINTS = 20_000  # residues drawn per experiment (a fixed-seed sample; the bins use all)
_DPI = 120


def save_figure(figure: plt.Figure, path: str | Path) -> None:
    """Save ``figure`` as PNG to ``path`` atomically and close it."""
    with atomic_path(path) as tmp:  # format given explicitly; temp never matches *.png
        figure.savefig(tmp, format="png", dpi=_DPI, bbox_inches="tight")
    plt.close(figure)


def long_table(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-experiment metric tables with an ``experiment`` column."""
    frames = [table.assign(experiment=name) for name, table in tables.items()]
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return pd.DataFrame(columns=["experiment", "target", "length", "lddt_ca"])
    return pd.concat(frames, ignore_index=True)


def _note_if_empty(axis: plt.Axes, frame: pd.DataFrame, message: str) -> bool:
    if frame.empty:
        axis.text(0.5, 0.5, message, ha="center", va="center", transform=axis.transAxes)
        return True
    return False


def plot_distribution(tables: Mapping[str, pd.DataFrame], path: str | Path) -> None:
    """Box plot plus points of per-target lDDT-Cα for each experiment (baseline included)."""
    data = long_table(tables).dropna(subset=["lddt_ca"])
    order = list(tables)
    figure, axis = plt.subplots(figsize=(max(4.0, 1.4 * len(order) + 2), 4.0))
    if not _note_if_empty(axis, data, "no scored targets"):
        with warnings.catch_warnings():  # seaborn 0.13 passes matplotlib's deprecated `vert`
            warnings.simplefilter("ignore", matplotlib.MatplotlibDeprecationWarning)
            sns.boxplot(data=data, x="experiment", y="lddt_ca", order=order, hue="experiment",
                        hue_order=order, legend=False, ax=axis, showfliers=False)
        sns.stripplot(data=data, x="experiment", y="lddt_ca", order=order, color="black",
                      size=3, alpha=0.6, jitter=0.2, ax=axis)
    axis.set(ylim=(0, 1), xlabel="", ylabel="lDDT-Cα (test targets)")
    save_figure(figure, path)


def plot_vs_length(tables: Mapping[str, pd.DataFrame], path: str | Path) -> None:
    """Scatter of lDDT-Cα against chain length (residues), one colour per experiment."""
    data = long_table(tables).dropna(subset=["lddt_ca"])
    figure, axis = plt.subplots(figsize=(6.0, 4.0))
    if not _note_if_empty(axis, data, "no scored targets"):
        sns.scatterplot(data=data, x="length", y="lddt_ca", hue="experiment", hue_order=list(tables),
                        style="experiment", ax=axis)
    axis.set(ylim=(0, 1), xlabel="chain length (residues)", ylabel="lDDT-Cα")
    save_figure(figure, path)


def plot_training_curves(logs: Mapping[str, pd.DataFrame], path: str | Path) -> None:
    """Training loss and validation lDDT-Cα against step for each experiment's ``metrics.csv``."""
    frames = [log.assign(experiment=name) for name, log in logs.items() if not log.empty]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["experiment", "step", "train_loss", "val_lddt_ca"])
    figure, axes = plt.subplots(1, 2, figsize=(10.0, 4.0))
    for axis, column, label in ((axes[0], "train_loss", "training loss"),
                                (axes[1], "val_lddt_ca", "validation lDDT-Cα")):
        subset = data.dropna(subset=[column]) if column in data else data.iloc[0:0]
        if not _note_if_empty(axis, subset, f"no {label} logged"):
            sns.lineplot(data=subset, x="step", y=column, hue="experiment", hue_order=list(logs),
                         marker="o", ax=axis)
        axis.set(xlabel="optimiser step", ylabel=label)
    save_figure(figure, path)


def plot_per_target(tables: Mapping[str, pd.DataFrame], baseline: pd.DataFrame,
                    path: str | Path) -> None:
    """Per-target lDDT-Cα of each experiment (y) against the baseline (x); above y = x is better."""
    reference = baseline[["target", "lddt_ca"]].rename(columns={"lddt_ca": "baseline_lddt_ca"})
    data = long_table(tables).merge(reference, on="target", how="inner")
    data = data.dropna(subset=["lddt_ca", "baseline_lddt_ca"])
    figure, axis = plt.subplots(figsize=(5.0, 5.0))
    if not _note_if_empty(axis, data, "no targets shared with the baseline"):
        sns.scatterplot(data=data, x="baseline_lddt_ca", y="lddt_ca", hue="experiment",
                        hue_order=list(tables), style="experiment", ax=axis)
        better = (data["lddt_ca"] > data["baseline_lddt_ca"]).groupby(data["experiment"]).mean()
        axis.set_title("; ".join(f"{name}: {100 * better.get(name, 0):.0f}% above baseline"
                                 for name in tables if name in better.index), fontsize=9)
    axis.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="baseline lDDT-Cα", ylabel="experiment lDDT-Cα")
    save_figure(figure, path)


def calibration_table(residues: pd.DataFrame) -> pd.DataFrame:
    """Mean per-residue lDDT-Cα (x 100) and residue count per pLDDT bin (:data:`CALIBRATION_BINS`).

    ``residues`` has columns ``plddt`` (0-100) and ``lddt_ca`` (0-1); rows with either missing
    are dropped. Returns columns ``bin_low, bin_high, plddt_mean, lddt_ca_mean, n_residues``.
    """
    data = residues.dropna(subset=["plddt", "lddt_ca"])
    edges = np.asarray(CALIBRATION_BINS)
    index = np.clip(np.digitize(data["plddt"], edges) - 1, 0, len(edges) - 2)
    grouped = data.assign(bin=index).groupby("bin")
    table = pd.DataFrame({"plddt_mean": grouped["plddt"].mean(),
                          "lddt_ca_mean": 100.0 * grouped["lddt_ca"].mean(),
                          "n_residues": grouped.size()})
    table.insert(0, "bin_high", edges[table.index + 1])
    table.insert(0, "bin_low", edges[table.index])
    return table.reset_index(drop=True)


def plot_calibration(residues: Mapping[str, pd.DataFrame], path: str | Path) -> None:
    """pLDDT (x) against per-residue lDDT-Cα x 100 (y) per experiment: residues as faint points,
    binned means as lines, the diagonal y = x, and Pearson r per experiment in the legend."""
    figure, axis = plt.subplots(figsize=(5.5, 5.0))
    drawn = 0
    palette = sns.color_palette(n_colors=max(1, len(residues)))
    for colour, (name, table) in zip(palette, residues.items()):
        data = table.dropna(subset=["plddt", "lddt_ca"])
        if data.empty:
            continue
        drawn += 1
        shown = data.sample(min(len(data), _MAX_POINTS), random_state=0)
        axis.scatter(shown["plddt"], 100.0 * shown["lddt_ca"], s=4, alpha=0.15, color=colour,
                     linewidths=0)
        bins = calibration_table(data)
        r = float(np.corrcoef(data["plddt"], data["lddt_ca"])[0, 1]) if len(data) > 2 else float("nan")
        axis.plot(bins["plddt_mean"], bins["lddt_ca_mean"], marker="o", color=colour,
                  label=f"{name} (r = {r:.2f}, {len(data)} residues)")
    if drawn == 0:
        axis.text(0.5, 0.5, "no per-residue pLDDT", ha="center", va="center", transform=axis.transAxes)
    else:
        axis.legend(fontsize=8, loc="upper left")
    axis.plot([0, 100], [0, 100], color="grey", linestyle="--", linewidth=1)
    axis.set(xlim=(0, 100), ylim=(0, 100), xlabel="predicted pLDDT (per residue)",
             ylabel="lDDT-Cα x 100 (per residue, test targets)")
    save_figure(figure, path)
