"""Shards (foldworks.shards): keys, manifests, and content addressing inside a shard job.

The fetch and parse shard CLIs run for real on mirror entries (a local copy of three mirror
files, so one can be changed); no Snakemake here (the workflow tests cover the DAG).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from foldworks.shards import (ALL_ENTRIES_KEY, SHORT_KEY_ENTRY_LIMITS, Row, entry_shard, file_sha256, fetch_attempt_token, group_entries,
                              read_attempt, read_manifest, sequence_shard, shard_size_note, write_manifest)
from foldworks.shards.__main__ import main as shard_main
from foldworks.shards.prune import current_key_chars, prune_stale_manifests, summary
from foldworks.shards.prune import main as prune_main
from foldworks.shards.run import partial_path, run_items, state_path
from foldworks.shards.run import Plan
from foldworks.shards.stages.fetch import shard_source_stamp, source_fingerprint

ENTRIES = ["1crn", "1cbn", "1aki"]  # shards "cr", "cb", "ak"


def test_keys_follow_the_divided_layout_and_hash_prefix():
    assert entry_shard("1ABC") == "ab"
    assert group_entries(["2abd", "1abc", "1xyz"]) == {"ab": ["1abc", "2abd"], "xy": ["1xyz"]}
    assert sequence_shard("0123456789abcdef0123") == "01"  # SEQ_SHARD_CHARS, the module default
    assert sequence_shard("0123456789abcdef0123", 3) == "012"
    with pytest.raises(ValueError):
        sequence_shard("../etc")


def test_one_character_entry_keys_are_the_first_of_the_middle_two():
    """`pdb.shard_chars: 1` (small runs): 1abc -> a, so a key is one group of divided-layout dirs."""
    assert entry_shard("1ABC", 1) == "a"
    assert group_entries(["2abd", "1axy", "1xyz"], 1) == {"a": ["1axy", "2abd"], "x": ["1xyz"]}
    for bad in (-1, 3):
        with pytest.raises(ValueError):
            group_entries(["1abc"], bad)


def test_zero_characters_make_one_shard_of_every_entry():
    assert entry_shard("1ABC", 0) == ALL_ENTRIES_KEY == "all"
    assert group_entries(["2abd", "1axy", "1xyz"], 0) == {"all": ["1axy", "1xyz", "2abd"]}


def test_short_keys_warn_only_for_large_runs():
    assert shard_size_note(SHORT_KEY_ENTRY_LIMITS[1], 1) is None
    assert shard_size_note(SHORT_KEY_ENTRY_LIMITS[0], 0) is None
    assert shard_size_note(230_000, 2) is None
    note = shard_size_note(230_000, 1)
    assert "230,000 entries" in note and "~6,388 each" in note and "pdb.shard_chars: 2 " in note
    note = shard_size_note(5_000, 0)
    assert "5,000 entries into one shard" in note and "pdb.shard_chars: 1 or 2 " in note


def test_manifest_is_rewritten_only_when_its_content_changes(tmp_path):
    path = tmp_path / "shards" / "ab.tsv"
    rows = [Row("1abc", "ok", "i1", "s1", "o1"), Row("1abd", "failed", "i2", "s1", "none", "entry 1abd: bad\tfile")]
    assert write_manifest(path, rows, "first")
    before = path.stat().st_mtime_ns
    assert not write_manifest(path, list(reversed(rows)), "first")  # same content, any order
    assert path.stat().st_mtime_ns == before
    attempt, read = read_attempt(path)
    assert attempt == "first" and read["1abd"].reason == "entry 1abd: bad file"
    assert write_manifest(path, rows[:1], "first") and list(read_manifest(path)) == ["1abc"]


def test_attempt_token_is_stable_unless_an_item_failed_transiently(tmp_path):
    path = tmp_path / "ab.tsv"
    assert fetch_attempt_token(path) == "first"
    write_manifest(path, [Row("1abc", "ok", "i", "s", "o")], "first")
    assert fetch_attempt_token(path) == "first"
    write_manifest(path, [Row("1abc", "transient", "i", "s", "o1")], "first")
    retry = fetch_attempt_token(path)
    assert retry.startswith("retry-")
    write_manifest(path, [Row("1abc", "transient", "i", "s", "o2")], retry)  # failed again: new token
    assert fetch_attempt_token(path) not in (retry, "first")
    write_manifest(path, [Row("1abc", "ok", "i", "s", "o3")], retry)  # recovered: the token it ran with
    assert fetch_attempt_token(path) == retry


def _counting_plan(tmp_path: Path, inputs: dict[str, str], calls: list[str]):
    def plan_of(item: str) -> Plan:
        out = tmp_path / "out" / f"{item}.txt"

        def compute():
            calls.append(item)
            if inputs[item] == "boom":
                raise RuntimeError("bad input")
            out.parent.mkdir(exist_ok=True)
            out.write_text(inputs[item])
            return "ok", inputs[item], ""

        return Plan(inputs[item], [str(out)], compute)

    return plan_of


def test_run_items_recomputes_only_changed_items_and_survives_a_bad_one(tmp_path):
    manifest = str(tmp_path / "shards" / "ab.tsv")
    inputs, calls = {"a": "1", "b": "2", "c": "boom"}, []
    counts = run_items("demo", "ab", ["a", "b", "c"], manifest, "stamp1", _counting_plan(tmp_path, inputs, calls),
                       failures_dir=str(tmp_path / "failures"))
    assert (counts.computed, counts.failed) == (3, 1) and calls == ["a", "b", "c"]
    rows = read_manifest(manifest)
    assert rows["c"].status == "failed" and "bad input" in rows["c"].reason
    assert json.loads((tmp_path / "failures/demo/c.json").read_text())["stage"] == "demo"
    mtime = (tmp_path / "out/a.txt").stat().st_mtime_ns

    os.unlink(manifest)  # Snakemake removes a job's outputs before rerunning it: the state copy remains
    inputs.update(b="2b", c="3")
    calls.clear()
    counts = run_items("demo", "ab", ["a", "b", "c"], manifest, "stamp1", _counting_plan(tmp_path, inputs, calls))
    assert calls == ["b", "c"] and counts.kept == 1
    assert (tmp_path / "out/a.txt").stat().st_mtime_ns == mtime, "an unchanged item is not touched"
    assert state_path(manifest).read_text() == Path(manifest).read_text()
    assert not partial_path(manifest).exists()

    calls.clear()
    run_items("demo", "ab", ["a", "b", "c"], manifest, "stamp2", _counting_plan(tmp_path, inputs, calls))
    assert calls == ["a", "b", "c"], "a new code/params stamp recomputes every item"


def test_partial_rows_of_a_killed_job_are_reused(tmp_path):
    manifest = tmp_path / "shards" / "ab.tsv"
    manifest.parent.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out/a.txt").write_text("1")
    partial_path(manifest).write_text(Row("a", "ok", "1", "s", "1").line() + "\n")  # a killed run did "a"
    calls: list[str] = []
    run_items("demo", "ab", ["a", "b"], str(manifest), "s", _counting_plan(tmp_path, {"a": "1", "b": "2"}, calls))
    assert calls == ["b"]


def _fetch(tmp_path: Path, mirror: Path, key: str, entries: list[str]) -> int:
    return shard_main(["fetch", "--key", key, "--items", ",".join(entries), "--manifest",
                       str(tmp_path / f"data/raw/shards/{key}.tsv"), "--source", str(mirror), "--code", "c1",
                       "--records-dir", str(tmp_path / "data/raw"), "--failures-dir", str(tmp_path / "data/failures")])


def test_fetch_and_parse_shards_redo_only_the_changed_mirror_entry(tmp_path, pdb_mirror):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for entry in ("1crn", "1aki"):
        shutil.copy2(pdb_mirror / f"{entry}.cif.gz", mirror)
    (mirror / "1ckx.cif.gz").write_bytes(b"<html>not a structure</html>")  # a bad entry in the same shard
    raw = tmp_path / "data/raw"
    assert _fetch(tmp_path, mirror, "ck", ["1ckx"]) == 0
    assert _fetch(tmp_path, mirror, "cr", ["1crn"]) == 0
    rows = read_manifest(raw / "shards/ck.tsv")
    assert rows["1ckx"].status == "failed" and "1ckx" in rows["1ckx"].reason
    assert (tmp_path / "data/failures/fetch/1ckx.json").exists()

    parse = ["parse", "--key", "cr", "--items", "1crn", "--manifest", str(tmp_path / "data/parsed/shards/cr.tsv"),
             "--fetch-manifest", str(raw / "shards/cr.tsv"), "--records-dir", str(raw),
             "--parsed-dir", str(tmp_path / "data/parsed"), "--failures-dir", str(tmp_path / "data/failures")]
    assert shard_main(parse) == 0
    parsed = read_manifest(tmp_path / "data/parsed/shards/cr.tsv")["1crn"]
    assert parsed.status == "ok"
    npz = tmp_path / "data/parsed/1crn.npz"
    record_mtime, npz_mtime = (raw / "1crn.json").stat().st_mtime_ns, npz.stat().st_mtime_ns

    stamp = shard_source_stamp(str(mirror), ["1crn"])
    record_sha = file_sha256(raw / "1crn.json")
    assert _fetch(tmp_path, mirror, "cr", ["1crn"]) == 0 and shard_main(parse) == 0  # nothing changed
    assert (raw / "1crn.json").stat().st_mtime_ns == record_mtime and npz.stat().st_mtime_ns == npz_mtime

    os.utime(mirror / "1crn.cif.gz", None)  # the mirror's file changed: the rule's param changes ...
    assert shard_source_stamp(str(mirror), ["1crn"]) != stamp
    assert _fetch(tmp_path, mirror, "cr", ["1crn"]) == 0  # ... and the shard refetches it
    assert (raw / "1crn.json").stat().st_mtime_ns != record_mtime
    # parse follows the record's content: reparsed only if the record changed (its fetch time has
    # 1 s resolution, so a refetch within the same second writes an identical record)
    record_changed = file_sha256(raw / "1crn.json") != record_sha
    assert shard_main(parse) == 0
    assert (npz.stat().st_mtime_ns != npz_mtime) == record_changed


@pytest.mark.parametrize("key, items", [("ab", "1abc,1xyz"), ("a", "1abc,1xyz"), ("abc", "1abc")])
def test_cli_refuses_items_outside_the_shard(tmp_path, key, items):
    with pytest.raises(SystemExit):
        shard_main(["fetch", "--key", key, "--items", items, "--manifest", str(tmp_path / "m.tsv"),
                    "--source", str(tmp_path)])


def test_one_character_shard_fetches_every_entry_of_its_key(tmp_path, pdb_mirror):
    """Key ``c`` holds 1crn and 1cyo (divided-layout dirs cr and cy): one job fetches both."""
    assert _fetch(tmp_path, pdb_mirror, "c", ["1crn", "1cyo"]) == 0
    rows = read_manifest(tmp_path / "data/raw/shards/c.tsv")
    assert {item: row.status for item, row in rows.items()} == {"1crn": "ok", "1cyo": "ok"}


def test_renamed_shard_reuses_items_of_the_other_key_length(tmp_path, pdb_mirror):
    """After `pdb.shard_chars` 2 -> 1, shard ``c`` keeps 1crn as fetched under ``cr`` (same input,
    stamp and outputs: not refetched) and fetches only 1cyo; back to 2, ``cy`` keeps 1cyo; with 0,
    the one shard ``all`` keeps both and fetches only 1aki."""
    assert _fetch(tmp_path, pdb_mirror, "cr", ["1crn"]) == 0
    record = tmp_path / "data/raw/1crn.json"
    before = record.stat().st_mtime_ns
    assert _fetch(tmp_path, pdb_mirror, "c", ["1crn", "1cyo"]) == 0
    assert record.stat().st_mtime_ns == before, "1crn was refetched"
    assert read_manifest(tmp_path / "data/raw/shards/c.tsv").keys() == {"1crn", "1cyo"}
    cyo = tmp_path / "data/raw/1cyo.json"
    cyo_before = cyo.stat().st_mtime_ns
    assert _fetch(tmp_path, pdb_mirror, "cy", ["1cyo"]) == 0
    assert cyo.stat().st_mtime_ns == cyo_before, "1cyo was refetched"
    assert _fetch(tmp_path, pdb_mirror, "all", ["1aki", "1crn", "1cyo"]) == 0  # pdb.shard_chars: 0
    assert record.stat().st_mtime_ns == before and cyo.stat().st_mtime_ns == cyo_before
    assert read_manifest(tmp_path / "data/raw/shards/all.tsv")["1aki"].status == "ok"
    # a changed stamp (other fetch code) still recomputes, whatever manifest the row came from
    assert shard_main(["fetch", "--key", "c", "--items", "1crn", "--manifest", str(tmp_path / "data/raw/shards/c.tsv"),
                       "--source", str(pdb_mirror), "--code", "c2", "--records-dir", str(tmp_path / "data/raw"),
                       "--failures-dir", str(tmp_path / "data/failures")]) == 0
    assert record.stat().st_mtime_ns != before, "a new fetch code must refetch"


@pytest.mark.parametrize("relative", ["mirror", "mirror/", "./mirror", "."])
def test_source_fingerprint_names_the_file_as_pathlib_does(tmp_path, monkeypatch, relative):
    """The fetch rule's `mirror` param is computed with plain strings for speed: the recorded
    paths must stay exactly ``str(Path(source) / ...)`` (flat, then divided layout; either case),
    or every existing run's fetch shards would look changed."""
    monkeypatch.chdir(tmp_path)
    base = tmp_path / "mirror" if relative != "." else tmp_path
    (base / "cr").mkdir(parents=True)
    (base / "1abc.cif.gz").write_bytes(b"x")
    (base / "cr" / "1CRN.pdb.gz").write_bytes(b"yy")
    source = relative
    for entry, path in (("1abc", Path(source) / "1abc.cif.gz"), ("1crn", Path(source) / "cr" / "1CRN.pdb.gz")):
        stat = path.stat()
        assert source_fingerprint(source, entry) == f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    assert source_fingerprint(source, "2xyz") == "missing"
    assert source_fingerprint("https://files.rcsb.org/download", "1abc") == "url"
    assert shard_source_stamp(source, ["1abc"]) != shard_source_stamp(source, ["2xyz"])


@pytest.mark.parametrize("layout", ["divided", "mixed"])
def test_shard_stamp_is_the_digest_of_the_fingerprints_in_either_layout(tmp_path, layout):
    """A mirror without flat entry files is stamped with one `stat` per entry (divided path
    first); the stamp must equal the digest of :func:`source_fingerprint` in every layout, and in
    a mixed mirror the flat file still wins for an entry stored both ways."""
    from foldworks.shards import sha256_bytes

    mirror = tmp_path / "m"
    for entry in ("1abc", "2abd", "1xyz"):
        (mirror / entry[1:3]).mkdir(parents=True, exist_ok=True)
        (mirror / entry[1:3] / f"{entry}.cif.gz").write_bytes(entry.encode())
    if layout == "mixed":
        (mirror / "1abc.cif.gz").write_bytes(b"flat copy")
        assert source_fingerprint(str(mirror), "1abc").startswith(f"{mirror}/1abc.cif.gz:")
    entries = ["1abc", "2abd", "1xyz", "9zzz"]
    expected = sha256_bytes(*(source_fingerprint(str(mirror), e) for e in entries))[:16]
    assert shard_source_stamp(str(mirror), entries) == expected
    (mirror / "ab" / "2abd.cif.gz").write_bytes(b"changed content")
    assert shard_source_stamp(str(mirror), entries) != expected


def _rows(*items: str) -> list[Row]:
    return [Row(item, "ok", "0" * 64, "0" * 16, "0" * 64) for item in items]


@pytest.mark.parametrize("old_key, new_keys, chars", [
    ("all", ("ab", "cr"), 2),  # pdb.shard_chars 0 -> 2: all.tsv's entries are spread over ab, cr
    ("cr", ("c",), 1),         # 2 -> 1
    ("c", ("all",), 0),        # 1 -> 0
])
def test_prune_removes_an_old_length_manifest_once_every_item_has_moved(tmp_path, old_key, new_keys, chars):
    shards = tmp_path / "shards"
    old = shards / f"{old_key}.tsv"
    write_manifest(old, _rows("1abc", "1crn") if old_key == "all" else _rows("1crn"))
    write_manifest(state_path(old), read_manifest(old).values())
    partial_path(old).write_text("")
    assert prune_stale_manifests(shards, chars).kept == {old: 2 if old_key == "all" else 1}  # nothing moved yet
    assert old.exists()
    for key in new_keys:
        write_manifest(shards / f"{key}.tsv", _rows("1abc" if key == "ab" else "1crn"))
    report = prune_stale_manifests(shards, chars, dry_run=True)
    assert report.removed == [old] and old.exists(), "a dry run removed the manifest"
    report = prune_stale_manifests(shards, chars)
    assert report.removed == [old] and report.kept == {}
    assert not old.exists() and not state_path(old).exists() and not partial_path(old).exists()
    assert sorted(p.name for p in shards.iterdir()) == sorted(f"{key}.tsv" for key in new_keys)


