"""msa_db + msa stages on real sequences: ~300-sequence HH-suite/MMseqs2 databases (single and
clustered) from the shared seqdb, real hhblits/hhfilter/mmseqs searches, the retry/failure
policy on a real hhblits timeout, and the A3M parser/validator. The Snakemake-level behaviour
(reruns, incremental entries) is in test_msa_workflow.py."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import require_tool
from foldworks.ids import sequence_hash
from foldworks.msa import ffindex
from foldworks.msa.a3m import A3MError, a3m_records, match_columns, parse_a3m, read_a3m, read_header, validate_a3m
from foldworks.msa.build_db import SUFFIXES, build_database, external_record
from foldworks.msa.config import MsaConfigError, resolve_msa_config, search_slice
from foldworks.msa.fasta import read_fasta
from foldworks.msa.mmseqs_search import search_shard
from foldworks.msa.postprocess import finish_a3m
from foldworks.msa.search import read_query, run_hhblits, search_query
from foldworks.msa.summary import summarize
from foldworks.msa.tools import ToolError

N_DB_RECORDS = 300
QUERIES = {"1aki_A": "lysozyme", "1ubq_A": "ubiquitin"}
#: hhfilter -id 99: the seqdb ubiquitins are >90 % identical, so -id 90 would leave only the query.
SEARCH_PARAMS = {"iterations": 2, "evalue": 0.001, "maxseq": 1000000, "timeout_s": 120,
                 "hhfilter": {"id": 99, "cov": 0, "diff": 0, "max_depth": 512}}


def select_records(seqdb: Path) -> list[tuple[str, str]]:
    """Lysozyme/ubiquitin families, 20 records with ffindex-breaking (>31 char) names, then
    short sequences (<= 100 residues, to keep cstranslate fast) up to ``N_DB_RECORDS`` records."""
    records = list(read_fasta(seqdb))
    family = [r for r in records if any(k in r[0].lower() for k in QUERIES.values()) and len(r[1]) <= 200]
    long_names = [r for r in records if len(r[0].split()[0]) > 31][:20]
    short = [r for r in records if len(r[1]) <= 100]
    chosen: dict[str, tuple[str, str]] = {}
    for header, sequence in family + long_names + short:
        chosen.setdefault(header, (header, sequence))
        if len(chosen) == N_DB_RECORDS:
            break
    return list(chosen.values())


def write_fasta(path: Path, records: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f">{h}\n{s}\n" for h, s in records), encoding="ascii")
    return path


@pytest.fixture(scope="module")
def db_inputs(tmp_path_factory, seqdb_fasta) -> tuple[Path, Path, list[tuple[str, str]]]:
    """Two FASTA files; the second repeats 50 records of the first (cross-file duplicates)."""
    records = select_records(seqdb_fasta)
    base = tmp_path_factory.mktemp("fasta")
    first = write_fasta(base / "a.fasta", records[:250])
    second = write_fasta(base / "b.fasta", records[200:])
    return first, second, records


@pytest.fixture(scope="module")
def small_db(tmp_path_factory, db_inputs) -> tuple[Path, dict]:
    require_tool("hhblits")
    require_tool("mmseqs")
    prefix = tmp_path_factory.mktemp("db") / "small"
    record = build_database([db_inputs[0], db_inputs[1]], prefix, threads=2, record_path=f"{prefix}.json")
    return prefix, record


@pytest.fixture(scope="module")
def clustered_db(tmp_path_factory, db_inputs) -> tuple[Path, dict]:
    """The same sequences as MMseqs2 clusters (40 % identity, 80 % coverage)."""
    prefix = tmp_path_factory.mktemp("cdb") / "clustered"
    record = build_database([db_inputs[0], db_inputs[1]], prefix, threads=2, mode="clustered",
                            cluster={"min_seq_id": 0.4, "coverage": 0.8})
    return prefix, record


def query_fasta(directory: Path, records: list[tuple[str, str]], name: str) -> tuple[Path, str]:
    sequence = next(s for h, s in records if h.split()[0] == name)
    seq_hash = sequence_hash(sequence)
    path = directory / f"{seq_hash}.fasta"
    path.write_text(f">{seq_hash}\n{sequence}\n", encoding="ascii")
    return path, sequence


def check_contract(text: str, sequence: str) -> list[tuple[str, str]]:
    """Assert the a3m contract (query first, L match columns per row, metadata depth) and
    return the records."""
    records = a3m_records(text)
    assert records[0] == (sequence_hash(sequence), sequence)
    assert all(len(match_columns(aligned)) == len(sequence) for _, aligned in records)
    assert validate_a3m(text, sequence) == len(records) == read_header(text)["depth"]
    return records


def test_database_entries_keys_and_record(small_db, db_inputs):
    prefix, record = small_db
    unique = {s for _, s in db_inputs[2]}
    assert record["n_sequences"] == record["n_entries"] == len(unique) < N_DB_RECORDS
    assert record["n_residues"] == sum(map(len, unique)) and record["mode"] == "single"
    provenance = json.loads(Path(f"{prefix}.provenance.json").read_text())
    assert provenance["n_input_records"] == N_DB_RECORDS + 50 and len(provenance["inputs"]) == 2
    assert Path(f"{prefix}.json").is_file() and not Path(f"{prefix}_hhm.ffdata").exists()
    assert sorted(record["files"]) == sorted(SUFFIXES)
    entries = ffindex.read_ffindex(Path(f"{prefix}_a3m.ffdata"), Path(f"{prefix}_a3m.ffindex"))
    index_keys = [line.split("\t")[0] for line in Path(f"{prefix}_a3m.ffindex").read_text().splitlines()]
    assert index_keys == sorted(index_keys, key=str.encode) and len(index_keys) == len(unique)
    for key, payload in entries.items():
        header, sequence = payload.decode().splitlines()
        assert len(key) <= 31 and key == sequence_hash(sequence)
    long_header, long_seq = next(r for r in db_inputs[2] if len(r[0].split()[0]) > 31)
    fetched = subprocess.run(["ffindex_get", f"{prefix}_a3m.ffdata", f"{prefix}_a3m.ffindex",
                              sequence_hash(long_seq)], capture_output=True, text=True, check=True)
    assert long_seq in fetched.stdout
    cs_keys = ffindex.read_ffindex_raw(Path(f"{prefix}_cs219.ffdata"), Path(f"{prefix}_cs219.ffindex"))
    assert sorted(cs_keys) == sorted(entries)
    # binary cs219: one state byte per residue plus the terminator
    assert all(len(cs_keys[k]) == len(entries[k].decode().splitlines()[1]) + 1 for k in entries)
    lookup = Path(f"{prefix}_mmseqs.lookup").read_text().splitlines()
    assert len(lookup) == len(unique)


def test_rebuild_is_byte_identical_and_content_hashed(small_db, db_inputs, tmp_path):
    prefix, record = small_db
    again = tmp_path / "again"
    # other input order and other duplicates: same unique sequences, same first headers
    rebuilt = build_database([db_inputs[0], db_inputs[1], db_inputs[0]], again, threads=2)
    assert rebuilt["content_sha256"] == record["content_sha256"]
    for suffix in SUFFIXES:
        assert Path(f"{again}{suffix}").read_bytes() == Path(f"{prefix}{suffix}").read_bytes(), suffix
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp files left behind"
    one_more = write_fasta(tmp_path / "more.fasta", [("extra", "MKVLAAGIVALLLAAGCSSSKEETPAQ")])
    changed = build_database([db_inputs[0], db_inputs[1], one_more], tmp_path / "changed", threads=2)
    assert changed["content_sha256"] != record["content_sha256"]


def test_clustered_database(clustered_db, small_db, db_inputs, tmp_path):
    prefix, record = clustered_db
    unique = {s for _, s in db_inputs[2]}
    assert record["mode"] == "clustered" and record["n_sequences"] == len(unique)
    assert 1 < record["n_entries"] < record["n_sequences"]
    entries = ffindex.read_ffindex(Path(f"{prefix}_a3m.ffdata"), Path(f"{prefix}_a3m.ffindex"))
    keys = [line.split("\t")[0] for line in Path(f"{prefix}_a3m.ffindex").read_text().splitlines()]
    assert keys == sorted(keys, key=str.encode) and len(keys) == record["n_entries"]
    members = 0
    for key, payload in entries.items():
        rows = a3m_records(payload.decode())
        assert key == sequence_hash(rows[0][1]), "key = representative's hash"
        assert all(len(match_columns(a)) == len(rows[0][1]) for _, a in rows), key
        members += len(rows)
    assert members == len(unique), "every sequence in exactly one cluster"
    rebuilt = build_database([db_inputs[0], db_inputs[1]], tmp_path / "clustered", threads=2, mode="clustered",
                             cluster={"min_seq_id": 0.4, "coverage": 0.8})
    assert rebuilt["content_sha256"] == record["content_sha256"]
    query, sequence = query_fasta(tmp_path, db_inputs[2], "1ubq_A")
    result = run_hhblits(query, prefix, tmp_path / "clu.a3m", 1, SEARCH_PARAMS)
    check_contract((tmp_path / "clu.a3m").read_text(), sequence)
    assert result["depth"] > 1


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_hhblits_real_query(small_db, db_inputs, tmp_path, monkeypatch, name):
    prefix, record = small_db
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    query, sequence = query_fasta(tmp_path, db_inputs[2], name)
    out = tmp_path / "msa" / f"{sequence_hash(sequence)}.a3m"
    result = run_hhblits(query, prefix, out, threads=1, params=SEARCH_PARAMS)
    text = out.read_text()
    records = check_contract(text, sequence)
    assert result["depth"] == len(records) > 1 and result["raw_depth"] >= result["depth"]
    meta = read_header(text)
    assert meta["status"] == "ok" and meta["tool"] == "hhblits" and meta["raw_depth"] == result["raw_depth"]
    msa, deletions = read_a3m(out)
    assert msa.shape == deletions.shape == (result["depth"], len(sequence))
    assert not list(tmp_path.glob("foldworks-hhblits-*")), "private temp dir not removed"

    capped = run_hhblits(query, prefix, tmp_path / "capped.a3m", 1,
                         {**SEARCH_PARAMS, "hhfilter": {**SEARCH_PARAMS["hhfilter"], "max_depth": 2}})
    assert capped["depth"] == 2 and a3m_records((tmp_path / "capped.a3m").read_text()) == records[:2]


def test_hhfilter_identity_reduces_depth(small_db, db_inputs, tmp_path):
    prefix, _ = small_db
    query, _ = query_fasta(tmp_path, db_inputs[2], "1ubq_A")
    loose = run_hhblits(query, prefix, tmp_path / "loose.a3m", 1, SEARCH_PARAMS)
    strict = run_hhblits(query, prefix, tmp_path / "strict.a3m", 1,
                         {**SEARCH_PARAMS, "hhfilter": {"id": 90}})
    assert strict["depth"] < loose["depth"]
    # the per-database depth cap keeps the best hits, before hhfilter
    unfiltered = {**SEARCH_PARAMS, "hhfilter": {"id": 100}}
    full = run_hhblits(query, prefix, tmp_path / "full.a3m", 1, unfiltered)
    capped = run_hhblits(query, prefix, tmp_path / "capped.a3m", 1, {**unfiltered, "max_hits": 2})
    assert full["raw_depth"] > 3 and capped["raw_depth"] == 3 and capped["hits"] == {prefix.name: 2}
    assert a3m_records((tmp_path / "capped.a3m").read_text()) == a3m_records((tmp_path / "full.a3m").read_text())[:3]


def test_two_databases_merged(small_db, clustered_db, db_inputs, tmp_path):
    """One hhblits call per database, each with its own parameters; hits in database order."""
    query, sequence = query_fasta(tmp_path, db_inputs[2], "1ubq_A")
    dbs = [{"name": "single", "prefix": str(small_db[0]), "iterations": 1, "evalue": 0.001, "maxseq": 1000,
            "content_sha256": small_db[1]["content_sha256"]},
           {"name": "clustered", "prefix": str(clustered_db[0]), "iterations": 2, "evalue": 0.001,
            "maxseq": 1000, "content_sha256": clustered_db[1]["content_sha256"]}]
    result = search_query(query, dbs, tmp_path / "merged.a3m", 1, {"id": 100, "max_depth": 10_000}, 120)
    text = (tmp_path / "merged.a3m").read_text()
    records = check_contract(text, sequence)
    assert result["hhblits_calls"] == 2 and set(result["hits"]) == {"single", "clustered"}
    assert result["raw_depth"] == 1 + sum(result["hits"].values())
    assert all(result["hits"][name] >= 1 for name in ("single", "clustered"))
    assert read_header(text)["databases"] == {d["name"]: d["content_sha256"][:16] for d in dbs}
    one = run_hhblits(query, small_db[0], tmp_path / "one.a3m", 1,
                      {"iterations": 1, "maxseq": 1000, "hhfilter": {"id": 100, "max_depth": 10_000}})
    # the first database's rows come first, in the same order as a search of it alone
    assert records[:one["depth"]] == a3m_records((tmp_path / "one.a3m").read_text())


def test_mmseqs_backend_same_contract(small_db, db_inputs, tmp_path):
    """Batched mmseqs search + result2msa on the same database: one a3m per query, same contract."""
    names = ["1aki_A", "1ubq_A"]
    queries = [query_fasta(tmp_path, db_inputs[2], name) for name in names]
    dbs = [{"name": "small", "mmseqs_db": f"{small_db[0]}_mmseqs", "iterations": 1, "evalue": 0.001,
            "content_sha256": small_db[1]["content_sha256"]}]
    out = tmp_path / "batch"
    statuses = search_shard([q for q, _ in queries], dbs, out, threads=2, hhfilter=SEARCH_PARAMS["hhfilter"],
                            timeout_s=300)
    assert statuses == {sequence_hash(s): 0 for _, s in queries}
    for _, sequence in queries:
        text = (out / f"{sequence_hash(sequence)}.a3m").read_text()
        check_contract(text, sequence)
        meta = read_header(text)
        assert meta["tool"] == "mmseqs" and meta["status"] == "ok" and meta["depth"] > 1


def search_cli(query: Path, record: Path, out: Path, *extra: str, params: dict | None = None) -> subprocess.CompletedProcess:
    slice_ = params or {"tool": "hhblits", "hhfilter": {"id": 90, "max_depth": 512},
                        "databases": [{"name": "small", "iterations": 1, "evalue": 0.001, "maxseq": 1000}]}
    cmd = [sys.executable, "-m", "foldworks.msa.search", "--query", str(query), "--db-records", str(record),
           "--out", str(out), "--params", json.dumps(slice_), *extra]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_search_cli_retry_policy_on_real_timeout(small_db, db_inputs, tmp_path):
    """hhblits really times out (0.01 s): before the last attempt the job fails (Snakemake
    retries it); on the last one a failure record + query-only placeholder, exit 0; a later
    success removes the record."""
    prefix, _ = small_db
    query, sequence = query_fasta(tmp_path, db_inputs[2], "1aki_A")
    seq_hash, record = sequence_hash(sequence), Path(f"{prefix}.json")
    out, failure = tmp_path / "msa" / f"{seq_hash}.a3m", tmp_path / "failures" / f"{seq_hash}.json"
    policy = ["--timeout-s", "0.01", "--max-attempts", "2", "--failure-record", str(failure)]
    first = search_cli(query, record, out, *policy, "--attempt", "1")
    assert first.returncode == 1 and "attempt 1 of 2 failed, will be retried" in first.stderr
    assert not out.exists() and not failure.exists()
    last = search_cli(query, record, out, *policy, "--attempt", "2")
    assert last.returncode == 0, last.stderr
    failed = json.loads(failure.read_text())
    assert failed["stage"] == "msa" and failed["key"] == seq_hash and "timed out" in failed["reason"]
    text = out.read_text()
    assert a3m_records(text) == [(seq_hash, sequence)] and validate_a3m(text, sequence) == 1
    assert read_header(text)["status"] == "failed" and "timed out" in read_header(text)["reason"]
    ok = search_cli(query, record, out, "--failure-record", str(failure))
    assert ok.returncode == 0 and not failure.exists() and read_header(out.read_text())["status"] == "ok"


def test_search_cli_hard_errors(small_db, db_inputs, tmp_path):
    """Configuration errors fail every attempt and never produce a placeholder."""
    prefix, _ = small_db
    query, sequence = query_fasta(tmp_path, db_inputs[2], "1aki_A")
    out = tmp_path / "x.a3m"
    broken = json.loads(Path(f"{prefix}.json").read_text())
    broken["prefix"] = str(tmp_path / "nodb")
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    bad = search_cli(query, tmp_path / "broken.json", out, "--attempt", "3", "--max-attempts", "3")
    assert bad.returncode == 1 and "nodb_a3m.ffdata is missing" in bad.stderr and not out.exists()
    other = search_cli(query, Path(f"{prefix}.json"), out, params={"tool": "hhblits", "hhfilter": {},
                       "databases": [{"name": "uniref", "iterations": 1, "evalue": 1, "maxseq": 1}]})
    assert other.returncode == 1 and "database uniref: no record" in other.stderr
    mislabeled = tmp_path / "bad.fasta"
    mislabeled.write_text(f">{'0' * 20}\n{sequence}\n")
    with pytest.raises(ValueError, match="not the hash of its sequence"):
        read_query(mislabeled)
    with pytest.raises(ValueError, match="unknown msa params: hhfilter.idd"):
        run_hhblits(query, prefix, out, 1, {"hhfilter": {"idd": 90}})
    with pytest.raises(ToolError, match=f"hhblits for {sequence_hash(sequence)} on small: hhblits timed out"):
        run_hhblits(query, prefix, tmp_path / "slow.a3m", 1, {"timeout_s": 0.01})
    assert not (tmp_path / "slow.a3m").exists()


def test_external_database_record(small_db, tmp_path):
    """An existing database is fingerprinted by its index files and data sizes."""
    prefix, _ = small_db
    first = external_record("ext", str(prefix), f"{prefix}_mmseqs")
    assert first == external_record("ext", str(prefix), f"{prefix}_mmseqs")
    copy = tmp_path / "copy"
    for suffix in SUFFIXES:
        Path(f"{copy}{suffix}").write_bytes(Path(f"{prefix}{suffix}").read_bytes())
    assert external_record("ext", str(copy), f"{copy}_mmseqs")["content_sha256"] == first["content_sha256"]
    with open(f"{copy}_a3m.ffdata", "ab") as handle:
        handle.write(b"\0")
    assert external_record("ext", str(copy), f"{copy}_mmseqs")["content_sha256"] != first["content_sha256"]
    with pytest.raises(FileNotFoundError, match="nowhere_a3m.ffindex"):
        external_record("ext", str(tmp_path / "nowhere"), None)


def test_msa_config_resolution():
    cfg = resolve_msa_config({"databases": [{"name": "a", "fasta": ["x.fasta"]},
                                            {"name": "uniref30", "prefix": "/db/UniRef30", "iterations": 3}],
                              "timeout_s": 10, "retries": 5, "allow_single_sequence_fallback": True})
    assert [db["maxseq"] for db in cfg["databases"]] == [100_000, 100_000] and cfg["tool"] == "hhblits"
    sliced = search_slice(cfg)
    assert [db["iterations"] for db in sliced["databases"]] == [2, 3]
    text = json.dumps(sliced)
    for absent in ("timeout_s", "retries", "fallback", "x.fasta", "/db/UniRef30", "shard_chars"):
        assert absent not in text, absent
    with pytest.raises(MsaConfigError, match="names must be unique"):
        resolve_msa_config({"databases": [{"name": "a"}, {"name": "a"}]})
    assert resolve_msa_config({})["shard_chars"] == 2  # 256 msa jobs (README "Shards")
    assert "shard_chars" not in json.dumps(search_slice(resolve_msa_config({"shard_chars": 3})))
    with pytest.raises(MsaConfigError, match="msa.shard_chars must be 1, 2 or 3"):
        resolve_msa_config({"shard_chars": 4})
    with pytest.raises(MsaConfigError, match="uniref30.*needs `mmseqs_db`"):
        resolve_msa_config({"tool": "mmseqs", "databases": [{"name": "uniref30", "prefix": "/db/UniRef30"}]})
    with pytest.raises(MsaConfigError, match=r"msa.databases\[a\]: unknown keys evalu"):
        resolve_msa_config({"databases": [{"name": "a", "evalu": 1}]})


def test_summary_statuses(small_db, db_inputs, tmp_path):
    prefix, _ = small_db
    rows = []
    for name in ("1aki_A", "1ubq_A"):
        query, sequence = query_fasta(tmp_path, db_inputs[2], name)
        seq_hash = sequence_hash(sequence)
        rows.append({"sequence_hash": seq_hash, "sequence": sequence, "passed_filters": True})
        out = tmp_path / "data" / "msa" / seq_hash[:2] / f"{seq_hash}.a3m"
        run_hhblits(query, prefix, out, 1, SEARCH_PARAMS)
    rows.append({"sequence_hash": sequence_hash("ACDEFGHIKL"), "sequence": "ACDEFGHIKL", "passed_filters": True})
    rows.append({"sequence_hash": sequence_hash("MMMM"), "sequence": "MMMM", "passed_filters": False})
    table = pd.DataFrame(rows)
    summary = {row["sequence_hash"]: row for row in summarize(table, tmp_path / "data")}
    assert len(summary) == 3
    assert [summary[r["sequence_hash"]]["status"] for r in rows[:3]] == ["ok", "ok", "missing"]
    assert summary[rows[0]["sequence_hash"]]["depth"] > 1
    a3m = tmp_path / "data" / "msa" / rows[1]["sequence_hash"][:2] / f"{rows[1]['sequence_hash']}.a3m"
    a3m.write_text(a3m.read_text() + ">truncated row\nACD\n")
    statuses = {r["sequence_hash"]: r["status"] for r in summarize(table, tmp_path / "data")}
    assert statuses[rows[1]["sequence_hash"]] == "invalid"


HAND_A3M = """#A3M comment line
>query
ACDEFG
>ss_pred annotation row, skipped
CCHHHC
>hit1 insertions before columns 0, 1 and 4, a gap at column 3
mAcDE-yyFG
>hit2 non-standard letters and a trailing insertion
XBZUOWkk
>hit3 a2m padding
A.C.D..EF-
"""


def test_parse_a3m_hand_written():
    msa, deletions = parse_a3m(HAND_A3M)
    expected_msa = np.array([
        [0, 4, 3, 6, 13, 7],
        [0, 3, 6, 21, 13, 7],
        [20, 20, 20, 20, 20, 17],
        [0, 4, 3, 6, 13, 21],
    ], dtype=np.int8)
    expected_del = np.array([
        [0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 2, 0],
        [0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
    ], dtype=np.float32)
    assert msa.dtype == np.int8 and deletions.dtype == np.float32
    np.testing.assert_array_equal(msa, expected_msa)
    np.testing.assert_array_equal(deletions, expected_del)
    assert validate_a3m(HAND_A3M, "ACDEFG") == 4 and read_header(HAND_A3M) is None


def test_corrupt_a3m_fails_validation():
    short_row = HAND_A3M + ">hit4 one column short\nACDEF\n"
    with pytest.raises(A3MError, match="abc123.*hit4.*5 match columns"):
        validate_a3m(short_row, "ACDEFG", name="abc123")
    with pytest.raises(A3MError, match="hit4"):
        parse_a3m(short_row)
    with pytest.raises(A3MError, match="abc123: first a3m record is not the query"):
        validate_a3m(HAND_A3M, "ACDEFH", name="abc123")
    with pytest.raises(A3MError, match="abc123"):
        finish_a3m(short_row, "abc123", "ACDEFG", max_depth=10)
    assert finish_a3m(short_row, "abc123", "ACDEFG", max_depth=2).startswith(">abc123\nACDEFG\n>hit1")
    with pytest.raises(A3MError, match="not JSON"):
        read_header("#foldworks-msa {broken\n>q\nA\n")
