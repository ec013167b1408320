"""The template stage inside Snakemake on mirror entries, with the real tools (~2-3 minutes).

One workflow directory: hemoglobin, crambin and trypsin → chains → MSAs (a small fixed
database, so new entries do not change it) → template database in 16 segments → one hhsearch
job per (msa shard, segment) → selected.tsv and template features. Then: a second run does
nothing; an entry whose chains repeat known sequences plans no search; an entry with one new
sequence plans only the searches of its query shard and of its template segment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import require_tool
from conftest import run_snakemake as snakemake
from foldworks.shards import entry_shard
from foldworks.templates.config import segment_keys
from test_msa import select_records, write_fasta
from test_msa_workflow import jobs, ok

pytestmark = pytest.mark.slow
ENTRIES = ["2hhb", "1crn", "3ptb"]
SEGMENTS = segment_keys(1)


def write_config(workdir: Path, pdb_mirror: Path, entries: list[str]) -> None:
    config = {"pdb": {"entries": entries, "source": str(pdb_mirror), "shard_chars": 1},
              "msa": {"databases": [{"name": "small", "fasta": [str(workdir / "db.fasta")], "iterations": 1}],
                      "shard_chars": 1},
              "templates": {"enabled": True, "segment_chars": 1},
              "experiments": {"distogram": {"model": "distogram"}}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def hashes(workdir: Path, passed: bool = False) -> set[str]:
    table = pd.read_parquet(workdir / "data/chains.parquet")
    table = table[table["passed_filters"]] if passed else table[table["molecule_type"] == "protein"]
    return set(table["sequence_hash"])


def planned_searches(workdir: Path) -> set[str]:
    """Bring chains, MSAs and the template database up to date; the searches a dry run then lists."""
    ok(snakemake(workdir, "data/templates/db/members.tsv", "data/msa/index.tsv"))
    return set(jobs(ok(snakemake(workdir, "-n", "data/templates/selected.tsv")), "template_search"))


def grid(rows, columns) -> set[str]:
    return {f"data/templates/hits/shards/{q}_{s}.tsv" for q in rows for s in columns}


@pytest.fixture(scope="module")
def wf(tmp_path_factory, pdb_mirror, seqdb_fasta) -> Path:
    for tool in ("hhblits", "hhsearch"):
        require_tool(tool)
    workdir = tmp_path_factory.mktemp("templates_workflow")
    write_fasta(workdir / "db.fasta", select_records(seqdb_fasta)[:40])
    write_config(workdir, pdb_mirror, ENTRIES)
    return workdir


def test_first_run_searches_each_shard_and_segment_once(wf):
    result = ok(snakemake(wf, "data/templates/selected.tsv", f"data/templates/features/shards/{entry_shard('2hhb', 1)}.tsv"))
    queries = hashes(wf, passed=True)
    assert set(jobs(result, "template_search")) == grid({h[0] for h in queries}, SEGMENTS)
    selected = pd.read_csv(wf / "data/templates/selected.tsv", sep="\t", dtype=str)
    assert selected.empty, "no query has an earlier template from another entry yet"
    records = {s: yaml.safe_load((wf / f"data/templates/db/{s}.json").read_text()) for s in SEGMENTS}
    assert sum(r["n_sequences"] for r in records.values()) == len(hashes(wf))
    with np.load(wf / "data/templates/features/2hhb_A.npz") as data:
        assert data["template_aatype"].shape == (0, 141)
    result = ok(snakemake(wf, "-n", "data/templates/selected.tsv"))
    assert "Nothing to be done" in result.stdout + result.stderr


def test_entry_with_known_sequences_plans_no_search(wf, pdb_mirror):
    before = hashes(wf)
    write_config(wf, pdb_mirror, ENTRIES + ["4hhb"])
    assert planned_searches(wf) == set()
    assert hashes(wf) == before
    ok(snakemake(wf, "data/templates/selected.tsv"))
    selected = pd.read_csv(wf / "data/templates/selected.tsv", sep="\t", dtype=str)
    assert set(selected["query"]) == {"2hhb_A", "2hhb_B", "2hhb_C", "2hhb_D"}
    assert set(selected["template"]) == {"4hhb_A", "4hhb_B"}, "released a day before 2hhb"


def test_new_sequence_plans_its_row_and_its_column_only(wf, pdb_mirror):
    old = hashes(wf, passed=True)
    write_config(wf, pdb_mirror, ENTRIES + ["4hhb", "1ubq"])
    planned = planned_searches(wf)
    (new,) = hashes(wf, passed=True) - old
    expected = grid([new[0]], SEGMENTS) | grid({h[0] for h in old}, [new[0]])
    assert planned == expected
    assert len(planned) < len(grid({h[0] for h in old | {new}}, SEGMENTS))
    result = ok(snakemake(wf, "data/templates/selected.tsv"))
    assert set(jobs(result, "template_search")) == expected
