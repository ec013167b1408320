"""Tests of the evaluate stage on real mirror entries: metric definitions, agreement with the
reference TMscore program, the evaluate CLI and the helix baseline."""

from __future__ import annotations

import itertools
import logging
import re
import subprocess
from pathlib import Path

import gemmi
import numpy as np
import pandas as pd
import pytest

from conftest import require_tool
from foldworks.constants import ATOM_TYPE_NUM, CA_INDEX, RESTYPE_1TO3, sequence_to_aatype
from foldworks.evaluate import metrics
from foldworks.evaluate.__main__ import main as evaluate_main
from foldworks.evaluate.baseline import ideal_helix, main as baseline_main
from foldworks.evaluate.scoring import METRIC_COLUMNS, read_metrics

# ----------------------------------------------------------------------------------- helpers


def real_chain(mirror: Path, entry: str, model: int = 0) -> tuple[str, np.ndarray]:
    """SEQRES sequence and Cα ``[L, 3]`` (NaN where unresolved) of the first chain of ``entry``."""
    structure = gemmi.read_structure(str(mirror / f"{entry}.cif.gz"))
    structure.setup_entities()
    polymer = structure[model][0].get_polymer()
    names = [m.split(",")[0] for m in structure.get_entity_of(polymer).full_sequence]
    ca = np.full((len(names), 3), np.nan)
    for residue in polymer.first_conformer():
        atom = residue.find_atom("CA", "*")
        if atom is not None and residue.label_seq:
            ca[residue.label_seq - 1] = atom.pos.tolist()
    sequence = "".join({v: k for k, v in RESTYPE_1TO3.items()}.get(n, "X") for n in names)
    return sequence, ca


def write_features(path: Path, target: str, sequence: str, ca: np.ndarray) -> None:
    """A feature file with the contract's structure keys (DATA_FORMATS.md §5), Cα only."""
    length = len(sequence)
    resolved = ~np.isnan(ca[:, 0])
    positions = np.zeros((length, ATOM_TYPE_NUM, 3), np.float32)
    positions[resolved, CA_INDEX] = ca[resolved]
    atom_mask = np.zeros((length, ATOM_TYPE_NUM), bool)
    atom_mask[:, CA_INDEX] = resolved
    np.savez_compressed(path, aatype=np.asarray(sequence_to_aatype(sequence), np.int64),
                        residue_mask=resolved, atom_positions=positions, atom_mask=atom_mask,
                        target=np.asarray(target), sequence=np.asarray(sequence))


def write_prediction(path: Path, sequence: str, ca: np.ndarray, plddt: np.ndarray) -> None:
    """A one-chain mmCIF (residues 1..L, one CA each, pLDDT in B-factor) written with gemmi."""
    structure = gemmi.Structure()
    structure.name = path.stem
    model, chain = gemmi.Model(1), gemmi.Chain("A")
    for index, (letter, xyz, b) in enumerate(zip(sequence, ca, plddt), 1):
        residue = gemmi.Residue()
        residue.name, residue.seqid = RESTYPE_1TO3[letter], gemmi.SeqId(index, " ")
        residue.entity_type = gemmi.EntityType.Polymer
        atom = gemmi.Atom()
        atom.name, atom.element, atom.occ, atom.b_iso = "CA", gemmi.Element("C"), 1.0, float(b)
        atom.pos = gemmi.Position(*map(float, xyz))
        residue.add_atom(atom)
        chain.add_residue(residue)
    model.add_chain(chain)
    structure.add_model(model)
    structure.setup_entities()
    structure.make_mmcif_document().write_file(str(path))


def write_ca_pdb(path: Path, ca: np.ndarray, numbers: np.ndarray) -> None:
    """A Cα-only PDB file for TMscore (residue numbers pair the two structures)."""
    lines = [f"ATOM  {i:5d}  CA  ALA A{n:4d}    {x:8.3f}{y:8.3f}{z:8.3f}  1.00  0.00           C"
             for i, (n, (x, y, z)) in enumerate(zip(numbers, ca), 1)]
    path.write_text("\n".join(lines + ["TER", "END"]) + "\n")


