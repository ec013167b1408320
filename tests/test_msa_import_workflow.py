"""Precomputed alignments inside Snakemake (a few minutes): the demo's own hhblits stage aligns
three real entries; its a3m files become an OpenProteinSet-style collection; a second workflow
imports them with `msa.precomputed` and must build identical features with zero hhblits calls
(an hhblits on PATH that records any call and fails). Changing one alignment file reruns exactly
its hash; a chain without an alignment, or whose alignment holds another sequence, ends in a
failure record naming the file and both sequences while the rest completes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import require_tool
from conftest import run_snakemake as snakemake
from foldworks.ids import msa_relpath
from foldworks.msa.a3m import a3m_records, read_header
from foldworks.shards import read_manifest
from test_msa import select_records, write_fasta
from test_msa_workflow import ENTRIES, jobs, ok, write_config

pytestmark = pytest.mark.slow
HHFILTER = {"id": 99, "cov": 0, "diff": 0, "max_depth": 512}


def passed_chains(workdir: Path) -> pd.DataFrame:
    table = pd.read_parquet(workdir / "data/chains.parquet")
    return table[table["passed_filters"]]


def feature_targets(workdir: Path) -> list[str]:
    return sorted({f"data/features/shards/{e[1:3]}.tsv" for e in passed_chains(workdir)["entry"]})


@pytest.fixture(scope="module")
def searched(tmp_path_factory, pdb_mirror, seqdb_fasta) -> Path:
    """A workflow that searched with hhblits and built features."""
    require_tool("hhblits")
    workdir = tmp_path_factory.mktemp("searched")
    write_fasta(workdir / "db.fasta", select_records(seqdb_fasta))
    write_config(workdir, pdb_mirror)
    ok(snakemake(workdir, "data/chains.parquet"))
    ok(snakemake(workdir, *feature_targets(workdir)))
    return workdir


def write_collection(root: Path, searched: Path) -> None:
    """OpenProteinSet layout from the searched run's a3m files (our metadata line dropped, as
    another pipeline would have written them), one folder per chain."""
    for _, chain in passed_chains(searched).iterrows():
        text = (searched / "data" / msa_relpath(chain["sequence_hash"])).read_text()
        folder = root / f"{chain['entry']}_{chain['chain']}" / "a3m"
        folder.mkdir(parents=True)
        (folder / "uniref90_hits.a3m").write_text("".join(f">{h}\n{s}\n" for h, s in a3m_records(text)))
    (root / "duplicate_pdb_chains.txt").write_text("".join(f"{p.name}\n" for p in sorted(root.iterdir())))


@pytest.fixture(scope="module")
def imported(tmp_path_factory, searched, pdb_mirror) -> Path:
    workdir = tmp_path_factory.mktemp("imported")
    write_collection(workdir / "ops", searched)
    write_config(workdir, pdb_mirror)
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["msa"]["precomputed"] = {"sources": [{"name": "ops", "layout": "openproteinset",
                                                 "path": str(workdir / "ops"), "hhfilter": HHFILTER}]}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    return workdir


@pytest.fixture()
def no_hhblits(tmp_path, monkeypatch) -> Path:
    """An hhblits first on PATH that records its call and fails; returns the record's path."""
    shim, calls = tmp_path / "shim", tmp_path / "hhblits_calls"
    shim.mkdir()
    (shim / "hhblits").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 97\n")
    (shim / "hhblits").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_import_builds_the_same_features_without_hhblits(searched, imported, no_hhblits):
    ok(snakemake(imported, "data/chains.parquet"))
    result = ok(snakemake(imported, *feature_targets(imported)))
    assert not no_hhblits.exists(), "hhblits was called"
    assert not jobs(result, "msa_db") and jobs(result, "msa_import") == ["data/msa_import/index.tsv"]
    assert (imported / "data/msa_import/problems.tsv").read_text().count("\n") == 1, "header only"
    from foldworks.features import load_features

    chains = passed_chains(imported)
    assert len(chains) >= 3
    for _, chain in chains.iterrows():
        meta = read_header((imported / "data" / msa_relpath(chain["sequence_hash"])).read_text())
        assert meta["tool"] == "import" and meta["source"] == "ops" and meta["status"] == "ok"
        target = f"{chain['entry']}_{chain['chain']}"
        mine, theirs = (load_features(d / f"data/features/{target}.npz") for d in (imported, searched))
        assert mine["msa_source"] == "import" and theirs["msa_source"] == "hhblits"
        numeric = [k for k in theirs if isinstance(theirs[k], np.ndarray) and theirs[k].dtype.kind in "biuf"]
        assert {"msa", "deletion_matrix"} <= set(numeric)
        for key in numeric:
            assert np.array_equal(mine[key], theirs[key]), f"{target}: {key} differs"


