"""features stage: real mirror chains (read with gemmi here) + real hhblits alignments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gemmi
import numpy as np
import pytest

from conftest import require_tool
from foldworks.constants import ATOM_ORDER, ATOM_TYPE_NUM, RESTYPE_3TO1, RESTYPES, sequence_to_aatype
from foldworks.features import (
    FALLBACK_SOURCE, FEATURE_KEYS, FeatureError, MissingMsaError, build_features, load_features,
)
from foldworks.features.build import subsample_rows
from foldworks.fsutil import write_npz_atomic
from foldworks.ids import sequence_hash
from foldworks.msa.a3m import a3m_records, format_a3m, match_columns, parse_a3m, read_header
from foldworks.msa.build_db import build_database
from foldworks.msa.fasta import read_fasta
from foldworks.msa.postprocess import placeholder_a3m
from foldworks.msa.search import run_hhblits

#: hhfilter -id 100 keeps the database copy of the query itself: a real duplicate row.
PARAMS = {"iterations": 2, "hhfilter": {"id": 100, "max_depth": 512}, "timeout_s": 120}


def chain_arrays(mirror: Path, entry: str, chain: str) -> dict[str, np.ndarray]:
    """aatype/atom37 arrays of one chain along its SEQRES (label_seq), as the parse stage stores them."""
    structure = gemmi.read_structure(str(mirror / f"{entry}.cif.gz"))
    structure.setup_entities()
    polymer = structure[0][chain].get_polymer()
    names = [m.split(",")[0] for m in structure.get_entity_of(polymer).full_sequence]
    length = len(names)
    positions = np.zeros((length, ATOM_TYPE_NUM, 3), np.float32)
    mask = np.zeros((length, ATOM_TYPE_NUM), bool)
    for residue in polymer.first_conformer():
        for atom in residue.first_conformer():
            slot = ATOM_ORDER.get(atom.name)
            if slot is not None:
                positions[residue.label_seq - 1, slot] = atom.pos.tolist()
                mask[residue.label_seq - 1, slot] = True
    aatype = np.asarray(sequence_to_aatype("".join(RESTYPE_3TO1.get(n, "X") for n in names)), np.int8)
    return {"aatype": aatype, "atom_positions": positions, "atom_mask": mask,
            "residue_mask": mask[:, ATOM_ORDER["CA"]].copy()}


def sequence_of(arrays: dict[str, np.ndarray]) -> str:
    return "".join(RESTYPES[i] for i in arrays["aatype"])


@pytest.fixture(scope="module")
def lysozyme(tmp_path_factory, pdb_mirror, seqdb_fasta) -> tuple[dict[str, np.ndarray], str]:
    """1aki chain A and its real hhblits a3m against a small lysozyme-family database."""
    require_tool("hhblits")
    tmp = tmp_path_factory.mktemp("lysozyme")
    records = [r for r in read_fasta(seqdb_fasta)
               if any(k in r[0].lower() for k in ("lysozyme", "lactalbumin"))][:40]
    records += [r for r in read_fasta(seqdb_fasta) if len(r[1]) < 150][:40]
    fasta = tmp / "db.fasta"
    fasta.write_text("".join(f">{h}\n{s}\n" for h, s in records))
    build_database([fasta], tmp / "db", threads=2)
    arrays = chain_arrays(pdb_mirror, "1aki", "A")
    sequence = sequence_of(arrays)
    query = tmp / "query.fasta"
    query.write_text(f">{sequence_hash(sequence)}\n{sequence}\n")
    run_hhblits(query, tmp / "db", tmp / "query.a3m", 1, PARAMS)
    return arrays, (tmp / "query.a3m").read_text()


def test_features_contract(lysozyme):
    arrays, a3m = lysozyme
    features = build_features(arrays, a3m, "1aki_A", max_msa_rows=256, seed=0)
    length = len(arrays["aatype"])
    assert tuple(features) == FEATURE_KEYS
    expected = {"aatype": (np.int64, (length,)), "residue_mask": (np.bool_, (length,)),
                "atom_positions": (np.float32, (length, 37, 3)), "atom_mask": (np.bool_, (length, 37))}
    for key, (dtype, shape) in expected.items():
        assert features[key].dtype == dtype and features[key].shape == shape, key
    n_rows = features["msa"].shape[0]
    assert features["msa"].dtype == np.int8 and features["deletion_matrix"].dtype == np.float32
    assert features["msa"].shape == features["deletion_matrix"].shape == (n_rows, length)
    np.testing.assert_array_equal(features["msa"][0], arrays["aatype"])
    assert str(features["sequence_hash"]) == sequence_hash(sequence_of(arrays))
    assert str(features["target"]) == "1aki_A" and str(features["sequence"]) == sequence_of(arrays)
    assert str(features["msa_source"]) == "hhblits" and read_header(a3m)["status"] == "ok"
    assert features["residue_mask"].sum() == 129  # 1aki is fully resolved
    ca_ca = np.linalg.norm(features["atom_positions"][0, 1] - features["atom_positions"][1, 1])
    assert 3.7 < ca_ca < 3.9  # Å, consecutive trans CA atoms


def test_dedup_keeps_first_occurrence(lysozyme):
    arrays, a3m = lysozyme
    records = a3m_records(a3m)
    columns = [match_columns(aligned) for _, aligned in records]
    assert columns[1] == columns[0], "expected the database copy of 1aki_A as row 1"
    hit = next(i for i, row in enumerate(columns) if row != columns[0])
    # same match columns as that hit but without its insertions: a duplicate row, dropped
    doubled = records + [("copy of the first distinct hit", match_columns(records[hit][1]))]
    features = build_features(arrays, format_a3m(doubled), "1aki_A", 256, 0)
    firsts = [records[columns.index(row)] for row in dict.fromkeys(columns)]
    expected_msa, expected_del = parse_a3m(format_a3m(firsts))
    assert len(firsts) < len(doubled) - 1
    np.testing.assert_array_equal(features["msa"], expected_msa)
    np.testing.assert_array_equal(features["deletion_matrix"], expected_del)


def test_depth_cap_is_deterministic(lysozyme):
    arrays, a3m = lysozyme
    full = build_features(arrays, a3m, "1aki_A", 256, 0)
    assert full["msa"].shape[0] >= 3
    first = build_features(arrays, a3m, "1aki_A", 2, 7)
    second = build_features(arrays, a3m, "1aki_A", 2, 7)
    assert first["msa"].shape[0] == 2
    np.testing.assert_array_equal(first["msa"], second["msa"])
    np.testing.assert_array_equal(first["msa"][0], arrays["aatype"])
    assert any(np.array_equal(first["msa"][1], row) for row in full["msa"][1:])
    picks = {tuple(subsample_rows(100, 10, seed, "abc")) for seed in range(5)}
    assert len(picks) == 5 and all(p[0] == 0 and list(p[1:]) == sorted(p[1:]) for p in picks)
    assert tuple(subsample_rows(100, 10, 3, "abc")) in picks


def test_query_mismatch_names_target(lysozyme, pdb_mirror):
    _, a3m = lysozyme
    ubiquitin = chain_arrays(pdb_mirror, "1ubq", "A")
    with pytest.raises(FeatureError, match="1ubq_A: a3m query .* does not match the chain sequence"):
        build_features(ubiquitin, a3m, "1ubq_A", 256, 0)


def test_cli_roundtrip(lysozyme, tmp_path):
    arrays, a3m = lysozyme
    parsed = tmp_path / "1aki.npz"
    write_npz_atomic(parsed, {f"A/{k}": v for k, v in arrays.items()})
    (tmp_path / "q.a3m").write_text(a3m)
    out = tmp_path / "features" / "1aki_A.npz"
    cmd = [sys.executable, "-m", "foldworks.features", "--parsed", str(parsed), "--chain", "A",
           "--a3m", str(tmp_path / "q.a3m"), "--target", "1aki_A", "--out", str(out),
           "--params", '{"max_msa_rows": 2, "seed": 0}']
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    loaded = load_features(out)
    assert loaded["target"] == "1aki_A" and isinstance(loaded["sequence_hash"], str)
    assert loaded["msa"].shape == (2, 129)
    np.testing.assert_array_equal(loaded["atom_positions"], arrays["atom_positions"])
    missing = subprocess.run(cmd[:6] + ["B"] + cmd[7:], capture_output=True, text=True)
    assert missing.returncode == 1 and "1aki_A" in missing.stderr and "B/aatype" in missing.stderr


def failed_a3m(arrays: dict[str, np.ndarray]) -> str:
    """The placeholder the msa stage writes after its last failed attempt."""
    sequence = sequence_of(arrays)
    meta = {"tool": "hhblits", "sequence_hash": sequence_hash(sequence), "length": len(sequence), "databases": {}}
    return placeholder_a3m(sequence_hash(sequence), sequence, meta, "hhblits timed out after 900 s")


def test_missing_msa_refused_without_fallback(lysozyme):
    arrays, _ = lysozyme
    with pytest.raises(MissingMsaError, match=r"1aki_A: no MSA for sequence [0-9a-f]{20} \(search failed: "
                                              r"hhblits timed out.*allow_single_sequence_fallback is false"):
        build_features(arrays, failed_a3m(arrays), "1aki_A", 256, 0)
    with pytest.raises(MissingMsaError, match="1aki_A: no a3m given"):
        build_features(arrays, None, "1aki_A", 256, 0)


def test_single_sequence_fallback_is_marked(lysozyme):
    arrays, real = lysozyme
    for a3m in (failed_a3m(arrays), None):
        features = build_features(arrays, a3m, "1aki_A", 256, 0, allow_fallback=True)
        assert tuple(features) == FEATURE_KEYS and str(features["msa_source"]) == FALLBACK_SOURCE
        assert features["msa"].shape == features["deletion_matrix"].shape == (1, len(arrays["aatype"]))
        np.testing.assert_array_equal(features["msa"][0], arrays["aatype"])
    # a real alignment is never marked, fallback allowed or not
    assert str(build_features(arrays, real, "1aki_A", 256, 0, allow_fallback=True)["msa_source"]) == "hhblits"


def test_cli_fallback_policy_and_failure_record(lysozyme, tmp_path):
    arrays, _ = lysozyme
    parsed = tmp_path / "1aki.npz"
    write_npz_atomic(parsed, {f"A/{k}": v for k, v in arrays.items()})
    (tmp_path / "failed.a3m").write_text(failed_a3m(arrays))
    out, record = tmp_path / "features" / "1aki_A.npz", tmp_path / "failures" / "1aki_A.json"
    cmd = [sys.executable, "-m", "foldworks.features", "--parsed", str(parsed), "--chain", "A",
           "--a3m", str(tmp_path / "failed.a3m"), "--target", "1aki_A", "--out", str(out),
           "--failure-record", str(record)]
    refused = subprocess.run(cmd, capture_output=True, text=True)
    assert refused.returncode == 1 and not out.exists()
    assert "1aki_A: no MSA for sequence" in refused.stderr
    failure = json.loads(record.read_text())
    assert failure["stage"] == "features" and failure["key"] == "1aki_A" and "no MSA" in failure["reason"]
    allowed = subprocess.run(cmd + ["--params", '{"allow_single_sequence_fallback": true}'],
                             capture_output=True, text=True)
    assert allowed.returncode == 0, allowed.stderr
    assert load_features(out)["msa_source"] == FALLBACK_SOURCE and not record.exists()