def test_prune_keeps_an_old_manifest_with_an_entry_no_current_shard_holds(tmp_path):
    """1zzz left the run (or its shard has not run yet): its old row may still be reused, so ``z.tsv``
    stays; ``cr.tsv`` (every entry under ``c`` now) goes."""
    shards = tmp_path / "shards"
    write_manifest(shards / "cr.tsv", _rows("1crn"))
    write_manifest(shards / "zz.tsv", _rows("1zzz"))
    write_manifest(shards / "c.tsv", _rows("1crn", "1cyo"))
    report = prune_stale_manifests(shards, 1)
    assert report.removed == [shards / "cr.tsv"] and report.kept == {shards / "zz.tsv": 1}
    line = summary({"data/raw": report})
    assert "removed 1 manifest(s)" in line and "zz.tsv (1 item not" in line
    assert prune_stale_manifests(tmp_path / "absent", 2).removed == []


@pytest.mark.parametrize("tool, expected", [("hhblits", 3), ("mmseqs", 1)])
def test_prune_follows_the_config_key_lengths_of_each_stage(tool, expected):
    config = {"pdb": {"shard_chars": 0}, "msa": {"tool": tool, "shard_chars": 3, "mmseqs": {"shard_chars": 1}}}
    assert current_key_chars(config) == {"data/raw": 0, "data/parsed": 0, "data/features": 0, "data/msa": expected}


