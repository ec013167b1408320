"""The whole workflow, end to end, with the real tools on a tiny config (a few minutes).

Runs Snakemake on 17 real mirror entries into a temp directory: fetch from the local mirror,
parse, chain table + MMseqs2 splits, HH-suite database + hhblits, features, two structure and two
design experiments (one chained to the other by init_from) through the shared trainer,
predictions, metrics, summaries, plots and the HTML report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO_ROOT, require_tool
from conftest import run_snakemake as snakemake

pytestmark = pytest.mark.slow
# tests/tiny_config.yaml's experiments: the demo's five, shrunk
STRUCTURE, DESIGN = ("evoformer", "distogram", "msa_trunk"), ("mpnn", "mpnn_ft")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, pdb_mirror):
    for tool in ("hhblits", "mmseqs", "ffindex_build"):
        require_tool(tool)
    workdir = tmp_path_factory.mktemp("tiny_workflow")
    config = yaml.safe_load((REPO_ROOT / "tests" / "tiny_config.yaml").read_text())
    config["pdb"]["source"] = str(pdb_mirror)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(workdir)
    assert result.returncode == 0, result.stderr[-6000:]
    return workdir, config


def test_every_stage_wrote_its_outputs(tiny_run):
    workdir, config = tiny_run
    entries = config["pdb"]["entries"]
    manifest = pd.read_csv(workdir / "data/raw/manifest.tsv", sep="\t")
    assert sorted(manifest["entry"]) == sorted(entries)
    table = pd.read_parquet(workdir / "data/chains.parquet")
    passed = table[table["passed_filters"]]
    assert set(passed["split"]) == {"train", "val", "test"}
    assert passed.groupby("cluster")["split"].nunique().max() == 1
    a3ms = list((workdir / "data/msa").rglob("*.a3m"))
    assert len(a3ms) == passed["sequence_hash"].nunique()
    features = sorted(p.stem for p in (workdir / "data/features").glob("*.npz"))
    assert features == sorted(passed["entry"] + "_" + passed["chain"])
    test_targets = sorted((passed[passed["split"] == "test"]["entry"] + "_" + passed[passed["split"] == "test"]["chain"]))
    for experiment in DESIGN:  # the demo's design experiments, shrunk by tiny_config
        assert (workdir / f"results/checkpoints/{experiment}/best.ckpt").stat().st_size > 0
        designed = sorted(p.stem for p in (workdir / f"results/predictions/{experiment}").glob("*.fasta"))
        assert designed == test_targets
        metrics = pd.read_csv(workdir / f"results/metrics/{experiment}.tsv", sep="\t")
        assert sorted(metrics["target"]) == test_targets and metrics["recovery"].between(0, 1).all()
    report = json.loads((workdir / "results/checkpoints/mpnn_ft/config.json").read_text())["init_report"]
    assert report["matched"] and not report["shape_mismatched"]  # chained from mpnn's best.ckpt
    for experiment in STRUCTURE:
        assert (workdir / f"results/checkpoints/{experiment}/best.ckpt").stat().st_size > 0
        predicted = sorted(p.stem for p in (workdir / f"results/predictions/{experiment}").glob("*.cif"))
        assert predicted == test_targets
        metrics = pd.read_csv(workdir / f"results/metrics/{experiment}.tsv", sep="\t")
        assert sorted(metrics["target"]) == test_targets
        assert metrics[["rmsd_ca", "lddt_ca", "gdt_ts", "tm_score"]].notna().all().all()
        assert metrics["lddt_ca"].between(0, 1).all()


def test_summary_has_every_experiment_and_baseline(tiny_run):
    workdir, config = tiny_run
    summary = pd.read_csv(workdir / "results/summary.tsv", sep="\t")
    assert set(summary["experiment"]) == set(STRUCTURE) | {"baseline"}
    design = pd.read_csv(workdir / "results/design_summary.tsv", sep="\t")
    assert set(design["experiment"]) == set(DESIGN)
    assert (workdir / "results/plots/design_recovery.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for plot in ("lddt_ca_distribution", "lddt_ca_vs_length", "training_curves", "per_target_comparison",
                 "plddt_calibration"):
        assert (workdir / f"results/plots/{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_second_run_has_nothing_to_do(tiny_run):
    workdir, _ = tiny_run
    result = snakemake(workdir, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Nothing to be done" in result.stdout + result.stderr


def test_html_report_contains_plots_and_summary(tiny_run):
    workdir, _ = tiny_run
    report = workdir / "report.html"
    result = snakemake(workdir, "--report", str(report))
    assert result.returncode == 0, result.stderr[-3000:]
    html = report.read_text(errors="replace")
    for name in ("lddt_ca_distribution.png", "lddt_ca_vs_length.png", "training_curves.png",
                 "per_target_comparison.png", "plddt_calibration.png", "summary.tsv"):
        assert name in html


def test_every_rule_has_a_log_and_lint_is_clean(tiny_run):
    workdir, _ = tiny_run
    result = snakemake(workdir, "--lint")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr
