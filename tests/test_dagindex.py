"""foldworks.dagindex: the workflow's DAG-time view of the chain table and MSA index, cached on disk
(issue 16: ~3.5 s of every `snakemake` call at 230,000 entries before the cache)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from foldworks import dagindex
from foldworks.entrylist import entry_list_digest
from foldworks.msa.index import read_digest_rows, shard_digest
from foldworks.shards import Row, write_manifest

H1, H2, H3 = "ab" + "1" * 18, "ab" + "2" * 18, "cd" + "3" * 18


def chain_table(path, passed_last: bool = True) -> None:
    pd.DataFrame({
        "entry": ["1abc", "1abc", "2abd", "1xyz"], "chain": ["A", "B", "A", "A"],
        "sequence_hash": [H1, H1, H2, H3], "split": ["train", "train", "val", "test"],
        "passed_filters": [True, True, True, passed_last],
    }).to_parquet(path)


def test_chain_shards_group_the_passed_chains(tmp_path):
    chain_table(tmp_path / "chains.parquet", passed_last=False)
    shards = dagindex.build_chain_shards(tmp_path / "chains.parquet", msa_chars=2)
    assert shards.features == {"ab": f"1abc_A:{H1},1abc_B:{H1},2abd_A:{H2}"}  # 1xyz did not pass
    assert shards.shards_of_split == {"train": ["ab"], "val": ["ab"]}
    assert shards.msa == {"ab": f"{H1},{H2}"}
    assert shards.hashes == {"ab": f"{H1},{H2}"}
    assert dagindex.build_chain_shards(tmp_path / "chains.parquet", msa_chars=3).msa == {"ab1": H1, "ab2": H2}


def test_cache_is_used_while_the_table_is_unchanged_and_rebuilt_after(tmp_path, monkeypatch):
    table, cache = tmp_path / "chains.parquet", tmp_path / "cache"
    chain_table(table, passed_last=False)
    first = dagindex.load_chain_shards(table, 2, cache)
    monkeypatch.setattr(dagindex, "build_chain_shards", lambda *a: pytest.fail("rebuilt an unchanged table"))
    assert dagindex.load_chain_shards(table, 2, cache).features == first.features
    monkeypatch.undo()
    chain_table(table, passed_last=True)  # rewritten: new size/mtime
    assert "xy" in dagindex.load_chain_shards(table, 2, cache).features
    assert dagindex.load_chain_shards(table, 3, cache).msa.keys() == {"ab1", "ab2", "cd3"}  # other width: other key


def test_corrupt_or_foreign_cache_files_are_rebuilt(tmp_path):
    table, cache = tmp_path / "chains.parquet", tmp_path / "cache"
    chain_table(table)
    expected = dagindex.build_chain_shards(table, 2).features
    cache.mkdir()
    for content in ("{not json", json.dumps([1, 2]), json.dumps({"key": "other", "value": {}})):
        (cache / "chain_shards.json").write_text(content)
        assert dagindex.load_chain_shards(table, 2, cache).features == expected
    stored = json.loads((cache / "chain_shards.json").read_text())
    assert stored["key"][1:] == [*dagindex.file_key(table), "msa_chars=2", "entry_chars=2"]


def test_msa_digests_follow_the_index_rows(tmp_path):
    table, cache, index = tmp_path / "chains.parquet", tmp_path / "cache", tmp_path / "index.tsv"
    chain_table(table)
    shards = dagindex.load_chain_shards(table, 2, cache)
    write_manifest(index, [Row(H1, "ok", "i1", "s", "o1", ""), Row(H2, "ok", "i2", "s", "o2", "")])

    def digests():
        return dagindex.msa_digests(index, shards, table, 2, shard_digest, read_digest_rows, cache)

    before = digests()
    rows = read_digest_rows(index)
    assert before == {"ab": shard_digest(rows, [H1, H2]), "xy": shard_digest(rows, [H3])}
    assert digests() == before  # from the cache
    write_manifest(index, [Row(H1, "ok", "i1", "s", "o1", ""), Row(H2, "failed", "i2", "s", "none", "x")])
    stat = os.stat(index)
    os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a rewrite within the same ns tick
    after = digests()
    assert after["ab"] != before["ab"] and after["xy"] == before["xy"]


def test_entry_list_digest_of_normalized_ids_is_the_entry_list_digest():
    entries = ["1crn", "9xyz", "1abc", "1crn"]
    assert dagindex.normalized_entry_list_digest(entries) == entry_list_digest(entries)


def test_entry_shards_follow_the_configured_key_length(tmp_path):
    """`pdb.shard_chars: 1`: features shards and their hashes keyed by the first of the middle two
    characters; the cache keeps the two widths apart."""
    table, cache = tmp_path / "chains.parquet", tmp_path / "cache"
    chain_table(table)
    assert dagindex.load_chain_shards(table, 2, cache).features.keys() == {"ab", "xy"}
    one = dagindex.load_chain_shards(table, 2, cache, entry_chars=1)
    assert one.features == {"a": f"1abc_A:{H1},1abc_B:{H1},2abd_A:{H2}", "x": f"1xyz_A:{H3}"}
    assert one.hashes == {"a": f"{H1},{H2}", "x": H3} and one.shards_of_split["test"] == ["x"]
