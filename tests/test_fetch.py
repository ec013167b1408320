"""fetch stage: local mirror directory, legacy PDB conversion, ID validation, and a real HTTP
server on 127.0.0.1 that injects faults per path (404, 5xx, stalls, truncation, HTML, ...)."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gemmi
import numpy as np
import pytest

from _fault_server import FaultServer
from foldworks.fetch import FetchError, fetch_entry
from foldworks.fetch.convert import pdb_date
from foldworks.fetch.core import next_attempt_token
from foldworks.fetch.manifest import read_records, write_manifest
from foldworks.ids import InvalidIdentifier

FAST = {"timeout_s": 5, "retries": 2, "backoff_s": 0.01}


def _run(entry: str, source: str, tmp_path: Path, params: dict | None = None):
    out = tmp_path / "raw" / f"{entry}.cif.gz"
    record = tmp_path / "raw" / f"{entry}.json"
    return fetch_entry(entry, source, out, record, params or FAST), out, record


def _assert_nothing_written(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    leftovers = sorted(p.name for p in raw.iterdir()) if raw.exists() else []
    assert leftovers == [], f"files left after a failed fetch: {leftovers}"


# ---------------------------------------------------------------- local directory source


def test_local_cif_is_stored_byte_identical(pdb_mirror: Path, tmp_path: Path) -> None:
    result, out, record_path = _run("1AKI", str(pdb_mirror), tmp_path)
    original = (pdb_mirror / "1aki.cif.gz").read_bytes()
    assert out.read_bytes() == original
    record = json.loads(record_path.read_text())
    assert record == result.record
    assert record["entry"] == "1aki" and record["source_format"] == "cif"
    assert record["sha256"] == record["stored_sha256"] == hashlib.sha256(original).hexdigest()
    assert record["bytes"] == len(original)
    assert record["url_or_path"].endswith("1aki.cif.gz")
    assert record["status"] == "ok" and record["attempt_token"] == ""
    assert set(record) == {"entry", "status", "attempt_token", "source", "url_or_path", "source_format", "sha256",
                           "stored_sha256", "bytes", "fetched_at"}


def test_local_pdb_fallback_converts_to_mmcif(pdb_mirror: Path, tmp_path: Path) -> None:
    _result, out, record_path = _run("1ubi", str(pdb_mirror), tmp_path)
    record = json.loads(record_path.read_text())
    assert record["source_format"] == "pdb"
    assert record["url_or_path"].endswith("1ubi.pdb.gz")
    stored = out.read_bytes()
    assert record["stored_sha256"] == hashlib.sha256(stored).hexdigest() != record["sha256"]
    block = gemmi.cif.read_string(gzip.decompress(stored).decode()).sole_block()
    assert len(block.find_values("_entity_poly_seq.mon_id")) == 76  # SEQRES of ubiquitin
    assert min(block.find_values("_pdbx_audit_revision_history.revision_date")) == "1994-05-31"
    original = gemmi.read_structure(str(pdb_mirror / "1ubi.pdb.gz"))
    converted = gemmi.make_structure_from_block(block)
    xyz = lambda st: np.array([a.pos.tolist() for r in st[0]["A"] for a in r])  # noqa: E731
    assert np.array_equal(xyz(original), xyz(converted))  # coordinates unchanged


def test_conversion_is_deterministic(pdb_mirror: Path, tmp_path: Path) -> None:
    _r1, out1, _ = _run("5gob", str(pdb_mirror), tmp_path / "a")
    _r2, out2, _ = _run("5gob", str(pdb_mirror), tmp_path / "b")
    assert out1.read_bytes() == out2.read_bytes()


def test_local_upper_case_file_name(pdb_mirror: Path, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy(pdb_mirror / "1crn.cif.gz", mirror / "1CRN.cif.gz")
    result, out, _ = _run("1crn", str(mirror), tmp_path)
    assert result.record["url_or_path"].endswith("1CRN.cif.gz") and out.exists()


def test_local_missing_entry(pdb_mirror: Path, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="entry 9zzz not found at"):
        _run("9zzz", str(pdb_mirror), tmp_path)
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("bad", ["../x", "12345", "abc", "1ak/", ""])
def test_invalid_ids_are_refused_before_any_path(bad: str, pdb_mirror: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidIdentifier, match="entry"):
        fetch_entry(bad, str(pdb_mirror), tmp_path / "raw" / "x.cif.gz", tmp_path / "raw" / "x.json")
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("source", ["ftp://files.rcsb.org/pub", "file:///etc", "/no/such/dir"])
def test_bad_sources_are_refused(source: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="source"):
        _run("1aki", source, tmp_path)
    _assert_nothing_written(tmp_path)


def test_unknown_param_is_refused(pdb_mirror: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timeout"):
        _run("1aki", str(pdb_mirror), tmp_path, {"timeout": 3})


def test_pdb_two_digit_years() -> None:
    assert pdb_date("31-MAY-94") == "1994-05-31"
    assert pdb_date("02-NOV-16") == "2016-11-02"
    assert pdb_date("31-FOO-94") is None


# ---------------------------------------------------------------- real HTTP server with faults


@pytest.fixture()
def server(pdb_mirror: Path):
    with FaultServer(pdb_mirror) as srv:
        yield srv


def test_http_ok(server: FaultServer, pdb_mirror: Path, tmp_path: Path) -> None:
    result, out, _ = _run("1aki", server.url, tmp_path)
    assert out.read_bytes() == (pdb_mirror / "1aki.cif.gz").read_bytes()
    assert result.record["url_or_path"] == f"{server.url}/1AKI.cif.gz"
    assert server.hits == {"/download/1AKI.cif.gz": 1}


def test_http_404_falls_back_to_pdb_without_retry(server: FaultServer, tmp_path: Path) -> None:
    result, out, _ = _run("1ubi", server.url, tmp_path)
    assert result.record["source_format"] == "pdb" and out.exists()
    assert server.hits == {"/download/1UBI.cif.gz": 1, "/download/1UBI.pdb.gz": 1}


def test_http_not_found_anywhere(server: FaultServer, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match=f"entry 9zzz not found at {server.url}"):
        _run("9zzz", server.url, tmp_path)
    assert server.hits == {"/download/9ZZZ.cif.gz": 1, "/download/9ZZZ.pdb.gz": 1}
    _assert_nothing_written(tmp_path)


def test_http_500_retried_then_fails(server: FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "500"
    with pytest.raises(FetchError, match=r"entry 1aki: .*HTTP 500.*gave up after 3 attempts"):
        _run("1aki", server.url, tmp_path)
    assert server.hits["/download/1AKI.cif.gz"] == 3  # 1 + retries
    assert "/download/1AKI.pdb.gz" not in server.hits  # a server error is not "not found"
    _assert_nothing_written(tmp_path)


def test_http_503_then_200_recovers(server: FaultServer, pdb_mirror: Path, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "503-then-200"
    result, out, _ = _run("1aki", server.url, tmp_path)
    assert result.attempts == {f"{server.url}/1AKI.cif.gz": 2}
    assert server.hits["/download/1AKI.cif.gz"] == 2
    assert out.read_bytes() == (pdb_mirror / "1aki.cif.gz").read_bytes()


def test_http_stall_times_out(server: FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "stall"
    start = time.monotonic()
    with pytest.raises(FetchError, match="gave up after 2 attempts"):
        _run("1aki", server.url, tmp_path, {"timeout_s": 0.3, "retries": 1, "backoff_s": 0.01})
    assert time.monotonic() - start < server.stall_s * 2  # gave up by timeout, not by waiting
    assert server.hits["/download/1AKI.cif.gz"] == 2
    _assert_nothing_written(tmp_path)


def test_http_short_body_is_retried(server: FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "short-body"
    with pytest.raises(FetchError, match="truncated transfer|connection closed"):
        _run("1aki", server.url, tmp_path)
    assert server.hits["/download/1AKI.cif.gz"] == 3
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("fault, message", [
    ("truncated-gzip", "truncated gzip"),
    ("html", "HTML page"),
    ("wrong-type", "served as text/html"),
    ("not-mmcif", "not valid mmCIF"),
    ("other-entry", "file is entry '1ubq', expected '1aki'"),
    ("empty", "empty file"),
])
def test_http_bad_content_rejected_without_retry(fault: str, message: str, server: FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = fault
    with pytest.raises(FetchError, match=message):
        _run("1aki", server.url, tmp_path)
    assert server.hits["/download/1AKI.cif.gz"] == 1
    _assert_nothing_written(tmp_path)


def test_http_octet_stream_is_judged_by_content(server: FaultServer, pdb_mirror: Path, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "octet-stream"
    _result, out, _ = _run("1aki", server.url, tmp_path)
    assert out.read_bytes() == (pdb_mirror / "1aki.cif.gz").read_bytes()


def test_size_caps(server: FaultServer, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="exceeds the limit of 1000 bytes"):
        _run("1aki", server.url, tmp_path, {**FAST, "max_bytes": 1000})
    with pytest.raises(FetchError, match="decompressed text exceeds 100000 bytes"):
        _run("1aki", server.url, tmp_path, {**FAST, "max_text_bytes": 100_000})
    _assert_nothing_written(tmp_path)


def test_existing_output_untouched_on_failure(server: FaultServer, tmp_path: Path) -> None:
    _run("1aki", server.url, tmp_path)
    before = (tmp_path / "raw" / "1aki.cif.gz").read_bytes()
    server.faults["/download/1AKI.cif.gz"] = "truncated-gzip"
    with pytest.raises(FetchError):
        _run("1aki", server.url, tmp_path)
    assert (tmp_path / "raw" / "1aki.cif.gz").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["1aki.cif.gz", "1aki.json"]


# ---------------------------------------------------------------- manifest and CLI


def test_manifest_sorted_one_row_per_entry(pdb_mirror: Path, tmp_path: Path) -> None:
    for entry in ("1ubq", "1aki", "1ubi"):
        _run(entry, str(pdb_mirror), tmp_path)
    records = sorted((tmp_path / "raw").glob("*.json"))
    out = tmp_path / "raw" / "manifest.tsv"
    assert write_manifest(records, out) == 3
    lines = out.read_text().splitlines()
    assert lines[0].split("\t")[:3] == ["entry", "source_format", "bytes"]
    assert [ln.split("\t")[:2] for ln in lines[1:]] == [["1aki", "cif"], ["1ubi", "pdb"], ["1ubq", "cif"]]
    copy = tmp_path / "dup.json"
    shutil.copy(records[0], copy)
    with pytest.raises(ValueError, match="more than one record"):
        read_records([*records, copy])


def _cli(entry: str, source: str, tmp_path: Path, params: dict | None = None) -> subprocess.CompletedProcess:
    """The workflow's form of the fetch command (record + failures folder)."""
    return subprocess.run(
        [sys.executable, "-m", "foldworks.fetch", "--entry", entry, "--source", source,
         "--out", str(tmp_path / "raw" / f"{entry[:4]}.cif.gz"), "--record", str(tmp_path / "raw" / f"{entry[:4]}.json"),
         "--params", json.dumps(params or FAST), "--failures-dir", str(tmp_path / "failures"),
         "--attempt-token", "t1"], capture_output=True, text=True, timeout=60)


