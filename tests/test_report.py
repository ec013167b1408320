"""Tests of the report stage on small metric tables and training logs written in tmp_path."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from foldworks.evaluate.scoring import METRIC_COLUMNS, write_metrics
from foldworks.report.__main__ import main as report_main
from foldworks.evaluate.scoring import RESIDUE_COLUMNS, write_residues
from foldworks.report.plots import PLOT_FILES, calibration_table
from foldworks.report.summary import (
    SUMMARY_COLUMNS, bootstrap_ci, bootstrap_mean_ci, read_metric_table, restrict_baseline_train,
)

TARGETS = ["1aki_A", "1crn_A", "1fki_A", "1l2y_A", "1stp_A", "1ubq_A", "2igd_A", "2src_A",
           "3pdz_A", "4lzt_A", "5pti_A", "205l_A"]
LENGTHS = [129, 46, 107, 20, 159, 76, 61, 450, 96, 129, 58, 164]


def metric_rows(seed: int, lddt_centre: float, plddt: bool) -> list[dict]:
    """Realistic per-target rows: lDDT-Cα around ``lddt_centre``, RMSD/GDT/TM consistent with it."""
    rng = np.random.default_rng(seed)
    rows = []
    for target, length in zip(TARGETS, LENGTHS):
        lddt = float(np.clip(rng.normal(lddt_centre, 0.12), 0.05, 0.98))
        entry, chain = target.split("_")
        rows.append({
            "target": target, "entry": entry, "chain": chain, "length": length,
            "n_resolved": length - int(rng.integers(0, 5)),
            "rmsd_ca": float(2.0 + 14.0 * (1.0 - lddt) + rng.normal(0, 0.5)),
            "lddt_ca": lddt, "gdt_ts": lddt * 0.9, "gdt_ha": lddt * 0.7,
            "tm_score": float(np.clip(lddt - 0.05, 0, 1)),
            "mean_plddt": float(100 * lddt + rng.normal(0, 5)) if plddt else float("nan"),
        })
    return rows


def write_log(path: Path, final_lddt: float) -> None:
    """A training log like Lightning's: validation rows, a NaN train_loss on the first row."""
    path.parent.mkdir(parents=True)
    steps = np.arange(0, 400, 50)
    frame = pd.DataFrame({"step": steps, "epoch": steps // 100,
                          "train_loss": np.linspace(3.0, 1.1, len(steps)),
                          "val_loss": np.linspace(3.2, 1.6, len(steps)),
                          "val_lddt_ca": np.linspace(0.25, final_lddt, len(steps))})
    frame.loc[0, "train_loss"] = np.nan
    frame.loc[3, "val_lddt_ca"] = np.nan
    frame.to_csv(path, index=False)


def residue_rows(seed: int, overconfidence: float) -> list[dict]:
    """Per-residue rows: lDDT-Cα in [0, 1], pLDDT = 100 x lDDT-Cα + N(0, 3) + ``overconfidence``."""
    rng = np.random.default_rng(seed)
    rows = []
    for target, length in zip(TARGETS, LENGTHS):
        lddt = np.clip(rng.beta(4, 2, length), 0, 1)
        plddt = np.clip(100 * lddt + rng.normal(overconfidence, 3, length), 0, 100)
        rows += [{"target": target, "residue": i + 1, "plddt": float(p), "lddt_ca": float(q)}
                 for i, (p, q) in enumerate(zip(plddt, lddt))]
    return rows


@pytest.fixture
def inputs(tmp_path):
    metrics = tmp_path / "metrics"
    write_metrics(metrics / "msa_trunk.tsv", metric_rows(1, 0.62, True))
    write_metrics(metrics / "single_seq.tsv", metric_rows(2, 0.48, True))
    write_metrics(metrics / "baseline.tsv", metric_rows(3, 0.22, False))
    for name, centre in (("msa_trunk", 0.8), ("single_seq", 0.7), ("baseline", 0.2)):
        write_metrics(metrics / "train" / f"{name}.tsv", metric_rows(4, centre, name != "baseline")[:6])
    for name, seed, bias in (("msa_trunk", 5, 0.0), ("single_seq", 6, 15.0)):
        write_residues(metrics / "residues" / f"{name}.tsv", residue_rows(seed, bias))
    write_log(tmp_path / "checkpoints/msa_trunk/metrics.csv", 0.6)
    write_log(tmp_path / "checkpoints/single_seq/metrics.csv", 0.45)
    args = ["--metrics", str(metrics / "msa_trunk.tsv"), str(metrics / "single_seq.tsv"),
            "--baseline", str(metrics / "baseline.tsv"),
            "--train-metrics", *(str(metrics / "train" / f"{n}.tsv") for n in ("msa_trunk", "single_seq", "baseline")),
            "--train-logs", str(tmp_path / "checkpoints/msa_trunk/metrics.csv"),
            str(tmp_path / "checkpoints/single_seq/metrics.csv"),
            "--residues", *(str(metrics / "residues" / f"{n}.tsv") for n in ("msa_trunk", "single_seq")),
            "--summary", str(tmp_path / "summary.tsv"), "--plots-dir", str(tmp_path / "plots")]
    return tmp_path, args


