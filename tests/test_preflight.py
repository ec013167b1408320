"""`python -m foldworks.preflight` on a copy of a small real run (three mirror entries through
chains, parse, hhblits and features): the clean run passes; each planted defect (missing parsed
chain, changed structure, missing/failed/foreign a3m, missing or stale features file, an
inconsistent chain-table row, a missing template file) is reported under its reason, with a
non-zero exit."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO_ROOT, demo_entry_key, require_tool
from conftest import run_snakemake as snakemake
from foldworks.ids import msa_relpath
from foldworks.msa.a3m import format_header
from foldworks.preflight import main as preflight

pytestmark = pytest.mark.slow
ENTRIES = ["1crn", "1ubq", "1aki"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, pdb_mirror) -> Path:
    require_tool("hhblits")
    workdir = tmp_path_factory.mktemp("preflight_run")
    config = {"pdb": {"entries": ENTRIES, "source": str(pdb_mirror)},
              "msa": {"databases": [{"name": "own", "iterations": 1}]},
              "experiments": {"distogram": {"model": "distogram"}}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(workdir, "data/chains.parquet")
    assert result.returncode == 0, result.stderr[-3000:]
    table = pd.read_parquet(workdir / "data/chains.parquet")
    passed = table[table["passed_filters"]]
    targets = [f"data/features/{e}_{c}.npz" for e, c in zip(passed["entry"], passed["chain"])]
    shards = sorted({f"data/features/shards/{demo_entry_key(e)}.tsv" for e in passed["entry"]})
    result = snakemake(workdir, *shards)
    assert result.returncode == 0, result.stderr[-3000:]
    assert all((workdir / t).exists() for t in targets)
    return workdir


@pytest.fixture()
def copy(run, tmp_path) -> Path:
    shutil.copytree(run / "data", tmp_path / "data")
    shutil.copy(run / "config.yaml", tmp_path / "config.yaml")
    return tmp_path


def check(workdir: Path, capsys, *extra: str) -> tuple[int, pd.DataFrame]:
    status = preflight(["--configfile", str(workdir / "config.yaml"), "--data-dir", str(workdir / "data"),
                        "--splits", "train,val,test", *extra])
    out = capsys.readouterr().out
    rows = pd.read_csv(io.StringIO(out), sep="\t", dtype=str)
    return status, rows


def chains(workdir: Path) -> pd.DataFrame:
    table = pd.read_parquet(workdir / "data/chains.parquet")
    return table[table["passed_filters"]].set_index("entry")


def test_clean_run_passes(copy, capsys):
    status, rows = check(copy, capsys)
    assert status == 0 and rows.empty


def test_cli_without_snakemake(copy):
    result = subprocess.run([sys.executable, "-m", "foldworks.preflight", "--configfile", "config.yaml",
                             "--splits", "train,val,test"], cwd=copy, capture_output=True, text=True,
                            env={"PYTHONPATH": str(REPO_ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert "every chain is ready" in result.stderr


def test_each_planted_defect_is_reported(copy, capsys):
    table = chains(copy)
    crn, ubq, aki = (table.loc[e] for e in ENTRIES)
    # structure: 1crn's chain removed from its parsed npz
    path = copy / "data/parsed/1crn.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if not k.startswith(f"{crn['chain']}/")}
    np.savez(path, **arrays)
    # msa: 1ubq's a3m holds another query; 1aki's is a failed placeholder
    (copy / "data" / msa_relpath(ubq["sequence_hash"])).write_text(f">q\n{aki['sequence']}\n")
    (copy / "data" / msa_relpath(aki["sequence_hash"])).write_text(
        format_header({"status": "failed", "reason": "timed out", "depth": 1}) + f">q\n{aki['sequence']}\n")
    # features: 1ubq's file from another chain (stale), 1aki's removed
    shutil.copy(copy / f"data/features/1crn_{crn['chain']}.npz", copy / f"data/features/1ubq_{ubq['chain']}.npz")
    (copy / f"data/features/1aki_{aki['chain']}.npz").unlink()
    status, rows = check(copy, capsys)
    assert status == 1
    found = set(zip(rows["target"], rows["reason"]))
    assert found == {(f"1crn_{crn['chain']}", "structure_missing"), (f"1ubq_{ubq['chain']}", "msa_mismatch"),
                     (f"1aki_{aki['chain']}", "msa_failed"), (f"1ubq_{ubq['chain']}", "features_mismatch"),
                     (f"1aki_{aki['chain']}", "features_missing")}
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["msa"]["allow_single_sequence_fallback"] = True
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    _, rows = check(copy, capsys)
    assert "msa_failed" not in set(rows["reason"]), "fallback allowed: a failed MSA does not stop training"


def test_table_and_structure_mismatch(copy, capsys):
    table = pd.read_parquet(copy / "data/chains.parquet")
    row = table.index[table["passed_filters"] & (table["entry"] == "1crn")][0]
    table.loc[row, "length"] = int(table.loc[row, "length"]) + 1
    table.to_parquet(copy / "data/chains.parquet")
    chain = chains(copy).loc["1ubq"]
    path = copy / "data/parsed/1ubq.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays[f"{chain['chain']}/aatype"] = arrays[f"{chain['chain']}/aatype"][:-1]
    np.savez(path, **arrays)
    status, rows = check(copy, capsys)
    assert status == 1 and sorted(rows["reason"]) == ["structure_mismatch", "table_inconsistent"]


def test_templates_checked_only_when_enabled(copy, capsys):
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["templates"] = {"enabled": True}
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    table = chains(copy)
    status, rows = check(copy, capsys)
    assert status == 1 and set(rows["reason"]) == {"template_missing"} and len(rows) == len(table)
    (copy / "data/templates/features").mkdir(parents=True)
    for entry in table.index:
        n_res = len(table.loc[entry, "sequence"]) - (1 if entry == "1ubq" else 0)
        np.savez(copy / f"data/templates/features/{entry}_{table.loc[entry, 'chain']}.npz",
                 template_aatype=np.zeros((0, n_res), np.int32))
    (copy / f"data/templates/features/1aki_{table.loc['1aki', 'chain']}.npz").write_bytes(b"")
    status, rows = check(copy, capsys)
    assert status == 1 and sorted(zip(rows["target"], rows["reason"])) == [
        (f"1aki_{table.loc['1aki', 'chain']}", "template_missing"), (f"1ubq_{table.loc['1ubq', 'chain']}", "template_mismatch")]
    config["templates"]["enabled"] = False
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    assert check(copy, capsys)[0] == 0
