"""The chains stage: filters, MMseqs2 clusters, cluster-level splits, query files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import require_tool
from foldworks.chains.__main__ import write_query_fastas
from foldworks.chains.splits import add_clusters_and_splits, assign_splits, check_no_leakage, cluster_sequences
from foldworks.chains.table import EmptyDatasetError, apply_filters, read_parsed_records, rows_to_frame
from foldworks.ids import sequence_hash

# Real sequences as deposited: hen lysozyme 1AKI, human lysozyme 2NWD (~60 % identical to hen),
# ubiquitin 1UBQ, crambin 1CRN.
HEN_LYSOZYME = ("KVFGRCELAAAMKRHGLDNYRGYSLGNWVCAAKFESNFNTQATNRNTDGSTDYGILQINSRWWCNDGRTPGSRNLCNIPCSALLSSDITASVNCAKKIVSDGNGMNAWVAWRNRCKGTDVQAWIRGCRL")
HUMAN_LYSOZYME = ("KVFERCELARTLKRLGMDGYRGISLANWMCLAKWESGYNTRATNYNAGDRSTDYGIFQINSRYWCNDGKTPGAVNACHLSCSALLQDNIADAVACAKRVVRDPQGIRAWVAWRNRCQNRDVRQYVQGCGV")
UBIQUITIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"
CRAMBIN = "TTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN"


def _record(entry: str, chains: list[tuple[str, str, str]], method="X-RAY DIFFRACTION", resolution=1.5):
    return {"entry": entry, "status": "ok", "reason": None, "method": method, "resolution": resolution,
            "release_date": "2000-01-01", "chains": [
                {"chain": c, "entity_id": "1", "molecule_type": t, "sequence": s, "length": len(s),
                 "n_resolved": len(s), "resolved_fraction": 1.0} for c, t, s in chains]}


@pytest.fixture
def parsed_dir(tmp_path):
    records = [
        _record("1aki", [("A", "protein", HEN_LYSOZYME)]),
        _record("1lz1", [("A", "protein", HUMAN_LYSOZYME)]),
        _record("1ubq", [("A", "protein", UBIQUITIN)]),
        _record("1crn", [("A", "protein", CRAMBIN)], resolution=5.0),
        _record("1bna", [("A", "dna", "CGCGAATTCGCG"), ("B", "dna", "CGCGAATTCGCG")]),
    ]
    failed = {"entry": "9zzz", "status": "failed", "reason": "entry 9zzz: no _atom_site category"}
    for record in records + [failed]:
        (tmp_path / f"{record['entry']}.json").write_text(json.dumps(record))
    return tmp_path


def test_read_parsed_records_collects_rows_and_failures(parsed_dir):
    rows, failures = read_parsed_records(parsed_dir.glob("*.json"))
    assert len(rows) == 6
    assert failures == [{"entry": "9zzz", "stage": "parse", "reason": "entry 9zzz: no _atom_site category"}]
    assert {r["sequence_hash"] for r in rows if r["entry"] == "1ubq"} == {sequence_hash(UBIQUITIN)}


def test_filters_mark_reasons_and_keep_rows(parsed_dir):
    frame = rows_to_frame(read_parsed_records(parsed_dir.glob("*.json"))[0])
    out = apply_filters(frame, {"molecule_types": ["protein"], "resolution_max": 3.0, "length_min": 20})
    reasons = dict(zip(out["entry"] + "_" + out["chain"], out["filter_reason"]))
    assert reasons == {"1aki_A": "", "1lz1_A": "", "1ubq_A": "", "1crn_A": "resolution_max",
                       "1bna_A": "molecule_types", "1bna_B": "molecule_types"}
    assert out["passed_filters"].sum() == 3


def test_filter_removing_everything_is_an_error(parsed_dir):
    frame = rows_to_frame(read_parsed_records(parsed_dir.glob("*.json"))[0])
    with pytest.raises(EmptyDatasetError, match="length_min"):
        apply_filters(frame, {"length_min": 10_000})


def test_mmseqs_clusters_homologs_together():
    require_tool("mmseqs")
    seqs = {sequence_hash(s): s for s in (HEN_LYSOZYME, HUMAN_LYSOZYME, UBIQUITIN, CRAMBIN)}
    membership = cluster_sequences(seqs, min_seq_id=0.4, coverage=0.8)
    assert membership[sequence_hash(HEN_LYSOZYME)] == membership[sequence_hash(HUMAN_LYSOZYME)]
    assert len(set(membership.values())) == 3


def test_assign_splits_is_deterministic_and_whole_cluster():
    sizes = {f"c{i}": 1 + i % 3 for i in range(40)}
    first = assign_splits(sizes, {"test": 0.2, "val": 0.1}, seed=7)
    assert first == assign_splits(sizes, {"test": 0.2, "val": 0.1}, seed=7)
    assert first != assign_splits(sizes, {"test": 0.2, "val": 0.1}, seed=8)
    chains = {name: sum(sizes[c] for c, s in first.items() if s == name) for name in ("train", "val", "test")}
    total = sum(sizes.values())
    assert 0 < chains["test"] <= 0.2 * total and 0 < chains["val"] <= 0.1 * total


def test_identical_sequences_never_span_splits(parsed_dir):
    require_tool("mmseqs")
    frame = rows_to_frame(read_parsed_records(parsed_dir.glob("*.json"))[0])
    frame = pd.concat([frame, frame.assign(entry="2aki")], ignore_index=True)  # duplicate every chain
    frame = apply_filters(frame, {"molecule_types": ["protein"]})
    out = add_clusters_and_splits(frame, 0.4, 0.8, {"test": 0.3, "val": 0.0}, seed=0)
    check_no_leakage(out)
    assert out.groupby("sequence_hash")["split"].nunique().max() == 1
    weights = out.loc[out["passed_filters"]].groupby("cluster")["sample_weight"].sum()
    assert weights.round(9).eq(1.0).all()


def test_query_fastas_are_content_addressed_and_not_rewritten(parsed_dir, tmp_path):
    frame = apply_filters(rows_to_frame(read_parsed_records(parsed_dir.glob("*.json"))[0]), {})
    out_dir = tmp_path / "sequences"
    assert write_query_fastas(frame, out_dir) == 5
    path = out_dir / sequence_hash(UBIQUITIN)[:2] / f"{sequence_hash(UBIQUITIN)}.fasta"
    assert path.read_text() == f">{sequence_hash(UBIQUITIN)}\n{UBIQUITIN}\n"
    mtime = path.stat().st_mtime_ns
    assert write_query_fastas(frame, out_dir) == 0
    assert path.stat().st_mtime_ns == mtime
