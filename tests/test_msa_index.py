"""The MSA index (foldworks.msa.index): the features shards' only msa input (issue 16).

Pure functions and the CLI on small manifests (no Snakemake here: tests/test_msa_workflow.py
checks in a real workflow that a changed a3m reruns exactly the features shard using it).
"""

from __future__ import annotations

import pandas as pd

from foldworks.msa.index import build_index, main, read_digest_rows, shard_digest
from foldworks.shards import Row, read_manifest, rows_by_item, write_manifest

H1, H2, H3, H4 = "abc0000000000000000a", "abc0000000000000000b", "f010000000000000000c", "0770000000000000000d"


def _manifests(shards_dir):
    write_manifest(shards_dir / "abc.tsv", [Row(H1, "ok", "in1", "st", "a3m1"), Row(H2, "failed", "in2", "st", "a3m2",
                                                                                    "msa: timed out")])
    write_manifest(shards_dir / "f01.tsv", [Row(H3, "ok", "in3", "st", "a3m3")])


def test_index_holds_the_rows_of_the_tables_passed_sequences(tmp_path):
    shards_dir = tmp_path / "shards"
    _manifests(shards_dir)
    table = pd.DataFrame({"sequence_hash": [H1, H2, H3, H1, H4], "passed_filters": [True, True, True, True, False]})
    table.to_parquet(tmp_path / "chains.parquet")
    out = tmp_path / "index.tsv"
    assert main(["--table", str(tmp_path / "chains.parquet"), "--shards-dir", str(shards_dir), "--shard-chars", "3",
                 "--out", str(out)]) == 0  # 3-character manifests; the CLI default is 2
    rows = read_manifest(out)
    assert sorted(rows) == [H1, H2, H3]  # H4 did not pass the filters
    assert rows[H2] == Row(H2, "failed", "in2", "st", "a3m2", "msa: timed out")
    # the features job reads it like the msa manifests it replaces
    assert rows_by_item([out]) == {**read_manifest(shards_dir / "abc.tsv"), **read_manifest(shards_dir / "f01.tsv")}
    assert read_digest_rows(out) == {H1: "ok:a3m1", H2: "failed:a3m2", H3: "ok:a3m3"}


def test_a_sequence_without_a_manifest_row_is_left_out(tmp_path):
    _manifests(tmp_path)
    assert [row.item for row in build_index([H1, H4, H3], tmp_path, 3)] == [H1, H3]


def test_shard_digest_changes_only_with_the_rows_of_its_own_sequences():
    rows = {H1: "ok:a3m1", H2: "failed:a3m2", H3: "ok:a3m3"}
    digest = shard_digest(rows, [H1, H3])
    assert len(digest) == 16
    assert shard_digest(rows, [H3, H1, H1]) == digest, "order and duplicates do not matter"
    assert shard_digest({**rows, H2: "ok:new"}, [H1, H3]) == digest, "another shard's sequence changed"
    assert shard_digest({**rows, H3: "ok:new"}, [H1, H3]) != digest, "its a3m changed"
    assert shard_digest({**rows, H3: "failed:a3m3"}, [H1, H3]) != digest, "its status changed"
    assert shard_digest({H1: "ok:a3m1"}, [H1, H3]) != digest, "a row went missing"


def test_failed_sequences_name_the_manifest_that_lists_them(tmp_path):
    """`python -m foldworks.msa.summary --list-failed`: the manifest holding the failed hash,
    whatever `msa.shard_chars` the run used (newest first when two key lengths are left)."""
    import os

    from foldworks.msa.summary import failed_manifests

    failed, other = "ab" + "1" * 18, "cd" + "2" * 18
    old = tmp_path / "ab.tsv"
    write_manifest(old, [Row(failed, "failed", "i", "s", "o")])
    os.utime(old, ns=(1, 1))
    assert failed_manifests([failed], tmp_path) == [old]
    write_manifest(tmp_path / "a.tsv", [Row(failed, "failed", "i", "s", "o")])  # msa.shard_chars 2 -> 1
    write_manifest(tmp_path / "c.tsv", [Row(other, "ok", "i", "s", "o")])
    assert failed_manifests([failed], tmp_path) == [tmp_path / "a.tsv"]
    assert failed_manifests([failed, other], tmp_path, shard_chars=2) == [old, tmp_path / "cd.tsv"]
    assert failed_manifests(["ef" + "3" * 18], tmp_path) == []  # listed nowhere
