"""msa_db + msa stages on real sequences: a ~300-sequence HH-suite database from the shared
seqdb, real hhblits/hhfilter searches, and the A3M parser/validator."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import require_tool
from foldworks.ids import sequence_hash
from foldworks.msa import ffindex
from foldworks.msa.a3m import A3MError, a3m_records, match_columns, parse_a3m, read_a3m, validate_a3m
from foldworks.msa.build_db import build_database
from foldworks.msa.fasta import read_fasta
from foldworks.msa.search import finish_a3m, read_query, run_hhblits
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
    prefix = tmp_path_factory.mktemp("db") / "small"
    record = build_database([db_inputs[0], db_inputs[1]], prefix, threads=2,
                            record_path=f"{prefix}.json")
    return prefix, record


def query_fasta(directory: Path, records: list[tuple[str, str]], name: str) -> tuple[Path, str]:
    sequence = next(s for h, s in records if h.split()[0] == name)
    seq_hash = sequence_hash(sequence)
    path = directory / f"{seq_hash}.fasta"
    path.write_text(f">{seq_hash}\n{sequence}\n", encoding="ascii")
    return path, sequence


def test_database_entries_keys_and_record(small_db, db_inputs):
    prefix, record = small_db
    unique = {s for _, s in db_inputs[2]}
    assert record["n_sequences"] == len(unique) < N_DB_RECORDS
    assert record["n_input_records"] == N_DB_RECORDS + 50
    assert record["n_residues"] == sum(map(len, unique))
    assert Path(f"{prefix}.json").is_file() and not Path(f"{prefix}_hhm.ffdata").exists()
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


def test_rebuild_is_byte_identical(small_db, db_inputs, tmp_path):
    prefix, record = small_db
    again = tmp_path / "again"
    # other input order and other duplicates: same unique sequences, same first headers
    rebuilt = build_database([db_inputs[0], db_inputs[1], db_inputs[0]], again, threads=2)
    assert rebuilt["content_sha256"] == record["content_sha256"]
    for suffix in ("_a3m.ffdata", "_a3m.ffindex", "_cs219.ffdata", "_cs219.ffindex"):
        assert Path(f"{again}{suffix}").read_bytes() == Path(f"{prefix}{suffix}").read_bytes(), suffix
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp files left behind"


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_hhblits_real_query(small_db, db_inputs, tmp_path, monkeypatch, name):
    prefix, _ = small_db
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    query, sequence = query_fasta(tmp_path, db_inputs[2], name)
    out = tmp_path / "msa" / f"{sequence_hash(sequence)}.a3m"
    result = run_hhblits(query, prefix, out, threads=1, params=SEARCH_PARAMS)
    text = out.read_text()
    records = a3m_records(text)
    assert records[0] == (sequence_hash(sequence), sequence)
    assert all(len(match_columns(aligned)) == len(sequence) for _, aligned in records)
    assert result["depth"] == len(records) > 1 and result["raw_depth"] >= result["depth"]
    assert validate_a3m(text, sequence) == result["depth"]
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


def test_search_cli_and_errors(small_db, db_inputs, tmp_path):
    prefix, _ = small_db
    query, sequence = query_fasta(tmp_path, db_inputs[2], "1aki_A")
    out = tmp_path / "cli.a3m"
    cmd = [sys.executable, "-m", "foldworks.msa.search", "--query", str(query), "--db", str(prefix),
           "--out", str(out), "--threads", "1", "--params", '{"iterations": 1}']
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    assert a3m_records(out.read_text())[0][1] == sequence
    bad = subprocess.run(cmd[:6] + [str(tmp_path / "nodb")] + cmd[7:], capture_output=True, text=True)
    assert bad.returncode == 1 and "nodb_a3m.ffdata is missing" in bad.stderr
    mislabeled = tmp_path / "bad.fasta"
    mislabeled.write_text(f">{'0' * 20}\n{sequence}\n")
    with pytest.raises(ValueError, match="not the hash of its sequence"):
        read_query(mislabeled)
    with pytest.raises(ValueError, match="unknown msa params: hhfilter.idd"):
        run_hhblits(query, prefix, tmp_path / "x.a3m", 1, {"hhfilter": {"idd": 90}})
    seq_hash = sequence_hash(sequence)
    with pytest.raises(ToolError, match=f"hhblits for {seq_hash}: hhblits timed out"):
        run_hhblits(query, prefix, tmp_path / "slow.a3m", 1, {"timeout_s": 0.01})
    assert not (tmp_path / "slow.a3m").exists()


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
    assert validate_a3m(HAND_A3M, "ACDEFG") == 4


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