def test_changed_alignment_reruns_exactly_its_hash(imported, no_hhblits):
    def alignment(chain: pd.Series) -> Path:
        return imported / "ops" / f"{chain['entry']}_{chain['chain']}" / "a3m" / "uniref90_hits.a3m"

    chains = [chain for _, chain in passed_chains(imported).iterrows()]
    chain = max(chains, key=lambda c: len(a3m_records(alignment(c).read_text())))
    target_hash, path = chain["sequence_hash"], alignment(chain)
    records = a3m_records(path.read_text())
    assert len(records) >= 2
    path.write_text("".join(f">{h}\n{s}\n" for h, s in records[:-1]))
    before = {p: p.read_bytes() for p in (imported / "data/msa").rglob("*.a3m")}
    index = ok(snakemake(imported, "data/msa_import/index.tsv"))
    assert jobs(index, "msa_import") == ["data/msa_import/index.tsv"]
    shard = f"data/msa/shards/{target_hash[:2]}.tsv"
    assert jobs(ok(snakemake(imported, "-n", *feature_targets(imported))), "msa") == [shard]
    result = ok(snakemake(imported, *feature_targets(imported)))
    assert jobs(result, "msa") == [shard]
    assert "1 computed" in (imported / f"logs/msa/{target_hash[:2]}.log").read_text().splitlines()[-1]
    changed = [p for p, data in before.items() if p.read_bytes() != data]
    assert changed == [imported / "data" / msa_relpath(target_hash)]
    assert not no_hhblits.exists()


def test_missing_and_mismatched_alignments_are_recorded(imported, no_hhblits):
    """1crn's folder now holds 1ubq's alignment: 1crn has no alignment (failure record naming the
    folder's file and both hashes), 1ubq's is still found by its query and 1ubq's emptied folder
    is one problems line; a malformed file is refused at import (failure record naming the file
    and row); the other chains' features are built (--keep-going)."""
    chains = passed_chains(imported).set_index("entry")
    crn, ubq = chains.loc["1crn"], chains.loc["1ubq"]
    ops = imported / "ops"
    crn_dir = ops / f"1crn_{crn['chain']}" / "a3m"
    ubq_file = ops / f"1ubq_{ubq['chain']}" / "a3m" / "uniref90_hits.a3m"
    shutil.move(ubq_file, crn_dir / "uniref90_hits.a3m")
    aki = chains.loc["1aki"]
    bad = ops / f"1aki_{aki['chain']}" / "a3m" / "bfd_uniclust_hits.a3m"
    bad.write_text(f">q\n{aki['sequence']}\n>hit\nACDE\n")
    ok(snakemake(imported, "data/msa_import/index.tsv"))
    problems = (imported / "data/msa_import/problems.tsv").read_text()
    assert f"ops\t1ubq_{ubq['chain']}\t1ubq_{ubq['chain']}: no alignment files" in problems
    ok(snakemake(imported, "--keep-going", *feature_targets(imported)))
    malformed = json.loads((imported / f"data/failures/msa/{aki['sequence_hash']}.json").read_text())
    assert f"1aki_{aki['chain']}/a3m/bfd_uniclust_hits.a3m: a3m row 1 ('hit') has 4 match columns" in malformed["reason"]
    record = json.loads((imported / f"data/failures/msa/{crn['sequence_hash']}.json").read_text())
    assert (f"holds 1crn_{crn['chain']} in 1crn_{crn['chain']}/a3m/uniref90_hits.a3m with query "
            f"{ubq['sequence_hash']} ({len(ubq['sequence'])} residues)") in record["reason"]
    assert f"sequence {crn['sequence_hash']} ({len(crn['sequence'])} residues)" in record["reason"]
    rows = {}
    for manifest in (imported / "data/msa/shards").glob("*.tsv"):
        rows.update(read_manifest(manifest))
    assert rows[crn["sequence_hash"]].status == "failed" and rows[aki["sequence_hash"]].status == "failed"
    assert rows[ubq["sequence_hash"]].status == "ok"
    assert (imported / f"data/features/1ubq_{ubq['chain']}.npz").exists()
    assert not (imported / f"data/features/1crn_{crn['chain']}.npz").exists()
    assert not no_hhblits.exists()