def run_tmscore(model: Path, ref: Path) -> dict[str, float]:
    """RMSD, TM-score, GDT-TS, GDT-HA as printed by ``TMscore model ref``."""
    out = subprocess.run([require_tool("TMscore"), str(model), str(ref)], capture_output=True,
                         text=True, check=True).stdout
    grab = {"rmsd": r"RMSD of  the common residues=\s*([\d.]+)", "tm": r"TM-score\s*=\s*([\d.]+)",
            "gdt_ts": r"GDT-TS-score=\s*([\d.]+)", "gdt_ha": r"GDT-HA-score=\s*([\d.]+)"}
    return {key: float(re.search(pattern, out).group(1)) for key, pattern in grab.items()}


def perturb(ca: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    """Real coordinates plus Gaussian noise and a smooth random drift (Å)."""
    rng = np.random.default_rng(seed)
    return ca + rng.normal(0, sigma, ca.shape) + np.cumsum(rng.normal(0, sigma / 5, ca.shape), axis=0)


def brute_force_lddt_ca(pred: np.ndarray, ref: np.ndarray, ref_ok, pred_ok) -> float:
    """lDDT-Cα straight from the definition, in pure Python loops."""
    conserved = pairs = 0
    for i, j in itertools.permutations(range(len(ref)), 2):
        if not (ref_ok[i] and ref_ok[j]):
            continue
        d_ref = float(np.linalg.norm(ref[i] - ref[j]))
        if d_ref >= 15.0:
            continue
        pairs += 1
        if pred_ok[i] and pred_ok[j]:
            d_pred = float(np.linalg.norm(pred[i] - pred[j]))
            conserved += sum(abs(d_pred - d_ref) < t for t in (0.5, 1.0, 2.0, 4.0))
    return conserved / (4 * pairs)


# ------------------------------------------------------------------------------ metric tests


def test_identical_structures_score_perfectly(pdb_mirror):
    _, ca = real_chain(pdb_mirror, "1ubq")
    moved = ca @ np.array([[0, -1, 0], [1, 0, 0], [0, 0, 1]]).T + np.array([5.0, -3.0, 12.0])
    found = metrics.superposition_scores(moved, ca)
    assert found.rmsd == pytest.approx(0.0, abs=1e-6)
    assert found.tm_score == pytest.approx(1.0)
    assert found.gdt(metrics.GDT_TS_CUTOFFS) == 1.0 and found.gdt(metrics.GDT_HA_CUTOFFS) == 1.0
    mask = np.ones(len(ca), bool)
    assert metrics.lddt_ca(moved, ca, mask) == pytest.approx(1.0)
    assert metrics.tm_score(ca, ca) == pytest.approx(1.0)
    assert metrics.gdt_ts(ca, ca) == 1.0 and metrics.gdt_ha(ca, ca) == 1.0


def test_kabsch_recovers_a_known_motion_in_a_batch(pdb_mirror):
    _, ca = real_chain(pdb_mirror, "5pti")
    angle = np.deg2rad(37.0)
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]])
    moved = np.stack([ca @ rotation.T + [1.0, 2.0, 3.0], perturb(ca, 1.0, 0)])
    found_r, found_t = metrics.kabsch_superpose(ca[None], moved)
    np.testing.assert_allclose(found_r[0], rotation, atol=1e-9)
    np.testing.assert_allclose(found_t[0], [1.0, 2.0, 3.0], atol=1e-8)
    assert np.linalg.det(found_r[1]) == pytest.approx(1.0)
    values = metrics.rmsd(moved, np.stack([ca, ca]))
    assert values[0] == pytest.approx(0.0, abs=1e-6) and values[1] > 0.5


def test_lddt_ca_equals_brute_force_on_a_real_chain(pdb_mirror):
    _, ref = real_chain(pdb_mirror, "1stp")  # 159 residues, 38 unresolved
    ref_ok = ~np.isnan(ref[:, 0])
    pred = perturb(np.nan_to_num(ref), 1.2, seed=3)
    pred_ok = np.ones(len(ref), bool)
    pred_ok[[20, 21, 60, 100]] = False  # missing model atoms count as not conserved
    expected = brute_force_lddt_ca(pred, ref, ref_ok, pred_ok)
    found = metrics.lddt_ca(pred, np.nan_to_num(ref), ref_ok, pred_ok)
    assert found == pytest.approx(expected, abs=1e-12)
    assert 0.2 < found < 0.95
    per_residue = metrics.lddt_ca(pred, np.nan_to_num(ref), ref_ok, pred_ok, per_residue=True)
    assert np.all(np.isnan(per_residue[~ref_ok])) and np.all(per_residue[[20, 21]] == 0.0)


def test_lddt_batch_and_all_atom_agree_with_single_calls(pdb_mirror):
    structure = gemmi.read_structure(str(pdb_mirror / "1l2y.cif.gz"))
    coords = []
    for model in structure:
        coords.append([[a.pos.tolist() for a in r if a.element.name != "H"][:8] for r in model[0]])
    pad = max(len(r) for r in coords[0])
    xyz = np.zeros((len(coords), 20, pad, 3))
    mask = np.zeros((20, pad), bool)
    for m, model in enumerate(coords):
        for i, atoms in enumerate(model):
            xyz[m, i, :len(atoms)] = atoms
            mask[i, :len(atoms)] = True
    batch = metrics.lddt(xyz[1:4], xyz[0], mask)
    singles = [metrics.lddt(xyz[k], xyz[0], mask) for k in (1, 2, 3)]
    np.testing.assert_allclose(batch, singles)
    assert metrics.lddt(xyz[0], xyz[0], mask) == 1.0 and all(0.5 < s < 1.0 for s in singles)


def test_metrics_match_the_tmscore_program(pdb_mirror, tmp_path):
    cases = []
    for entry, other in (("1l2y", 1), ("2kc9", 2)):  # NMR models of the same chain
        _, ref = real_chain(pdb_mirror, entry, 0)
        cases.append((f"{entry}-model{other + 1}", real_chain(pdb_mirror, entry, other)[1], ref))
    _, aki = real_chain(pdb_mirror, "1aki")
    cases += [("1aki-noise", perturb(aki, 1.5, seed=1), aki), ("1aki-far", perturb(aki, 4.0, seed=2), aki)]
    _, stp = real_chain(pdb_mirror, "1stp")  # unresolved reference residues
    cases.append(("1stp-noise", perturb(np.nan_to_num(stp), 1.0, seed=4), stp))
    for name, pred, ref in cases:
        pred, ref = np.round(pred, 3), np.round(ref, 3)
        numbers = np.arange(1, len(ref) + 1)
        ok = ~np.isnan(ref[:, 0])
        model_ok = ok.copy()
        model_ok[5:9] = False  # the model misses residues: scores stay normalised by the reference
        write_ca_pdb(tmp_path / "model.pdb", pred[model_ok], numbers[model_ok])
        write_ca_pdb(tmp_path / "ref.pdb", ref[ok], numbers[ok])
        expected = run_tmscore(tmp_path / "model.pdb", tmp_path / "ref.pdb")
        found = metrics.superposition_scores(pred[model_ok], ref[model_ok], length=int(ok.sum()))
        assert found.rmsd == pytest.approx(expected["rmsd"], abs=1e-3), name
        assert found.tm_score == pytest.approx(expected["tm"], abs=1e-3), name
        assert found.gdt(metrics.GDT_TS_CUTOFFS) == pytest.approx(expected["gdt_ts"], abs=1e-3), name
        assert found.gdt(metrics.GDT_HA_CUTOFFS) == pytest.approx(expected["gdt_ha"], abs=1e-3), name


# --------------------------------------------------------------------------------- CLI tests


