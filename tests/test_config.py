"""Which configuration a run uses: a ``--configfile`` replaces the demo's, defaults come from the schema."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from conftest import REPO_ROOT, run_snakemake

DEMO = REPO_ROOT / "config" / "config.yaml"


def planned_experiments(log: str) -> dict[str, list[str]]:
    """Rule name -> the ``experiment`` wildcard of each of its jobs in a dry-run log."""
    jobs: dict[str, list[str]] = {}
    for rule, body in re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)+)", log, re.MULTILINE):
        found = re.search(r"^    wildcards: .*\bexperiment=([\w-]+)", body, re.MULTILINE)
        if found:
            jobs.setdefault(rule, []).append(found.group(1))
    return jobs


def dry_run(workdir: Path, config: dict) -> str:
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workdir, "-n", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def test_a_user_config_plans_only_its_own_experiment(tmp_path, pdb_mirror):
    demo = yaml.safe_load(DEMO.read_text())
    user = {**demo, "pdb": {**demo["pdb"], "source": str(pdb_mirror)},
            "experiments": {"mine": demo["experiments"]["distogram"]}}
    jobs = planned_experiments(dry_run(tmp_path, user))
    assert jobs == {"train": ["mine"], "predict": ["mine"], "evaluate": ["mine"]}, jobs


def test_the_demo_config_plans_all_its_experiments(tmp_path, pdb_mirror):
    demo = yaml.safe_load(DEMO.read_text())
    demo["pdb"]["source"] = str(pdb_mirror)
    jobs = planned_experiments(dry_run(tmp_path, demo))
    assert sorted(jobs["train"]) == sorted(demo["experiments"])
    assert sorted(jobs["predict"]) == sorted(demo["experiments"])



def test_the_demo_settings_outside_its_experiments_are_the_schema_defaults(tmp_path):
    """config/config.yaml says so: a user file naming only entries and experiments runs the demo's settings."""
    from foldworks.repro.config import load_workflow_config

    demo = load_workflow_config(REPO_ROOT)
    minimal = tmp_path / "minimal.yaml"
    minimal.write_text(yaml.safe_dump({"pdb": {"entries": demo["pdb"]["entries"]}, "experiments": demo["experiments"]}))
    assert load_workflow_config(REPO_ROOT, [minimal]) == demo