def test_manifest_skips_failed_records(pdb_mirror: Path, tmp_path: Path) -> None:
    _run("1crn", str(pdb_mirror), tmp_path)
    assert _cli("9zzz", str(pdb_mirror), tmp_path).returncode == 0
    out = tmp_path / "manifest.tsv"
    assert write_manifest(sorted((tmp_path / "raw").glob("*.json")), out) == 1
    assert [ln.split("\t")[0] for ln in out.read_text().splitlines()[1:]] == ["1crn"]


def _manifest_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foldworks.fetch.manifest", *args],
                          capture_output=True, text=True, timeout=60)


def test_manifest_cli_reads_the_records_of_an_entry_list(pdb_mirror: Path, tmp_path: Path) -> None:
    """The workflow's form: one list file and the records folder, whatever the number of entries;
    records of entries not in the list (an entry dropped from the config) are left out."""
    for entry in ("1ubq", "1aki", "1crn"):
        _run(entry, str(pdb_mirror), tmp_path)
    assert _cli("9zzz", str(pdb_mirror), tmp_path).returncode == 0  # a failed record: no row
    listing = tmp_path / "entries.txt"
    listing.write_text("1aki\n1ubq\n9zzz\n")
    out = tmp_path / "manifest.tsv"
    result = _manifest_cli("--entries", str(listing), "--records-dir", str(tmp_path / "raw"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert [ln.split("\t")[0] for ln in out.read_text().splitlines()] == ["entry", "1aki", "1ubq"]
    listing.write_text("1aki\n2abc\n")
    missing = _manifest_cli("--entries", str(listing), "--records-dir", str(tmp_path / "raw"), "--out", str(out))
    assert missing.returncode == 1 and "2abc.json: unreadable" in missing.stderr
    listing.write_text("1aki\n1AKI\n")
    bad = _manifest_cli("--entries", str(listing), "--records-dir", str(tmp_path / "raw"), "--out", str(out))
    assert bad.returncode == 1 and "line 2: '1AKI' is not a lower-case PDB ID" in bad.stderr
    assert [ln.split("\t")[0] for ln in out.read_text().splitlines()] == ["entry", "1aki", "1ubq"]  # kept
    alone = _manifest_cli("--entries", str(listing), "--out", str(out))
    assert alone.returncode == 2 and "--entries and --records-dir go together" in alone.stderr


def test_cli_records_failures_as_data(pdb_mirror: Path, tmp_path: Path) -> None:
    ok = _cli("1crn", str(pdb_mirror), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "raw" / "1crn.cif.gz").exists()
    assert json.loads((tmp_path / "raw" / "1crn.json").read_text())["attempt_token"] == "t1"
    missing = _cli("9zzz", str(pdb_mirror), tmp_path)
    assert missing.returncode == 0 and "entry 9zzz not found" in missing.stderr
    record = json.loads((tmp_path / "raw" / "9zzz.json").read_text())
    assert record["status"] == "failed" and record["transient"] is False
    assert record["reason"] == f"entry 9zzz not found at {pdb_mirror}"
    assert not (tmp_path / "raw" / "9zzz.cif.gz").exists()
    failure = json.loads((tmp_path / "failures" / "fetch" / "9zzz.json").read_text())
    assert (failure["stage"], failure["key"], failure["reason"]) == ("fetch", "9zzz", record["reason"])
    invalid = subprocess.run([sys.executable, "-m", "foldworks.fetch", "--entry", "../x", "--source", str(pdb_mirror),
                              "--out", str(tmp_path / "x.cif.gz"), "--record", str(tmp_path / "x.json")],
                             capture_output=True, text=True, timeout=60)
    assert invalid.returncode == 2 and "'../x'" in invalid.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["failures", "raw"]  # nothing named after '../x'


def test_cli_failure_after_success_and_success_after_failure(server: FaultServer, pdb_mirror: Path, tmp_path: Path) -> None:
    """A later failure removes the stale structure; a later success removes the failure record."""
    assert _cli("1aki", server.url, tmp_path).returncode == 0
    assert (tmp_path / "raw" / "1aki.cif.gz").exists()
    server.faults["/download/1AKI.cif.gz"] = "500"
    result = _cli("1aki", server.url, tmp_path)
    assert result.returncode == 0 and "transient: retried on the next run" in result.stderr
    record = json.loads((tmp_path / "raw" / "1aki.json").read_text())
    assert record["status"] == "failed" and record["transient"] is True and "HTTP 500" in record["reason"]
    assert not (tmp_path / "raw" / "1aki.cif.gz").exists()
    assert (tmp_path / "failures" / "fetch" / "1aki.json").exists()
    assert server.hits["/download/1AKI.cif.gz"] == 1 + 3
    del server.faults["/download/1AKI.cif.gz"]
    assert _cli("1aki", server.url, tmp_path).returncode == 0
    assert (tmp_path / "raw" / "1aki.cif.gz").read_bytes() == (pdb_mirror / "1aki.cif.gz").read_bytes()
    assert json.loads((tmp_path / "raw" / "1aki.json").read_text())["status"] == "ok"
    assert not (tmp_path / "failures" / "fetch" / "1aki.json").exists()


@pytest.mark.parametrize("fault, transient", [("500", True), ("stall", True), ("short-body", True),
                                              ("404", False), ("truncated-gzip", False), ("wrong-type", False)])
def test_failures_say_whether_a_retry_can_help(fault: str, transient: bool, server: FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = fault
    server.faults["/download/1AKI.pdb.gz"] = "404"
    with pytest.raises(FetchError) as info:
        _run("1aki", server.url, tmp_path, {"timeout_s": 0.3, "retries": 1, "backoff_s": 0.01})
    assert info.value.transient is transient and "entry 1aki" in str(info.value)
    assert server.hits["/download/1AKI.cif.gz"] == (2 if transient else 1)
    _assert_nothing_written(tmp_path)


def test_next_attempt_token_changes_only_for_transient_failures(server: FaultServer, tmp_path: Path) -> None:
    """The fetch rule's ``attempt`` param: a new value (-> Snakemake reruns the job) only when the
    record is a transient failure; stable for ok records and permanent failures."""
    record = tmp_path / "raw" / "1aki.json"
    assert next_attempt_token(record) == "first"
    server.faults["/download/1AKI.cif.gz"] = "503"
    _cli("1aki", server.url, tmp_path, {"timeout_s": 5, "retries": 0})
    failed = json.loads(record.read_text())
    token = next_attempt_token(record)
    assert failed["transient"] and token.startswith("retry-after-") and token != failed["attempt_token"]
    del server.faults["/download/1AKI.cif.gz"]
    _cli("1aki", server.url, tmp_path)
    assert next_attempt_token(record) == json.loads(record.read_text())["attempt_token"] == "t1"
    _cli("9zzz", server.url, tmp_path)  # permanent: the token stays what the record says
    assert next_attempt_token(tmp_path / "raw" / "9zzz.json") == "t1"
    record.write_text("{not json")
    assert next_attempt_token(record) == "first"