def test_summary_numbers_match_pandas(inputs):
    root, args = inputs
    assert report_main(args) == 0
    summary = pd.read_csv(root / "summary.tsv", sep="\t", keep_default_na=False, na_values=[""])
    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    assert list(summary["experiment"]) == ["msa_trunk", "single_seq", "baseline"]
    for name in summary["experiment"]:
        table = read_metric_table(root / "metrics" / f"{name}.tsv")
        train = read_metric_table(root / "metrics" / "train" / f"{name}.tsv")
        row = summary.set_index("experiment").loc[name]
        assert row["n_targets"] == len(TARGETS)
        for metric in ("lddt_ca", "rmsd_ca", "gdt_ts", "tm_score"):
            assert row[f"{metric}_mean"] == pytest.approx(table[metric].mean(), abs=5e-5)
            assert row[f"{metric}_median"] == pytest.approx(table[metric].median(), abs=5e-5)
        assert row["lddt_ca_ci_low"] < row["lddt_ca_mean"] < row["lddt_ca_ci_high"]
        assert row["lddt_ca_ci_high"] - row["lddt_ca_ci_low"] < 0.2
        assert row["lddt_ca_median_ci_low"] <= row["lddt_ca_median"] <= row["lddt_ca_median_ci_high"]
        assert row["train_lddt_ca_mean"] == pytest.approx(train["lddt_ca"].mean(), abs=5e-5)
    first = (root / "summary.tsv").read_bytes()
    assert report_main(args) == 0
    assert (root / "summary.tsv").read_bytes() == first  # fixed bootstrap seed


def test_plots_are_valid_png_images(inputs):
    root, args = inputs
    assert report_main(args) == 0
    for name in PLOT_FILES:
        path = root / "plots" / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200, name
        assert float(image[..., :3].std()) > 0.05, f"{name} looks blank"
    assert not list((root / "plots").glob(".*tmp*"))  # no temporary files left behind


def test_bootstrap_interval_is_seeded_and_sensible():
    values = np.random.default_rng(0).normal(0.6, 0.1, 40)
    interval = bootstrap_mean_ci(values, 2000, seed=0)
    assert interval == bootstrap_mean_ci(values, 2000, seed=0)
    assert interval != bootstrap_mean_ci(values, 2000, seed=1)
    half_width = 1.96 * values.std(ddof=1) / np.sqrt(values.size)
    assert interval[0] == pytest.approx(values.mean() - half_width, abs=0.01)
    assert interval[1] == pytest.approx(values.mean() + half_width, abs=0.01)
    assert bootstrap_mean_ci([0.5] * 5, 100, seed=0) == (0.5, 0.5)
    assert all(np.isnan(bootstrap_mean_ci([], 100, seed=0)))


def test_median_interval_covers_the_median_not_the_mean():
    # skewed values: most near 0.2, a few near 0.9, so the mean sits far above the median
    values = np.concatenate([np.full(30, 0.2), np.full(10, 0.9)]) + np.random.default_rng(1).normal(0, 0.01, 40)
    low, high = bootstrap_ci(values, 2000, seed=0, statistic="median")
    assert low <= np.median(values) <= high
    assert high < values.mean()  # the mean (0.375) lies outside the median's interval
    assert bootstrap_ci(values, 2000, seed=0, statistic="mean") == bootstrap_mean_ci(values, 2000, seed=0)


def test_baseline_train_mean_uses_the_experiments_train_targets():
    experiment = pd.DataFrame({"target": ["1aki_A", "1crn_A"], "lddt_ca": [0.5, 0.7]})
    baseline = pd.DataFrame({"target": ["1aki_A", "1crn_A", "1ubq_A"], "lddt_ca": [0.2, 0.4, 0.9]})
    tables = restrict_baseline_train({"distogram": experiment, "baseline": baseline})
    assert sorted(tables["baseline"]["target"]) == ["1aki_A", "1crn_A"]
    assert tables["baseline"]["lddt_ca"].mean() == pytest.approx(0.3)
    assert tables["distogram"] is experiment
    assert len(restrict_baseline_train({"baseline": baseline})["baseline"]) == 3  # nothing to align to


def test_report_rejects_a_bad_training_log(inputs, caplog):
    root, args = inputs
    log_path = root / "checkpoints/single_seq/metrics.csv"
    pd.read_csv(log_path).drop(columns=["val_lddt_ca"]).to_csv(log_path, index=False)
    with caplog.at_level(logging.ERROR):
        assert report_main(args) == 1
    assert "single_seq" in caplog.text and "val_lddt_ca" in caplog.text


def test_metric_tables_keep_their_columns(inputs):
    root, _ = inputs
    table = read_metric_table(root / "metrics" / "baseline.tsv")
    assert list(table.columns) == list(METRIC_COLUMNS) and table["mean_plddt"].isna().all()


def test_calibration_bins_show_overconfidence(inputs):
    root, args = inputs
    assert report_main(args) == 0
    tables = {name: pd.read_csv(root / "metrics" / "residues" / f"{name}.tsv", sep="\t")
              for name in ("msa_trunk", "single_seq")}
    assert list(tables["msa_trunk"].columns) == list(RESIDUE_COLUMNS)
    calibrated, overconfident = (calibration_table(tables[n]) for n in ("msa_trunk", "single_seq"))
    assert calibrated["n_residues"].sum() == len(tables["msa_trunk"]) == sum(LENGTHS)
    populated = calibrated[calibrated["n_residues"] >= 50]
    np.testing.assert_allclose(populated["lddt_ca_mean"], populated["plddt_mean"], atol=6.0)
    busy = overconfident[overconfident["n_residues"] >= 50]
    assert (busy["plddt_mean"] - busy["lddt_ca_mean"]).mean() > 8.0  # shifted by +15 pLDDT
    assert (calibrated["bin_low"] < calibrated["plddt_mean"]).all()
    assert (calibrated["plddt_mean"] <= calibrated["bin_high"]).all()