@pytest.fixture
def workspace(pdb_mirror, tmp_path):
    """Features of 3 real chains, predictions of 2 of them, and a chain table with splits."""
    features, predictions = tmp_path / "features", tmp_path / "predictions" / "exp1"
    (predictions / "train").mkdir(parents=True)
    features.mkdir()
    chains = {}
    for target, entry in (("1stp_A", "1stp"), ("1ubq_A", "1ubq"), ("1l2y_A", "1l2y")):
        sequence, ca = real_chain(pdb_mirror, entry)
        write_features(features / f"{target}.npz", target, sequence, ca)
        chains[target] = (sequence, ca)
    seq, ca = chains["1stp_A"]
    write_prediction(predictions / "1stp_A.cif", seq, perturb(np.nan_to_num(ca), 1.0, 5),
                     np.linspace(30, 90, len(seq)))
    seq, ca = chains["1ubq_A"]
    write_prediction(predictions / "1ubq_A.cif", seq, perturb(ca, 2.0, 6), np.full(len(seq), 55.0))
    seq, _ = chains["1l2y_A"]
    write_prediction(predictions / "train" / "1l2y_A.cif", seq, real_chain(pdb_mirror, "1l2y", 3)[1],
                     np.full(len(seq), 80.0))
    table = pd.DataFrame({"entry": ["1stp", "1ubq", "1l2y"], "chain": ["A", "A", "A"],
                          "split": ["test", "test", "train"], "passed_filters": [True, True, True]})
    table.to_parquet(tmp_path / "chains.parquet")
    return tmp_path, chains


def test_evaluate_cli_scores_predictions_reproducibly(workspace):
    root, chains = workspace
    args = ["--predictions", str(root / "predictions/exp1"), "--features-dir", str(root / "features"),
            "--out", str(root / "m.tsv"), "--train-out", str(root / "train.tsv"),
            "--chains", str(root / "chains.parquet"), "--params", "{}"]
    assert evaluate_main(args) == 0
    first = (root / "m.tsv").read_bytes()
    assert evaluate_main(args) == 0
    assert (root / "m.tsv").read_bytes() == first
    table = read_metrics(root / "m.tsv")
    assert list(table.columns) == list(METRIC_COLUMNS)
    assert list(table["target"]) == ["1stp_A", "1ubq_A"]
    stp = table.iloc[0]
    assert (stp["length"], stp["n_resolved"]) == (159, 121)
    _, ca = chains["1stp_A"]
    ok = ~np.isnan(ca[:, 0])
    pred = perturb(np.nan_to_num(ca), 1.0, 5)
    assert stp["lddt_ca"] == pytest.approx(metrics.lddt_ca(pred, np.nan_to_num(ca), ok), abs=6e-5)
    assert stp["tm_score"] == pytest.approx(metrics.tm_score(pred[ok], ca[ok]), abs=6e-5)
    assert stp["mean_plddt"] == pytest.approx(np.linspace(30, 90, 159)[ok].mean(), abs=6e-5)
    assert table.iloc[1]["gdt_ts"] < stp["gdt_ts"]  # 2 Å noise scores below 1 Å noise
    train = read_metrics(root / "train.tsv")
    assert list(train["target"]) == ["1l2y_A"] and 0.5 < train["lddt_ca"][0] < 1.0


def test_evaluate_cli_names_a_missing_test_prediction(workspace, caplog):
    root, _ = workspace
    (root / "predictions/exp1/1ubq_A.cif").unlink()
    with caplog.at_level(logging.ERROR):
        code = evaluate_main(["--predictions", str(root / "predictions/exp1"), "--features-dir",
                              str(root / "features"), "--out", str(root / "m.tsv"),
                              "--chains", str(root / "chains.parquet")])
    assert code == 1 and "1ubq_A" in caplog.text
    assert not (root / "m.tsv").exists()


def test_baseline_helix_is_scored_on_each_split(workspace):
    root, chains = workspace
    assert baseline_main(["--features-dir", str(root / "features"), "--chains", str(root / "chains.parquet"),
                          "--out", str(root / "b.tsv"), "--train-out", str(root / "bt.tsv")]) == 0
    test = read_metrics(root / "b.tsv")
    assert list(test["target"]) == ["1stp_A", "1ubq_A"] and test["mean_plddt"].isna().all()
    assert "\t\n" in (root / "b.tsv").read_text()  # empty mean_plddt cell
    _, ca = chains["1ubq_A"]
    helix = ideal_helix(len(ca))
    assert np.allclose(np.linalg.norm(np.diff(helix, axis=0), axis=1), 3.8298, atol=1e-4)
    ok = np.ones(len(ca), bool)
    assert test.iloc[1]["lddt_ca"] == pytest.approx(metrics.lddt_ca(helix, ca, ok), abs=6e-5)
    assert (test["tm_score"] < 0.4).all()
    assert list(read_metrics(root / "bt.tsv")["target"]) == ["1l2y_A"]
