"""The msa stage inside Snakemake, with the real tools (a few minutes).

One workflow directory, driven step by step: real mirror entries → chains → a ~300-sequence
database built from seqdb records → hhblits per unique sequence. Then: a second run does
nothing; a rebuilt byte-identical database reruns no MSA; a new entry schedules MSA jobs only
for its new sequence (seen by `snakemake -n` after the chains checkpoint ran); a changed
search parameter or database content reruns them all (jobs are msa shards: 3-hex-character
hash prefixes); a sequence whose search keeps failing
(a real hhblits timeout) is retried, recorded and refused by the features stage unless
single-sequence fallback is allowed. A second directory runs the batched mmseqs backend.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO_ROOT, require_tool
from conftest import run_snakemake as snakemake
from foldworks.ids import msa_relpath
from foldworks.msa.a3m import a3m_records, read_header, validate_a3m
from foldworks.shards import SEQ_SHARD_CHARS
from test_msa import select_records, write_fasta

pytestmark = pytest.mark.slow
ENTRIES = ["1crn", "1ubq", "1aki"]
_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)+)", re.MULTILINE)


def jobs(result: subprocess.CompletedProcess, rule: str) -> list[str]:
    """First output file of every job block of ``rule`` printed by a run or dry run (a retried
    job appears once per attempt)."""
    found = []
    for name, body in _JOB.findall(result.stdout + result.stderr):
        match = re.search(r"^    output: ([^,\s]+)", body, re.MULTILINE)
        if name == rule and match:
            found.append(match.group(1))
    return found


def shards_of(a3m_paths) -> list[str]:
    """The msa shard manifests (3-hex-character hash prefixes) of some a3m paths, sorted."""
    return sorted({f"data/msa/shards/{Path(p).stem[:SEQ_SHARD_CHARS]}.tsv" for p in a3m_paths})


def aligned(workdir: Path) -> dict[str, str]:
    """``{sequence hash: status}`` over every msa shard manifest."""
    from foldworks.shards import read_manifest

    rows = {}
    for manifest in (workdir / "data/msa/shards").glob("*.tsv"):
        rows.update({item: row.status for item, row in read_manifest(manifest).items()})
    return rows


def nothing_to_do(workdir: Path, target: str = "data/msa/summary.tsv") -> bool:
    result = ok(snakemake(workdir, "-n", target))
    return "Nothing to be done" in result.stdout + result.stderr


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return result


def expected_msas(workdir: Path) -> dict[str, str]:
    """``{a3m path: sequence}`` of the unique sequences of the chains that passed the filters."""
    table = pd.read_parquet(workdir / "data/chains.parquet")
    passed = table[table["passed_filters"]]
    return {f"data/{msa_relpath(h)}": s for h, s in zip(passed["sequence_hash"], passed["sequence"])}


def write_config(workdir: Path, pdb_mirror: Path, **msa) -> None:
    # the full-PDB shard keys (2 and 2: per-shard reruns are visible), not the demo config's short ones
    config = {"pdb": {"entries": ENTRIES, "source": str(pdb_mirror), "shard_chars": 2},
              "msa": {"databases": [{"name": "small", "fasta": [str(workdir / "db.fasta")], "iterations": 1}],
                      "hhfilter": {"id": 99}, "shard_chars": 2, **msa},
              "experiments": {"distogram": {"model": "distogram"}}}
    existing = yaml.safe_load((workdir / "config.yaml").read_text()) if (workdir / "config.yaml").exists() else None
    if existing:
        config["pdb"]["entries"] = existing["pdb"]["entries"]
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def set_config(workdir: Path, path: str, value) -> None:
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node[key]
    node[last] = value
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def snapshot(workdir: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(workdir)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in (workdir / "data/msa").rglob("*.a3m")}


@pytest.fixture(scope="module")
def wf(tmp_path_factory, pdb_mirror, seqdb_fasta) -> Path:
    for tool in ("hhblits", "mmseqs"):
        require_tool(tool)
    workdir = tmp_path_factory.mktemp("msa_workflow")
    write_fasta(workdir / "db.fasta", select_records(seqdb_fasta))
    write_config(workdir, pdb_mirror)
    return workdir


def test_first_run_aligns_each_unique_sequence_once(wf):
    result = ok(snakemake(wf, "data/msa/summary.tsv"))
    expected = expected_msas(wf)
    assert len(expected) == 3
    assert sorted(jobs(result, "msa")) == shards_of(expected), "one msa job per shard of unique sequences"
    assert sorted(aligned(wf)) == sorted(Path(p).stem for p in expected), "each sequence aligned once"
    logs = "".join(p.read_text() for p in (wf / "logs/msa").glob("*.log"))
    assert logs.count(" computed (0 not ok)") == len(jobs(result, "msa"))
    assert jobs(result, "msa_db") == ["data/msa_db/small_a3m.ffdata"]
    record = json.loads((wf / "data/msa_db/small.json").read_text())
    for path, sequence in expected.items():
        text = (wf / path).read_text()
        assert validate_a3m(text, sequence) == read_header(text)["depth"]
        assert read_header(text)["databases"] == {"small": record["content_sha256"][:16]}
    summary = pd.read_csv(wf / "data/msa/summary.tsv", sep="\t")
    assert sorted("data/" + msa_relpath(h) for h in summary["sequence_hash"]) == sorted(expected)
    assert (summary["status"] == "ok").all() and (summary["depth"] >= 1).all() and summary["depth"].max() > 1


def test_second_run_does_nothing(wf):
    assert nothing_to_do(wf)


def test_identical_database_rebuild_reruns_no_msa(wf):
    """The FASTA changes (a duplicate sequence under another name) but the database does not:
    msa_db runs, rewrites identical files and record, and no alignment reruns."""
    before, record = snapshot(wf), (wf / "data/msa_db/small.json").read_bytes()
    header, sequence = select_records_from(wf / "db.fasta")[0]
    with open(wf / "db.fasta", "a", encoding="ascii") as handle:
        handle.write(f">duplicate_of_{header.split()[0]}\n{sequence}\n")
    result = ok(snakemake(wf, "data/msa/summary.tsv"))
    assert jobs(result, "msa_db") and not jobs(result, "msa")
    assert (wf / "data/msa_db/small.json").read_bytes() == record
    assert snapshot(wf) == before
    assert nothing_to_do(wf)


def select_records_from(path: Path) -> list[tuple[str, str]]:
    from foldworks.msa.fasta import read_fasta

    return list(read_fasta(path))


def test_new_entry_schedules_only_its_new_sequences(wf):
    """4lzt has the sequence of 1aki (no new job); 5pti is new (one job)."""
    old = expected_msas(wf)
    set_config(wf, "pdb.entries", ENTRIES + ["4lzt", "5pti"])
    ok(snakemake(wf, "data/chains.parquet"))
    new = expected_msas(wf)
    assert set(old) < set(new) and len(new) == len(old) + 1
    planned = jobs(ok(snakemake(wf, "-n", "data/msa/summary.tsv")), "msa")
    assert planned == shards_of(set(new) - set(old))
    before = snapshot(wf)
    ran = jobs(ok(snakemake(wf, "data/msa/summary.tsv")), "msa")
    assert ran == planned
    after = snapshot(wf)
    assert all(after[path] == before[path] for path in before), "existing alignments untouched"


def test_search_parameter_change_plans_every_msa(wf):
    set_config(wf, "msa.hhfilter", {"id": 98})
    planned = jobs(ok(snakemake(wf, "-n", "data/msa/summary.tsv")), "msa")
    assert sorted(planned) == shards_of(expected_msas(wf))
    set_config(wf, "msa.hhfilter", {"id": 99})
    # timeout, retries and the fallback policy are not search parameters
    set_config(wf, "msa.timeout_s", 300)
    set_config(wf, "msa.retries", 1)
    set_config(wf, "msa.allow_single_sequence_fallback", True)
    assert not jobs(ok(snakemake(wf, "-n", "data/msa/summary.tsv")), "msa")
    set_config(wf, "msa.allow_single_sequence_fallback", False)


def test_changed_database_reruns_every_msa(wf):
    with open(wf / "db.fasta", "a", encoding="ascii") as handle:
        handle.write(">new_protein\nMSTNPKPQRKTKRNTNRRPQDVKFPGGGQIVGGVYLLPRRGPRLGVRATRKTSERSQPRGRRQPIPKARRPEGRTWAQPGYPWPLYGNEG\n")
    before = json.loads((wf / "data/msa_db/small.json").read_text())["content_sha256"]
    result = ok(snakemake(wf, "data/msa/summary.tsv"))
    after = json.loads((wf / "data/msa_db/small.json").read_text())["content_sha256"]
    assert after != before
    assert sorted(jobs(result, "msa")) == shards_of(expected_msas(wf))
    for path in expected_msas(wf):
        assert read_header((wf / path).read_text())["databases"] == {"small": after[:16]}


def test_failing_search_is_retried_recorded_and_refused(wf):
    """A real hhblits timeout on every attempt: 2 attempts inside the shard job (retries: 1),
    then a failure record, a query-only placeholder and a `failed` manifest row; the features
    shard refuses that chain (failure record, `failed` row) and builds the others, and no job
    fails; allowing single-sequence fallback then builds it, marked."""
    set_config(wf, "msa.timeout_s", 0.01)
    set_config(wf, "msa.retries", 1)
    set_config(wf, "pdb.entries", ENTRIES + ["4lzt", "5pti", "2igd"])
    ok(snakemake(wf, "data/chains.parquet"))
    table = pd.read_parquet(wf / "data/chains.parquet")
    passed = table[table["passed_filters"]]
    targets = sorted({f"data/features/shards/{e[1:3]}.tsv" for e in passed["entry"]})
    failing = passed[passed["entry"] == "2igd"].iloc[0]
    seq_hash, target = failing["sequence_hash"], f"2igd_{failing['chain']}"
    result = ok(snakemake(wf, "--keep-going", *targets))
    assert jobs(result, "msa") == [f"data/msa/shards/{seq_hash[:SEQ_SHARD_CHARS]}.tsv"], "one job: the new sequence's shard"
    log = (wf / f"logs/msa/{seq_hash[:SEQ_SHARD_CHARS]}.log").read_text()
    assert "attempt 1 of 2 failed, will be retried" in log and "attempt 2 of 2 failed, giving up" in log
    record = json.loads((wf / f"data/failures/msa/{seq_hash}.json").read_text())
    assert record["stage"] == "msa" and "timed out" in record["reason"]
    assert aligned(wf)[seq_hash] == "failed"
    text = (wf / f"data/{msa_relpath(seq_hash)}").read_text()
    assert read_header(text)["status"] == "failed" and len(a3m_records(text)) == 1
    refusal = json.loads((wf / f"data/failures/features/{target}.json").read_text())
    assert refusal["stage"] == "features" and "no MSA for sequence" in refusal["reason"]
    assert not (wf / f"data/features/{target}.npz").exists()
    from foldworks.shards import read_manifest

    assert read_manifest(wf / "data/features/shards/ig.tsv")[target].status == "failed"
    others = [f"data/features/{e}_{c}.npz" for e, c in zip(passed["entry"], passed["chain"]) if f"{e}_{c}" != target]
    assert all((wf / t).exists() for t in others), "other chains completed"
    summary = ok(snakemake(wf, "data/msa/summary.tsv"))
    assert "failed" in (wf / "data/msa/summary.tsv").read_text() and not jobs(summary, "msa")

    set_config(wf, "msa.allow_single_sequence_fallback", True)
    result = ok(snakemake(wf, *targets))
    # the policy is a features param (so turning it off again refuses such chains again)
    assert not jobs(result, "msa") and "data/features/shards/ig.tsv" in jobs(result, "features")
    from foldworks.features import load_features

    assert load_features(wf / f"data/features/{target}.npz")["msa_source"] == "single_sequence_fallback"
    assert not (wf / f"data/failures/features/{target}.json").exists()


def test_changed_a3m_reruns_exactly_the_features_shard_using_it(wf):
    """Features shards take only the MSA index (checkpoint msa_index), `ancient`, plus a digest of
    their sequences' index rows as a param (issue 16). Rerunning two msa shards, one whose failed
    search now succeeds (new a3m) and one whose a3m stays byte-identical: the dry run lists the
    two msa shards and msa_index but no features shard (planned only once the checkpoint ran);
    the real run then reruns exactly the features shard of the changed a3m (2igd's, ``ig``),
    not the one of the unchanged a3m (1crn's, ``cr``), and afterwards nothing is left to do."""
    set_config(wf, "msa.timeout_s", 300)
    table = pd.read_parquet(wf / "data/chains.parquet")
    passed = table[table["passed_filters"]]
    targets = sorted({f"data/features/shards/{e[1:3]}.tsv" for e in passed["entry"]})
    failed_hash = passed[passed["entry"] == "2igd"].iloc[0]["sequence_hash"]
    same_hash = passed[passed["entry"] == "1crn"].iloc[0]["sequence_hash"]
    assert aligned(wf)[failed_hash] == "failed" and aligned(wf)[same_hash] == "ok"
    assert (passed["sequence_hash"] == failed_hash).sum() == 1 and failed_hash[:SEQ_SHARD_CHARS] != same_hash[:SEQ_SHARD_CHARS]
    rerun = [f"data/msa/shards/{failed_hash[:SEQ_SHARD_CHARS]}.tsv", f"data/msa/shards/{same_hash[:SEQ_SHARD_CHARS]}.tsv"]
    same_a3m = (wf / f"data/{msa_relpath(same_hash)}").read_bytes()
    planned = ok(snakemake(wf, "-n", "--forcerun", *rerun, "--", *targets))
    assert sorted(jobs(planned, "msa")) == sorted(rerun)
    assert jobs(planned, "msa_index") == ["data/msa/index.tsv"] and not jobs(planned, "features")
    result = ok(snakemake(wf, "--forcerun", *rerun, "--", *targets))
    assert sorted(jobs(result, "msa")) == sorted(rerun) and jobs(result, "msa_index") == ["data/msa/index.tsv"]
    assert jobs(result, "features") == ["data/features/shards/ig.tsv"]
    assert aligned(wf)[failed_hash] == "ok"
    assert (wf / f"data/{msa_relpath(same_hash)}").read_bytes() == same_a3m
    from foldworks.features import load_features

    assert load_features(wf / f"data/features/2igd_{passed[passed['entry'] == '2igd'].iloc[0]['chain']}.npz")[
        "msa_source"] != "single_sequence_fallback"
    after = ok(snakemake(wf, "-n", *targets))
    assert "Nothing to be done" in after.stdout + after.stderr


def test_features_reasons_hidden_behind_msa_index_still_run(wf):
    """While msa_index will rerun, Snakemake skips the rerun reasons of the jobs downstream of it
    (dag.py update_needrun), so a dry run shows no features shard even when their own param
    changed (the fallback policy here); the real run re-evaluates them once the checkpoint ran
    and reruns every shard, and then nothing is left to do."""
    set_config(wf, "msa.allow_single_sequence_fallback", False)
    table = pd.read_parquet(wf / "data/chains.parquet")
    passed = table[table["passed_filters"]]
    targets = sorted({f"data/features/shards/{e[1:3]}.tsv" for e in passed["entry"]})
    rerun = f"data/msa/shards/{passed[passed['entry'] == '1crn'].iloc[0]['sequence_hash'][:SEQ_SHARD_CHARS]}.tsv"
    planned = ok(snakemake(wf, "-n", "--forcerun", rerun, "--", *targets))
    assert jobs(planned, "msa") == [rerun] and jobs(planned, "msa_index") and not jobs(planned, "features")
    without_index = ok(snakemake(wf, "-n", *targets))  # msa_index not rerunning: the param change shows
    assert sorted(jobs(without_index, "features")) == targets
    result = ok(snakemake(wf, "--forcerun", rerun, "--", *targets))
    assert jobs(result, "msa") == [rerun] and sorted(jobs(result, "features")) == targets
    after = ok(snakemake(wf, "-n", *targets))
    assert "Nothing to be done" in after.stdout + after.stderr


def test_mmseqs_backend_batches_per_shard(tmp_path, pdb_mirror, seqdb_fasta):
    """`msa.tool: mmseqs`: one batch job per shard of hashes (first hex character,
    `msa.mmseqs.shard_chars`), the same per-hash a3m files and contract; a second run does nothing."""
    require_tool("mmseqs")
    write_fasta(tmp_path / "db.fasta", select_records(seqdb_fasta))
    write_config(tmp_path, pdb_mirror, tool="mmseqs")
    set_config(tmp_path, "pdb.entries", ENTRIES + ["5pti"])
    result = ok(snakemake(tmp_path, "data/msa/summary.tsv"))
    expected = expected_msas(tmp_path)
    shards = {Path(p).stem[0] for p in expected}
    assert sorted(jobs(result, "msa")) == sorted(f"data/msa/shards/{s}.tsv" for s in shards)
    assert sorted(aligned(tmp_path)) == sorted(Path(p).stem for p in expected)
    for path, sequence in expected.items():
        text = (tmp_path / path).read_text()
        assert validate_a3m(text, sequence) == read_header(text)["depth"]
        assert read_header(text)["tool"] == "mmseqs"
    assert not (tmp_path / "data/msa_batches/mmseqs").exists() or not any((tmp_path / "data/msa_batches/mmseqs").iterdir())
    summary = pd.read_csv(tmp_path / "data/msa/summary.tsv", sep="\t")
    assert (summary["status"] == "ok").all() and (summary["tool"] == "mmseqs").all()
    assert nothing_to_do(tmp_path)