def test_fetch_after_prune_refetches_nothing(tmp_path, pdb_mirror):
    """2 -> 1 on real mirror entries: once shard ``c`` ran, ``cr.tsv`` is pruned, and rerunning ``c``
    keeps 1crn from its own manifest."""
    assert _fetch(tmp_path, pdb_mirror, "cr", ["1crn"]) == 0
    assert _fetch(tmp_path, pdb_mirror, "c", ["1crn", "1cyo"]) == 0
    shards, record = tmp_path / "data/raw/shards", tmp_path / "data/raw/1crn.json"
    before = record.stat().st_mtime_ns
    assert prune_stale_manifests(shards, 1).removed == [shards / "cr.tsv"]
    assert _fetch(tmp_path, pdb_mirror, "c", ["1crn", "1cyo"]) == 0
    assert record.stat().st_mtime_ns == before, "1crn was refetched after the prune"


def test_prune_cli_follows_the_workflow_config(tmp_path, capsys):
    """The demo config (entry key `all`, 1-character msa keys): by hand, with and without --dry-run."""
    for name in ("config/config.yaml", "workflow/schemas/config.schema.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, tmp_path / name)
    raw, msa = tmp_path / "data/raw/shards", tmp_path / "data/msa/shards"
    write_manifest(raw / "all.tsv", _rows("1crn", "1aki"))
    write_manifest(raw / "cr.tsv", _rows("1crn"))
    write_manifest(raw / "zz.tsv", _rows("1zzz"))
    seq_hash = "0a" + "1" * 18
    write_manifest(msa / "0.tsv", _rows(seq_hash))
    write_manifest(msa / "0a.tsv", _rows(seq_hash))
    assert prune_main(["--repo", str(tmp_path), "--dry-run"]) == 0
    assert "would remove 1 manifest(s)" in capsys.readouterr().out and (raw / "cr.tsv").exists()
    assert prune_main(["--repo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "data/raw/shards: removed 1 manifest(s)" in out and "zz.tsv (1 item not" in out
    assert "data/msa/shards: removed 1 manifest(s)" in out
    assert sorted(p.name for p in raw.iterdir()) == ["all.tsv", "zz.tsv"] and [p.name for p in msa.iterdir()] == ["0.tsv"]
