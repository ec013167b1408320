"""Sources at scale: flat and wwPDB divided mirrors, ``pdb.entries: all``, wwPDB holdings served by a
real HTTP server on 127.0.0.1 (cache and refresh policy), release-date bounds, obsolete entries."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _fault_server import FaultServer
from conftest import REPO_ROOT, demo_entry_key, run_snakemake
from foldworks.fetch import fetch_entry
from foldworks.fetch import holdings as hold
from foldworks.fetch.mirror import list_mirror, manifest_release_dates
from foldworks.fetch.selection import date_verdict, resolve_entries

FAST = {"timeout_s": 5, "retries": 1, "backoff_s": 0.01}
RELEASED = {"1AKI": "2024-01-10T00:00:00+0000", "1UBQ": "2009-02-24T00:00:00+0000",
            "1CRN": "2011-07-13T00:00:00+0000", "pdb_00005pti": "2023-03-01T00:00:00+0000"}
REMOVED = {"1ABC": {"status_code": "OBS", "obsolete_date": "2005-01-12T00:00:00", "superseded_by": "2ABC"},
           "2ABC": {"status_code": "OBS", "obsolete_date": "2009-02-24T00:00:00", "superseded_by": ["1UBQ"]},
           "9OLD": {"status_code": "OBS", "obsolete_date": "1999-01-01T00:00:00"}}


def divided_tree(pdb_mirror: Path, root: Path, entries: dict[str, str]) -> Path:
    """``root/<xy>/<name>`` symlinks to mirror files: ``{name in the tree: mirror file name}``."""
    for name, source in entries.items():
        entry = name[3:7] if name.startswith("pdb") else name[:4]
        target = root / entry[1:3].lower() / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(pdb_mirror / source)
    return root


def write_holdings(directory: Path, released: dict = RELEASED, removed: dict = REMOVED) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hold.RELEASED).write_bytes(gzip.compress(json.dumps(released).encode()))
    (directory / hold.REMOVED).write_bytes(gzip.compress(json.dumps(removed).encode()))
    return directory


@pytest.fixture()
def holdings_server(tmp_path: Path):
    with FaultServer(write_holdings(tmp_path / "served")) as server:
        yield server


def hits(server: FaultServer) -> int:
    return sum(count for path, count in server.hits.items() if "holdings" in path or path.endswith(".json.gz"))


# ---------------------------------------------------------------- mirror layouts


def test_real_flat_mirror_is_listed_with_both_formats(pdb_mirror: Path) -> None:
    listing = list_mirror(pdb_mirror)
    assert listing.layout == "flat" and len(listing.entries) == 71
    assert listing.entries["1aki"] == "1aki.cif.gz" and listing.entries["1ckb"] == "1ckb.pdb.gz"
    assert manifest_release_dates(pdb_mirror) == {}  # its MANIFEST.tsv has no release_date column


def test_divided_mirror_is_detected_listed_and_fetched(pdb_mirror: Path, tmp_path: Path) -> None:
    tree = divided_tree(pdb_mirror, tmp_path / "divided", {
        "1aki.cif.gz": "1aki.cif.gz", "1UBQ.cif.gz": "1ubq.cif.gz", "pdb1ckb.ent.gz": "1ckb.pdb.gz"})
    (tree / "README").write_text("not an entry\n")
    (tree / "ak" / "notes.txt").write_text("not an entry\n")
    listing = list_mirror(tree)
    assert listing.layout == "divided"
    assert listing.entries == {"1aki": "ak/1aki.cif.gz", "1ckb": "ck/pdb1ckb.ent.gz", "1ubq": "ub/1UBQ.cif.gz"}
    for entry, fmt in (("1aki", "cif"), ("1ckb", "pdb"), ("1ubq", "cif")):
        result = fetch_entry(entry, str(tree), tmp_path / f"raw/{entry}.cif.gz", tmp_path / f"raw/{entry}.json", FAST)
        assert result.record["status"] == "ok" and result.record["source_format"] == fmt
        assert f"/{entry[1:3]}/" in result.record["url_or_path"]
    stored = (tmp_path / "raw/1aki.cif.gz").read_bytes()
    assert stored == (pdb_mirror / "1aki.cif.gz").read_bytes()


def test_mixed_layout_prefers_flat_and_mmcif(pdb_mirror: Path, tmp_path: Path) -> None:
    tree = divided_tree(pdb_mirror, tmp_path / "mixed", {"1aki.cif.gz": "1aki.cif.gz", "1ubq.pdb.gz": "1ubi.pdb.gz"})
    (tree / "1ubq.cif.gz").symlink_to(pdb_mirror / "1ubq.cif.gz")
    listing = list_mirror(tree)
    assert listing.layout == "mixed" and listing.entries == {"1aki": "ak/1aki.cif.gz", "1ubq": "1ubq.cif.gz"}
    with pytest.raises(ValueError, match="not a directory"):
        list_mirror(tmp_path / "nowhere")


# ---------------------------------------------------------------- selection from a mirror


def test_all_selects_every_mirror_entry_and_lists_report_absent_ones(pdb_mirror: Path, tmp_path: Path) -> None:
    tree = divided_tree(pdb_mirror, tmp_path / "m", {f"{e}.cif.gz": f"{e}.cif.gz" for e in ("1aki", "1ubq", "1crn")})
    every = resolve_entries({"entries": "all", "source": str(tree)}, tmp_path)
    assert every.entries == ["1aki", "1crn", "1ubq"] and every.problems == []
    assert "divided layout, 3 entries" in " ".join(every.notes)
    listed = resolve_entries({"entries": ["1UBQ", "9zzz", "../x", "1aki"], "source": str(tree)}, tmp_path)
    assert listed.entries == ["1ubq", "1aki"]
    reasons = {row["key"]: row["reason"] for row in listed.problems}
    assert set(reasons) == {"9zzz", "../x"} and all(row["stage"] == "input" for row in listed.problems)
    assert reasons["9zzz"] == f"entry 9zzz is not in the mirror {tree} (obsolete, or not mirrored); left out"
    with pytest.raises(ValueError, match="no valid PDB ID"):
        resolve_entries({"entries": ["9zzz"], "source": str(tree)}, tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no <id>.cif.gz"):
        resolve_entries({"entries": "all", "source": str(tmp_path / "empty")}, tmp_path)


def test_manifest_release_dates_bound_the_selection(pdb_mirror: Path, tmp_path: Path) -> None:
    tree = divided_tree(pdb_mirror, tmp_path / "m", {f"{e}.cif.gz": f"{e}.cif.gz" for e in ("1aki", "1ubq", "1crn")})
    (tree / "MANIFEST.tsv").write_text("pdb_id\trelease_date\n1AKI\t1997-11-19\n1UBQ\t1987-01-15\n")
    pdb = {"entries": "all", "source": str(tree), "release_date_min": "1990-01-01", "release_date_max": "2021-09-30"}
    result = resolve_entries(pdb, tmp_path)
    assert result.entries == ["1aki", "1crn"]  # 1ubq too old; 1crn: no date here, kept for the chains filter
    assert "1 entries left out; 1 without a known release date kept" in " ".join(result.notes)
    assert result.problems == []  # a cutoff is a choice, not a failure
    with pytest.raises(ValueError, match="not a date"):
        resolve_entries({**pdb, "release_date_max": "2021-02-30"}, tmp_path)
    with pytest.raises(ValueError, match="is after"):
        resolve_entries({**pdb, "release_date_min": "2022-01-01"}, tmp_path)
    assert resolve_entries({**pdb, "release_date_max": dt.date(1995, 1, 1)}, tmp_path).entries == ["1crn"]


def test_date_verdict_uses_last_modified_only_as_an_upper_bound() -> None:
    assert date_verdict(None, "2009-02-24", "2010-01-01", None)  # modified before min: released before
    assert date_verdict(None, "2024-01-10", None, "2021-09-30") is None  # could have been released in 1997
    assert date_verdict("1997-11-19", "2024-01-10", None, "1990-01-01")
    assert date_verdict("1997-11-19", None, "1997-11-19", "1997-11-19") is None


# ---------------------------------------------------------------- holdings over HTTP


def test_all_from_holdings_is_cached_and_refreshed_by_policy(holdings_server: FaultServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pdb = {"entries": "all", "source": holdings_server.url, "holdings": holdings_server.url}
    first = resolve_entries(pdb, tmp_path, cache_dir=cache)
    assert first.entries == ["1aki", "1crn", "1ubq", "5pti"] and first.problems == []
    assert hits(holdings_server) == 2 and any("refreshed" in note for note in first.notes)
    meta = json.loads((cache / f"{hold.RELEASED}.meta.json").read_text())
    assert meta["entries"] == 4 and meta["url"] == f"{holdings_server.url}/{hold.RELEASED}"
    again = resolve_entries(pdb, tmp_path, cache_dir=cache)  # planning again: no network
    assert again.entries == first.entries and hits(holdings_server) == 2
    assert resolve_entries({**pdb, "holdings_max_age_days": None}, tmp_path, cache_dir=cache).entries
    assert hits(holdings_server) == 2
    resolve_entries({**pdb, "holdings_max_age_days": 0}, tmp_path, cache_dir=cache)
    assert hits(holdings_server) == 4
    # an old sidecar (as after a week) triggers a refresh; the file's mtime plays no part
    meta["fetched_at"] = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=8)).isoformat()
    for name in hold.FILES:
        (cache / f"{name}.meta.json").write_text(json.dumps({**meta, "url": f"{holdings_server.url}/{name}"}))
    resolve_entries(pdb, tmp_path, cache_dir=cache)
    assert hits(holdings_server) == 6
    bounded = resolve_entries({**pdb, "release_date_min": "2010-01-01"}, tmp_path, cache_dir=cache)
    assert bounded.entries == ["1aki", "1crn", "5pti"]  # 1ubq last modified 2009: released before 2010


def test_obsolete_listed_entries_are_reported_with_their_replacement(holdings_server: FaultServer,
                                                                     pdb_mirror: Path, tmp_path: Path) -> None:
    pdb = {"entries": ["1aki", "1abc", "9old", "9new"], "source": holdings_server.url, "holdings": holdings_server.url}
    result = resolve_entries(pdb, tmp_path, cache_dir=tmp_path / "cache")
    assert result.entries == ["1aki", "9new"]  # 9new: not in the (maybe week-old) holdings: fetch decides
    reasons = {row["key"]: row["reason"] for row in result.problems}
    assert reasons["1abc"] == ("entry 1abc is obsolete in the wwPDB holdings (status OBS on 2005-01-12); "
                               "superseded by 1ubq (add it to pdb.entries to use it)")
    assert reasons["9old"].endswith("(status OBS on 1999-01-01); no replacement entry")
    # a local mirror lacking an obsolete entry names the replacement too (holdings from a directory)
    local = resolve_entries({"entries": ["1aki", "1abc"], "source": str(pdb_mirror),
                             "holdings": str(holdings_server.mirror)}, tmp_path, cache_dir=tmp_path / "cache2")
    assert local.entries == ["1aki"] and "superseded by 1ubq" in local.problems[0]["reason"]


def test_holdings_outage_keeps_the_cache_and_fails_clearly_without_one(holdings_server: FaultServer,
                                                                       tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pdb = {"entries": "all", "source": holdings_server.url, "holdings": holdings_server.url,
           "holdings_max_age_days": 0}
    resolve_entries(pdb, tmp_path, cache_dir=cache)
    for name in hold.FILES:
        holdings_server.faults[f"/download/{name}"] = "404"
    kept = resolve_entries(pdb, tmp_path, cache_dir=cache)
    assert kept.entries == ["1aki", "1crn", "1ubq", "5pti"]
    assert any("keeping the cached copy" in note and "HTTP 404" in note for note in kept.notes)
    with pytest.raises(hold.HoldingsError, match=f"cannot download {holdings_server.url}/released"):
        resolve_entries(pdb, tmp_path, cache_dir=tmp_path / "fresh")
    holdings_server.faults.clear()
    holdings_server.faults[f"/download/{hold.RELEASED}"] = "not-mmcif"  # gzip of text, not JSON
    with pytest.raises(hold.HoldingsError, match="not gzipped JSON"):
        resolve_entries(pdb, tmp_path, cache_dir=tmp_path / "fresh")
    assert not (tmp_path / "fresh" / hold.RELEASED).exists()  # a bad download is never cached


def test_refresh_cli(holdings_server: FaultServer, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "foldworks.fetch.holdings", "--refresh", "--url", holdings_server.url,
           "--cache-dir", str(tmp_path / "cache")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "4 released, 3 removed entries" in done.stderr and hits(holdings_server) == 2
    bad = subprocess.run([*cmd[:5], str(tmp_path / "nowhere"), *cmd[6:]], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "cannot read" in bad.stderr  # an explicit refresh that fails says so
    assert json.loads((tmp_path / "cache" / f"{hold.RELEASED}.meta.json").read_text())["url"].startswith("http")


# ---------------------------------------------------------------- the workflow


def test_workflow_plans_all_entries_of_a_divided_mirror(pdb_mirror: Path, tmp_path: Path) -> None:
    tree = divided_tree(pdb_mirror, tmp_path / "m", {"1aki.cif.gz": "1aki.cif.gz", "1ubq.cif.gz": "1ubq.cif.gz",
                                                      "1ckb.pdb.gz": "1ckb.pdb.gz"})
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = yaml.safe_load((REPO_ROOT / "tests" / "tiny_config.yaml").read_text())
    config["pdb"] = {"entries": "all", "source": str(tree), "release_date_max": "2021-09-30"}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workdir, "-n", "data/raw/manifest.tsv", timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout + result.stderr
    assert "divided layout, 3 entries" in out and "0 entries left out; 3 without a known release date" in out
    for entry in ("1aki", "1ubq", "1ckb"):  # each in the item list of its ingest shard job
        key = demo_entry_key(entry)
        assert re.search(rf"fetch --key {key} --items [a-z0-9,]*\b{entry}\b", out), entry


def test_holdings_parsers_fast_path_and_odd_values() -> None:
    plain = gzip.compress(json.dumps({"1ABC": "2020-01-02T00:00:00+0000", "2ABC": "2021-05-06"}).encode())
    assert hold.parse_released(plain) == {"1abc": "2020-01-02", "2abc": "2021-05-06"}
    odd = gzip.compress(json.dumps({"1ABC": "someday", "pdb_00002abc": "2021-05-06T00:00:00+0000",
                                    "NOT-AN-ID": "2020-01-01"}).encode())
    assert hold.parse_released(odd) == {"1abc": "", "2abc": "2021-05-06"}
    with pytest.raises(hold.HoldingsError, match="no PDB IDs"):
        hold.parse_released(gzip.compress(json.dumps({"x": "2020-01-01"}).encode()))
    removed = hold.parse_removed(gzip.compress(json.dumps(REMOVED).encode()))
    assert removed["2abc"].superseded_by == ("1ubq",) and removed["9old"].superseded_by == ()
    assert hold.Holdings(removed=removed).replacements("1abc") == ["1ubq"]  # 1abc -> 2abc (obsolete) -> 1ubq
