"""fetch stage: local mirror directory, legacy PDB conversion, ID validation, and a real HTTP
server on 127.0.0.1 that injects faults per path (404, 5xx, stalls, truncation, HTML, ...)."""

from __future__ import annotations

import collections
import gzip
import hashlib
import http.server
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import gemmi
import numpy as np
import pytest

from foldworks.fetch import FetchError, fetch_entry
from foldworks.fetch.convert import pdb_date
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
    assert set(record) == {"entry", "source", "url_or_path", "source_format", "sha256",
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


class _FaultServer:
    """ThreadingHTTPServer on 127.0.0.1:<ephemeral> serving mirror files; ``faults[path]`` picks
    a misbehaviour for one request path; ``hits[path]`` counts the requests it received."""

    def __init__(self, mirror: Path) -> None:
        self.mirror = mirror
        self.faults: dict[str, str] = {}
        self.hits: collections.Counter[str] = collections.Counter()
        self.stall_s = 1.5
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:  # noqa: N802
                owner.hits[self.path] += 1
                owner.respond(self)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/download"

    def mirror_bytes(self, path: str) -> bytes | None:
        name = path.rsplit("/", 1)[-1].lower()
        file = self.mirror / name
        return file.read_bytes() if file.is_file() else None

    def respond(self, h: http.server.BaseHTTPRequestHandler) -> None:
        fault = self.faults.get(h.path, "")
        body = self.mirror_bytes(h.path)
        if fault == "500":
            return h.send_error(500)
        if fault == "503-then-200" and self.hits[h.path] == 1:
            return h.send_error(503)
        if fault == "stall":
            time.sleep(self.stall_s)  # longer than the client's timeout
        if fault == "html":
            body = b"<!DOCTYPE html><html><body>Service temporarily unavailable</body></html>"
        elif fault == "truncated-gzip" and body:
            body = body[: len(body) // 2]
        elif fault == "not-mmcif":
            body = gzip.compress(b"this is not a structure file\n" * 20)
        elif fault == "other-entry":
            body = (self.mirror / "1ubq.cif.gz").read_bytes()
        elif fault == "empty":
            body = b""
        if body is None:
            return h.send_error(404)
        h.send_response(200)
        h.send_header("Content-Type", "text/html" if fault == "html" else "application/gzip")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if fault == "short-body":  # promise the full length, send half, close
            h.wfile.write(body[: len(body) // 2])
            h.close_connection = True
            return
        try:
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the stalled client already gave up

    def __enter__(self) -> "_FaultServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server(pdb_mirror: Path):
    with _FaultServer(pdb_mirror) as srv:
        yield srv


def test_http_ok(server: _FaultServer, pdb_mirror: Path, tmp_path: Path) -> None:
    result, out, _ = _run("1aki", server.url, tmp_path)
    assert out.read_bytes() == (pdb_mirror / "1aki.cif.gz").read_bytes()
    assert result.record["url_or_path"] == f"{server.url}/1AKI.cif.gz"
    assert server.hits == {"/download/1AKI.cif.gz": 1}


def test_http_404_falls_back_to_pdb_without_retry(server: _FaultServer, tmp_path: Path) -> None:
    result, out, _ = _run("1ubi", server.url, tmp_path)
    assert result.record["source_format"] == "pdb" and out.exists()
    assert server.hits == {"/download/1UBI.cif.gz": 1, "/download/1UBI.pdb.gz": 1}


def test_http_not_found_anywhere(server: _FaultServer, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match=f"entry 9zzz not found at {server.url}"):
        _run("9zzz", server.url, tmp_path)
    assert server.hits == {"/download/9ZZZ.cif.gz": 1, "/download/9ZZZ.pdb.gz": 1}
    _assert_nothing_written(tmp_path)


def test_http_500_retried_then_fails(server: _FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "500"
    with pytest.raises(FetchError, match=r"entry 1aki: .*HTTP 500.*gave up after 3 attempts"):
        _run("1aki", server.url, tmp_path)
    assert server.hits["/download/1AKI.cif.gz"] == 3  # 1 + retries
    assert "/download/1AKI.pdb.gz" not in server.hits  # a server error is not "not found"
    _assert_nothing_written(tmp_path)


def test_http_503_then_200_recovers(server: _FaultServer, pdb_mirror: Path, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "503-then-200"
    result, out, _ = _run("1aki", server.url, tmp_path)
    assert result.attempts == {f"{server.url}/1AKI.cif.gz": 2}
    assert server.hits["/download/1AKI.cif.gz"] == 2
    assert out.read_bytes() == (pdb_mirror / "1aki.cif.gz").read_bytes()


def test_http_stall_times_out(server: _FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "stall"
    start = time.monotonic()
    with pytest.raises(FetchError, match="gave up after 2 attempts"):
        _run("1aki", server.url, tmp_path, {"timeout_s": 0.3, "retries": 1, "backoff_s": 0.01})
    assert time.monotonic() - start < server.stall_s * 2  # gave up by timeout, not by waiting
    assert server.hits["/download/1AKI.cif.gz"] == 2
    _assert_nothing_written(tmp_path)


def test_http_short_body_is_retried(server: _FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = "short-body"
    with pytest.raises(FetchError, match="truncated transfer|connection closed"):
        _run("1aki", server.url, tmp_path)
    assert server.hits["/download/1AKI.cif.gz"] == 3
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("fault, message", [
    ("truncated-gzip", "truncated gzip"),
    ("html", "HTML page"),
    ("not-mmcif", "not valid mmCIF"),
    ("other-entry", "file is entry '1ubq', expected '1aki'"),
    ("empty", "empty file"),
])
def test_http_bad_content_rejected_without_retry(fault: str, message: str, server: _FaultServer, tmp_path: Path) -> None:
    server.faults["/download/1AKI.cif.gz"] = fault
    with pytest.raises(FetchError, match=message):
        _run("1aki", server.url, tmp_path)
    assert server.hits["/download/1AKI.cif.gz"] == 1
    _assert_nothing_written(tmp_path)


def test_size_caps(server: _FaultServer, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="exceeds the limit of 1000 bytes"):
        _run("1aki", server.url, tmp_path, {**FAST, "max_bytes": 1000})
    with pytest.raises(FetchError, match="decompressed text exceeds 100000 bytes"):
        _run("1aki", server.url, tmp_path, {**FAST, "max_text_bytes": 100_000})
    _assert_nothing_written(tmp_path)


def test_existing_output_untouched_on_failure(server: _FaultServer, tmp_path: Path) -> None:
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


def test_cli_exit_codes(pdb_mirror: Path, tmp_path: Path) -> None:
    def cli(entry: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "foldworks.fetch", "--entry", entry, "--source", str(pdb_mirror),
             "--out", str(tmp_path / f"{entry[:4]}.cif.gz"), "--record", str(tmp_path / "r.json"),
             "--params", json.dumps(FAST)], capture_output=True, text=True, timeout=60)

    ok = cli("1crn")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "1crn.cif.gz").exists()
    missing = cli("9zzz")
    assert missing.returncode == 1 and "entry 9zzz not found" in missing.stderr
    invalid = cli("../x")
    assert invalid.returncode == 2 and "'../x'" in invalid.stderr
