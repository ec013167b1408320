"""Bad input never stops a run: real Snakemake (``--keep-going``) over good + bad entries.

A temporary mirror holds real entries and bad ones derived from real entries (truncated gzip,
plain text, an HTML page, an empty file, no ``_atom_site``, ligand-only, DNA-only, all-``UNK``,
over the size cap), served by a real HTTP server on 127.0.0.1 that also answers 503 for one
entry (a lasting outage) and 404 for another. The config adds IDs that are not IDs and a
duplicate. One Snakemake run goes up to ``results/failures.tsv``; each kind is one test that
checks its line in the report (stage, entry, clear reason) and what was (not) stored; then the
outage ends and the next run retries exactly the transient failure.
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import gemmi
import pandas as pd
import pytest
import yaml

from _fault_server import FaultServer
from conftest import REPO_ROOT, require_tool
from conftest import run_snakemake as snakemake
from foldworks import entrylist, failures
from foldworks.fetch.entries import load_entries

GOOD = ("1crn", "1ubq", "1aki", "2igd", "1stp", "3u7t", "4lzt", "1fki")
MAX_BYTES = 100_000  # the good entries are 14-50 kB; 9big (4HHB) is ~165 kB

#: entry/item -> (stage, pattern its reason must match); the reason must also name the entry.
EXPECTED: dict[str, tuple[str, str]] = {
    "9trn": ("fetch", "truncated gzip|corrupt gzip"),
    "9ngz": ("fetch", "not gzip data"),
    "9htm": ("fetch", "an HTML page, not a structure file"),
    "9emp": ("fetch", "empty file"),
    "9nas": ("fetch", "mmCIF has no _atom_site records"),
    "9lig": ("parse", "no polymer chains"),
    "9dna": ("chains", r"no chain kept \(A: molecule_types \[dna"),
    "9unk": ("chains", r"no chain kept \(A: unknown_residues"),
    "9big": ("fetch", f"exceeds the limit of {MAX_BYTES} bytes"),
    "9nf0": ("fetch", "entry 9nf0 not found at http://127.0.0.1"),
    "9tmp": ("fetch", r"HTTP 503.*gave up after 2 attempts"),
    "../x": ("input", "not a 4-character PDB ID"),
    "12345": ("input", "not a 4-character PDB ID"),
    "1crn": ("input", "listed 2 times in pdb.entries; used once"),
}
FETCH_FAILED = [k for k, (stage, _) in EXPECTED.items() if stage == "fetch"]


def _doc(mirror: Path, entry: str) -> gemmi.cif.Document:
    return gemmi.cif.read_string(gzip.decompress((mirror / f"{entry}.cif.gz").read_bytes()).decode())


def _write(doc: gemmi.cif.Document, new_id: str, out_dir: Path) -> None:
    """Save ``doc`` as entry ``new_id`` (block name and ``_entry.id`` renamed: fetch checks them)."""
    block = doc.sole_block()
    block.name = new_id.upper()
    block.set_pair("_entry.id", new_id.upper())
    (out_dir / f"{new_id}.cif.gz").write_bytes(gzip.compress(doc.as_string().encode()))


def _ligand_only(doc: gemmi.cif.Document) -> gemmi.cif.Document:
    table = doc.sole_block().find("_atom_site.", ["group_PDB"])
    for row in range(len(table) - 1, -1, -1):
        if table[row][0] == "ATOM":  # keep HETATM rows: biotin and waters
            table.remove_row(row)
    return doc


def _all_unknown(doc: gemmi.cif.Document) -> gemmi.cif.Document:
    block = doc.sole_block()
    for tag in ("_atom_site.label_comp_id", "_atom_site.auth_comp_id", "_entity_poly_seq.mon_id",
                "_pdbx_poly_seq_scheme.mon_id", "_pdbx_poly_seq_scheme.pdb_mon_id", "_pdbx_poly_seq_scheme.auth_mon_id"):
        column = block.find_values(tag)
        for i in range(len(column)):
            if column[i] not in ("?", "."):
                column[i] = "UNK"
    for tag in ("_entity_poly.pdbx_seq_one_letter_code", "_entity_poly.pdbx_seq_one_letter_code_can"):
        column = block.find_values(tag)
        for i in range(len(column)):
            column[i] = ";" + "X" * len("".join(gemmi.cif.as_string(column[i]).split())) + "\n;"
    return doc


def build_mirror(real: Path, out: Path) -> Path:
    """Good entries copied; bad ones derived from real entries (see :data:`EXPECTED`)."""
    out.mkdir()
    for entry in GOOD:
        shutil.copy(real / f"{entry}.cif.gz", out / f"{entry}.cif.gz")
    crn = (real / "1crn.cif.gz").read_bytes()
    (out / "9trn.cif.gz").write_bytes(crn[: len(crn) // 2])
    (out / "9ngz.cif.gz").write_bytes(gzip.decompress(crn))
    (out / "9htm.cif.gz").write_bytes(b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head></html>\n")
    (out / "9emp.cif.gz").write_bytes(b"")
    no_atoms = _doc(real, "1crn")
    no_atoms.sole_block().find_mmcif_category("_atom_site.").erase()
    _write(no_atoms, "9nas", out)
    _write(_ligand_only(_doc(real, "1stp")), "9lig", out)
    _write(_doc(real, "1bna"), "9dna", out)
    _write(_all_unknown(_doc(real, "1crn")), "9unk", out)
    _write(_doc(real, "4hhb"), "9big", out)
    _write(_doc(real, "5pti"), "9tmp", out)  # fine, but the server is "down" for it at first
    return out


@pytest.fixture(scope="module")
def server(pdb_mirror: Path, tmp_path_factory):
    mirror = build_mirror(pdb_mirror, tmp_path_factory.mktemp("badmirror") / "mirror")
    with FaultServer(mirror) as srv:
        srv.faults["/download/9TMP.cif.gz"] = "503"
        yield srv


@pytest.fixture(scope="module")
def bad_run(server: FaultServer, tmp_path_factory):
    require_tool("mmseqs")
    workdir = tmp_path_factory.mktemp("badinput") / "work"
    workdir.mkdir()
    config = yaml.safe_load((REPO_ROOT / "tests" / "tiny_config.yaml").read_text())
    entries = [*GOOD, *[k for k in EXPECTED if k not in GOOD], "1crn"]
    # the full-PDB shard keys: one ingest job per divided-layout key (the demo config has one shard)
    config["pdb"] = {"entries": entries, "source": server.url, "shard_chars": 2}
    config["fetch"] = {"timeout_s": 5, "retries": 1, "backoff_s": 0.01, "max_bytes": MAX_BYTES}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(workdir, "--keep-going", "results/failures.tsv", "data/raw/manifest.tsv")
    assert result.returncode == 0, result.stderr[-6000:]
    report = pd.read_csv(workdir / "results/failures.tsv", sep="\t", dtype=str, keep_default_na=False)
    return workdir, result, report


@pytest.mark.slow
@pytest.mark.parametrize("item", list(EXPECTED))
def test_each_bad_input_has_its_line_in_the_report(item: str, bad_run) -> None:
    _workdir, _result, report = bad_run
    stage, pattern = EXPECTED[item]
    rows = report[report["key"] == item]
    assert len(rows) == 1, report.to_string()
    row = rows.iloc[0]
    assert row["stage"] == stage and item in row["reason"], row.to_dict()
    assert pd.Series([row["reason"]]).str.contains(pattern).all(), row["reason"]


@pytest.mark.slow
def test_report_lists_exactly_the_bad_inputs_one_line_each(bad_run) -> None:
    workdir, _result, report = bad_run
    assert list(report.columns) == ["stage", "key", "reason"]
    assert sorted(report["key"]) == sorted(EXPECTED)
    lines = (workdir / "results/failures.tsv").read_text().splitlines()
    assert len(lines) == 1 + len(EXPECTED)  # one line per failure, no embedded newlines


@pytest.mark.slow
def test_bad_ids_are_warned_at_load_and_never_become_paths(bad_run) -> None:
    workdir, result, _report = bad_run
    assert "pdb.entries item '../x' skipped" in result.stderr and "pdb.entries item '12345' skipped" in result.stderr
    every = [p.relative_to(workdir).as_posix() for p in workdir.rglob("*")]
    assert not [p for p in every if "12345" in p or p.endswith(("/x.json", "/x.cif.gz", "/x.npz"))]
    assert sorted(p.name for p in workdir.parent.iterdir()) == ["work"]  # nothing written beside it


@pytest.mark.slow
def test_failed_fetches_store_no_structure_and_a_failed_record(bad_run) -> None:
    workdir, _result, _report = bad_run
    for entry in FETCH_FAILED:
        record = json.loads((workdir / f"data/raw/{entry}.json").read_text())
        assert record["status"] == "failed" and entry in record["reason"]
        assert record["transient"] is (entry == "9tmp")
        assert not (workdir / f"data/raw/{entry}.cif.gz").exists()
        parsed = json.loads((workdir / f"data/parsed/{entry}.json").read_text())
        assert (parsed["status"], parsed["failed_stage"]) == ("failed", "fetch")
    leftovers = [p.name for p in (workdir / "data").rglob("*") if ".tmp" in p.name]
    assert leftovers == []


@pytest.mark.slow
def test_the_rest_of_the_run_finished(bad_run) -> None:
    workdir, _result, _report = bad_run
    manifest = pd.read_csv(workdir / "data/raw/manifest.tsv", sep="\t")
    assert sorted(manifest["entry"]) == sorted([*GOOD, "9lig", "9dna", "9unk"])
    table = pd.read_parquet(workdir / "data/chains.parquet")
    kept = set(table.loc[table["passed_filters"], "entry"])
    assert kept <= set(GOOD) and len(kept) >= len(GOOD) - 1  # a date/cluster drop may remove one
    assert set(table["entry"]) == {*GOOD, "9dna", "9unk"}
    for path in (workdir / "data/failures").rglob("*.json"):
        record = json.loads(path.read_text())
        assert path == workdir / "data/failures" / record["stage"] / f"{record['key']}.json"


@pytest.mark.slow
def test_transient_failure_is_retried_by_the_next_run_only(bad_run, server: FaultServer) -> None:
    workdir, _result, _report = bad_run
    dry = snakemake(workdir, "-n", "results/failures.tsv")
    assert dry.returncode == 0, dry.stderr[-3000:]
    text = dry.stdout + dry.stderr
    fetch_jobs = [line for line in text.splitlines() if line.startswith("Shell command: python -m foldworks.shards fetch ")]
    assert len(fetch_jobs) == 1 and "--key tm --items 9tmp " in fetch_jobs[0], text[-3000:]  # its shard only
    assert "Params have changed since last execution" in text
    hits_before = server.hits["/download/9TMP.cif.gz"]
    del server.faults["/download/9TMP.cif.gz"]  # the outage is over
    rerun = snakemake(workdir, "--keep-going", "results/failures.tsv")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert server.hits["/download/9TMP.cif.gz"] == hits_before + 1
    assert server.hits["/download/9NF0.cif.gz"] == 1  # permanent failures are not retried
    assert json.loads((workdir / "data/raw/9tmp.json").read_text())["status"] == "ok"
    report = pd.read_csv(workdir / "results/failures.tsv", sep="\t", dtype=str, keep_default_na=False)
    assert sorted(report["key"]) == sorted(k for k in EXPECTED if k != "9tmp")
    assert not (workdir / "data/failures/fetch/9tmp.json").exists()
    assert "9tmp" in set(pd.read_parquet(workdir / "data/chains.parquet")["entry"])
    again = snakemake(workdir, "-n", "results/failures.tsv")
    assert "Nothing to be done" in again.stdout + again.stderr, (again.stdout + again.stderr)[-3000:]


@pytest.mark.slow
def test_entry_list_follows_the_set_of_entries(bad_run, server: FaultServer) -> None:
    """data/raw/entries.txt (what chains, fetch_manifest and failures_report read instead of one
    argument per entry): the valid IDs, sorted; the same set in another order changes nothing;
    a removed entry reruns exactly the list and the rules over all entries, which then leave it out."""
    workdir, _result, _report = bad_run
    server.faults.pop("/download/9TMP.cif.gz", None)  # the outage is over (if the test above did not run)
    settle = snakemake(workdir, "--keep-going", "results/failures.tsv", "data/raw/manifest.tsv")
    assert settle.returncode == 0, settle.stderr[-3000:]
    listing = workdir / "data/raw/entries.txt"
    valid = sorted({*GOOD, *(k for k in EXPECTED if len(k) == 4 and k[0].isdigit())})
    assert listing.read_text() == "".join(f"{e}\n" for e in valid)
    config_path = workdir / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    original = list(config["pdb"]["entries"])
    mtime = listing.stat().st_mtime_ns
    config["pdb"]["entries"] = [e.upper() if e == "1aki" else e for e in reversed(original)]  # same set
    config_path.write_text(yaml.safe_dump(config))
    same = snakemake(workdir, "-n", "results/failures.tsv", "data/raw/manifest.tsv")
    assert "Nothing to be done" in same.stdout + same.stderr, (same.stdout + same.stderr)[-3000:]
    config["pdb"]["entries"] = [e for e in original if e != "1fki"]
    config_path.write_text(yaml.safe_dump(config))
    rerun = snakemake(workdir, "--keep-going", "results/failures.tsv", "data/raw/manifest.tsv")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    ran = set(re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):$", rerun.stdout + rerun.stderr, flags=re.M))
    assert ran == {"entry_list", "fetch_manifest", "chains", "failures_report"}, ran
    assert listing.read_text() == "".join(f"{e}\n" for e in valid if e != "1fki") and listing.stat().st_mtime_ns > mtime
    assert "1fki" not in set(pd.read_csv(workdir / "data/raw/manifest.tsv", sep="\t")["entry"])
    assert "1fki" not in set(pd.read_parquet(workdir / "data/chains.parquet")["entry"])
    again = snakemake(workdir, "-n", "results/failures.tsv", "data/raw/manifest.tsv")
    assert "Nothing to be done" in again.stdout + again.stderr, (again.stdout + again.stderr)[-3000:]
    config["pdb"]["entries"] = original
    config_path.write_text(yaml.safe_dump(config))


# ---------------------------------------------------------------- the pieces, without Snakemake


@pytest.mark.parametrize("stage, key", [("fetch", "../x"), ("fetch", "a/b"), ("fetch", ".hidden"), ("fetch", ""),
                                        ("Fetch", "1abc"), ("../fetch", "1abc"), ("fetch", "x" * 129)])
def test_failure_paths_refuse_path_characters(stage: str, key: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="failure (stage|key)"):
        failures.record_failure(stage, key, "boom", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_records_are_gathered_filtered_and_cleared(tmp_path: Path) -> None:
    root = tmp_path / "failures"
    failures.record_failure("fetch", "1abc", "entry 1abc not found at X\nsecond line", root)
    failures.record_failure("fetch", "9old", "entry 9old: removed from the config since", root)
    failures.record_failure("msa", "0123456789abcdef0123", "msa 0123456789abcdef0123: hhblits timed out", root)
    failures.record_failure("features", "1abc_A", "features 1abc_A: \tbad a3m", root)
    (root / "fetch" / ".1abc.json.x1.tmp").write_text("{")  # a temp left by a killed writer
    rows = failures.build_report(root, entries=["1abc"], extra=[{"stage": "input", "key": "../x", "reason": "bad"}])
    assert [(r["stage"], r["key"]) for r in rows] == [
        ("features", "1abc_A"), ("fetch", "1abc"), ("input", "../x"), ("msa", "0123456789abcdef0123")]
    assert rows[1]["reason"] == "entry 1abc not found at X" and rows[0]["reason"] == "features 1abc_A: bad a3m"
    assert failures.clear_failure("fetch", "1abc", root) and not failures.clear_failure("fetch", "1abc", root)
    assert "1abc" not in {r["key"] for r in failures.build_report(root, entries=["1abc"])}


def test_report_is_one_line_per_failure_and_rewritten_only_on_change(tmp_path: Path) -> None:
    out = tmp_path / "results" / "failures.tsv"
    rows = [{"stage": "fetch", "key": "1abc", "reason": "a\treason\nwith breaks"}]
    assert failures.write_report(failures.merge_rows(rows), out)
    assert out.read_text() == "stage\tkey\treason\nfetch\t1abc\ta reason with breaks\n"
    mtime = out.stat().st_mtime_ns
    assert not failures.write_report(failures.merge_rows(rows), out) and out.stat().st_mtime_ns == mtime


def test_failures_cli(tmp_path: Path) -> None:
    root = tmp_path / "data" / "failures"
    failures.record_failure("parse", "1abc", "entry 1abc: ParseError: no polymer chains", root)
    failures.record_failure("parse", "2abc", "entry 2abc: not in this run", root)
    extra = json.dumps([{"stage": "input", "key": "12345", "reason": "pdb.entries item '12345' skipped"}])
    result = subprocess.run([sys.executable, "-m", "foldworks.failures", "--root", str(root), "--out",
                             str(tmp_path / "failures.tsv"), "--records", "data/raw/1abc.json", "--extra", extra],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = pd.read_csv(tmp_path / "failures.tsv", sep="\t", dtype=str)
    assert report.values.tolist() == [["input", "12345", "pdb.entries item '12345' skipped"],
                                      ["parse", "1abc", "entry 1abc: ParseError: no polymer chains"]]


def test_failures_cli_takes_the_run_entries_from_a_list_file(tmp_path: Path) -> None:
    root = tmp_path / "data" / "failures"
    failures.record_failure("parse", "1abc", "entry 1abc: ParseError: no polymer chains", root)
    failures.record_failure("parse", "2abc", "entry 2abc: not in this run", root)
    listing = tmp_path / "entries.txt"
    listing.write_text("1abc\n3abc\n")
    cmd = [sys.executable, "-m", "foldworks.failures", "--root", str(root), "--out", str(tmp_path / "failures.tsv")]
    result = subprocess.run([*cmd, "--entries", str(listing)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = pd.read_csv(tmp_path / "failures.tsv", sep="\t", dtype=str)
    assert report.values.tolist() == [["parse", "1abc", "entry 1abc: ParseError: no polymer chains"]]
    listing.write_text("1abc\n1abc\n")
    bad = subprocess.run([*cmd, "--entries", str(listing)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "line 2: entry 1abc listed twice" in bad.stderr


def test_extra_argument_stays_within_its_byte_bound() -> None:
    """Refused pdb.entries items go into one shell argument: its quoted size is bounded however
    many there are and whatever they hold (a quote costs 5 bytes once shell-quoted)."""
    rows = [{"stage": "input", "key": f"x{i:04d}", "reason": f"pdb.entries item {chr(39) * 30}{i} skipped"}
            for i in range(3000)]
    text = failures.extra_argument(rows, max_bytes=20_000)
    kept = json.loads(text)
    assert len(shlex.quote(text)) <= 20_000 < len(shlex.quote(json.dumps(rows)))
    assert kept[:-1] == rows[: len(kept) - 1] and len(kept) > 50
    assert kept[-1] == {"stage": "input", "key": "~more", "reason": f"{len(rows) - len(kept) + 1} more; see the workflow log"}
    assert json.loads(failures.extra_argument(rows[:3])) == rows[:3]
    assert failures.extra_argument(rows[2::-1]) == failures.extra_argument(rows[:3])  # order-free: no rerun


def test_entry_list_file_is_sorted_and_rewritten_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "raw" / "entries.txt"
    assert entrylist.write_entry_list(["1ubq", "1AKI", "1crn", "1aki"], path).endswith("3 entries (sha256 "
        f"{entrylist.entry_list_digest(['1aki', '1crn', '1ubq'])}) written")
    assert path.read_text() == "1aki\n1crn\n1ubq\n"
    assert entrylist.entry_list_digest(["1ubq", "1crn", "1aki"]) == entrylist.entry_list_digest(["1aki", "1crn", "1ubq"])
    mtime = path.stat().st_mtime_ns
    assert entrylist.write_entry_list(["1crn", "1ubq", "1aki"], path).endswith("unchanged")
    assert path.stat().st_mtime_ns == mtime and [p.name for p in path.parent.iterdir()] == ["entries.txt"]
    assert entrylist.read_entry_list(path) == ["1aki", "1crn", "1ubq"]
    for text, message in (("", "no entries"), ("1aki\n\n1crn\n", r"line 2: '' is not"),
                          ("1aki \n", r"line 1: '1aki ' is not"), ("1aki\n1aki\n", "line 2: entry 1aki listed twice")):
        path.write_text(text)
        with pytest.raises(entrylist.EntryListError, match=message):
            entrylist.read_entry_list(path)
    with pytest.raises(entrylist.EntryListError, match="unreadable"):
        entrylist.read_entry_list(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="not a 4-character PDB ID"):
        entrylist.write_entry_list(["1aki", "../x"], path)


def test_entry_list_skips_and_reports_bad_items(tmp_path: Path) -> None:
    listing = tmp_path / "entries.txt"
    listing.write_text("# header\n1AKI\n../x   # path characters\n\n12345\n1aki\n1crn\nab c\n")
    result = load_entries(str(listing), tmp_path)
    assert result.entries == ["1aki", "1crn"]
    assert [(p["key"], p["reason"].split(": ", 1)[0]) for p in result.problems] == [
        ("../x", "pdb.entries item '../x' skipped"), ("12345", "pdb.entries item '12345' skipped"),
        ("ab?c", "pdb.entries item 'ab?c' skipped"), ("1aki", "entry 1aki listed 2 times in pdb.entries; used once")]
    with pytest.raises(ValueError, match="no valid PDB ID among 2 item"):
        load_entries(["../x", "1"], tmp_path)
    with pytest.raises(ValueError, match="file 'missing.txt' not found"):
        load_entries("missing.txt", tmp_path)


@pytest.mark.parametrize("source, ok", [
    ("https://files.rcsb.org/download", True), ("http://127.0.0.1:8080/download", True),
    ("../shared/pdb_mirror", True), ("/work/shared/pdb_mirror", True),
    ("https://x.org/d; rm -rf ~", False), ("-rf", False), ("file:///etc", False), ("ftp://host/pub", False),
    ("a dir with spaces", False), ("$(touch /tmp/pwned)", False), ("https://x.org/`id`", False),
])
def test_config_strings_that_become_paths_or_arguments_are_checked_at_load(source: str, ok: bool) -> None:
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    schema = str(REPO_ROOT / "workflow/schemas/config.schema.yaml")
    config = {"pdb": {"entries": ["1aki"], "source": source}, "experiments": {"e": {"model": "distogram"}}}
    if ok:
        validate(config, schema)
    else:
        with pytest.raises(WorkflowError, match="does not match"):
            validate(config, schema)
    entries_file = {"pdb": {"entries": "-rf", "source": "/data"}, "experiments": {"e": {"model": "distogram"}}}
    with pytest.raises(WorkflowError):
        validate(entries_file, schema)
