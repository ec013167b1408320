"""Tests of the evaluate stage on real mirror entries: metric definitions, agreement with the
reference programs (TMscore; OpenStructure 2.3.1 compare-structures for lDDT), the evaluate CLI
and the helix baseline."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import gemmi
import numpy as np
import pandas as pd
import pytest

from conftest import require_tool
from foldworks.constants import (
    ATOM_ORDER, ATOM_TYPE_NUM, BACKBONE_ATOMS, CA_INDEX, RESTYPE_1TO3, RESTYPES, sequence_to_aatype,
)
from foldworks.evaluate import lddt as lddt_module, metrics, reference, superpose
from foldworks.evaluate.__main__ import main as evaluate_main
from foldworks.evaluate.baseline import ideal_helix, main as baseline_main
from foldworks.evaluate.scoring import METRIC_COLUMNS, RESIDUE_COLUMNS, read_metrics

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


def real_atom37(mirror: Path, entry: str, model: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``aatype [L]``, heavy-atom ``positions [L, 37, 3]`` and ``mask [L, 37]`` of the first
    chain of ``entry`` (first conformer, residues indexed by label_seq)."""
    structure = gemmi.read_structure(str(mirror / f"{entry}.cif.gz"))
    structure.setup_entities()
    structure.remove_hydrogens()
    polymer = structure[model][0].get_polymer()
    names = [m.split(",")[0] for m in structure.get_entity_of(polymer).full_sequence]
    xyz = np.zeros((len(names), ATOM_TYPE_NUM, 3))
    mask = np.zeros((len(names), ATOM_TYPE_NUM), bool)
    for residue in polymer.first_conformer():
        for atom in residue.first_conformer():
            if residue.label_seq and atom.name in ATOM_ORDER:
                xyz[residue.label_seq - 1, ATOM_ORDER[atom.name]] = atom.pos.tolist()
                mask[residue.label_seq - 1, ATOM_ORDER[atom.name]] = True
    three_to_one = {v: k for k, v in RESTYPE_1TO3.items()}
    return np.asarray(sequence_to_aatype("".join(three_to_one.get(n, "X") for n in names))), xyz, mask


def ost_lddt(model: Path, ref: Path, ca_only: bool) -> reference.OstLddt:
    """OpenStructure's lDDT; fails (not skips) when `make test` set-up did not install it."""
    try:
        return reference.run_ost_lddt(model, ref, ca_only=ca_only)
    except reference.ReferenceToolMissing as exc:
        pytest.fail(str(exc))


def swap_names(xyz: np.ndarray, aatype: np.ndarray, letter: str, first: str, second: str) -> np.ndarray:
    """Exchange the coordinates of two atom names in every residue of type ``letter``."""
    out = xyz.copy()
    rows = np.flatnonzero(aatype == RESTYPES.index(letter))
    a, b = ATOM_ORDER[first], ATOM_ORDER[second]
    out[rows, a], out[rows, b] = xyz[rows, b], xyz[rows, a]
    return out


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
    require_tool("TMscore")
    return reference.run_tmscore(model, ref)


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
    _, pti = real_chain(pdb_mirror, "5pti")  # a (poor) prediction: the helix baseline
    cases.append(("5pti-helix", ideal_helix(len(pti)), pti))
    worst: dict[str, float] = {}
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
        values = {"rmsd": found.rmsd, "tm": found.tm_score, "gdt_ts": found.gdt(metrics.GDT_TS_CUTOFFS),
                  "gdt_ha": found.gdt(metrics.GDT_HA_CUTOFFS)}
        worst = {key: max(worst.get(key, 0.0), abs(values[key] - expected[key])) for key in values}
    print("max |delta| vs TMscore (printed to 4 decimals):", worst)


def test_fast_rotations_match_the_svd_at_every_angle(pdb_mirror):
    _, ca = real_chain(pdb_mirror, "1aki")
    ca = ca - ca.mean(0)
    rng = np.random.default_rng(13)
    covariances = []
    for angle in (0.0, 60.0, 120.0, 170.0, 179.9, 180.0):  # quaternions with a tiny first component
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        cross = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        theta = np.deg2rad(angle)
        rotation = np.eye(3) + np.sin(theta) * cross + (1 - np.cos(theta)) * cross @ cross
        for start, length in ((0, 4), (10, 9), (0, len(ca))):  # seed fragments and the whole chain
            mobile = ca[start:start + length] + rng.normal(0, 0.5, (length, 3))
            target = ca[start:start + length] @ rotation.T
            mobile, target = mobile - mobile.mean(0), target - target.mean(0)
            covariances.append(mobile.T @ target)
    line = np.outer(np.arange(5.0), [1.0, 2.0, 3.0])  # collinear points: the optimum is not unique
    covariances += [line.T @ line, np.zeros((3, 3))]
    covariances = np.stack(covariances)
    zeros = np.zeros((len(covariances), 3))
    svd = metrics.rotation_from_covariance(covariances, zeros, zeros, np.ones(len(covariances)))[0]
    quaternion, precise = superpose.quaternion_rotations(covariances)
    assert precise[:9].all() and not precise[-8:].all() and not precise[-2:].any()  # near 180°: Newton
    np.testing.assert_allclose(quaternion[precise], svd[precise], rtol=0, atol=1e-12)
    for rows in (len(covariances), 4 * len(covariances)):  # few rows: Newton only; many: QCP first
        found = superpose.fast_rotations(np.tile(covariances, (rows // len(covariances), 1, 1)))
        np.testing.assert_allclose(found.reshape(-1, *svd.shape)[:, :-2], np.broadcast_to(
            svd[:-2], (rows // len(covariances),) + svd[:-2].shape), rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.linalg.det(found), 1.0, atol=1e-12)


def lddt_cases(mirror: Path) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(name, aatype, model [L, 37, 3], model mask, reference index) on real structures, rounded to
    the 3 decimals a PDB file keeps; the reference is appended by the caller."""
    cases = []
    for entry, other in (("1l2y", 3), ("2kc9", 5)):  # NMR models of one mirror entry
        aatype, xyz, mask = real_atom37(mirror, entry, other)
        cases.append((f"{entry}-model{other + 1}", entry, aatype, xyz, mask))
    aatype, ubq, mask = real_atom37(mirror, "1ubq")
    rng = np.random.default_rng(7)
    noisy = np.where(mask[..., None], ubq + rng.normal(0, 0.7, ubq.shape), 0.0)
    for letter, first, second in (("D", "OD1", "OD2"), ("E", "OE1", "OE2"), ("R", "NH1", "NH2"),
                                  ("F", "CD1", "CD2"), ("F", "CE1", "CE2"), ("V", "CG1", "CG2"),
                                  ("L", "CD1", "CD2")):
        noisy = swap_names(noisy, aatype, letter, first, second)  # names OpenStructure must resolve
    noisy_mask = mask.copy()
    noisy_mask[:, ATOM_ORDER["OXT"]] = False  # reference OXT absent from the model
    noisy_mask[10:13, 5:] = False  # missing side chains
    cases.append(("1ubq-noise-swapped", "1ubq", aatype, noisy, noisy_mask))
    aatype, pti, mask = real_atom37(mirror, "5pti")
    backbone = np.zeros_like(mask)  # a prediction as the predict stage writes it: N, CA, C, O
    backbone[:, [ATOM_ORDER[a] for a in BACKBONE_ATOMS]] = True
    pred = perturb(pti.reshape(-1, 3), 1.0, seed=8).reshape(pti.shape)
    cases.append(("5pti-backbone-prediction", "5pti", aatype, pred, backbone & mask))
    helix = np.zeros_like(pti)
    helix[:, CA_INDEX] = ideal_helix(len(aatype))
    cases.append(("5pti-helix-baseline", "5pti", aatype, helix, np.eye(ATOM_TYPE_NUM, dtype=bool)[[CA_INDEX] * len(aatype)]))
    return cases


def test_lddt_matches_openstructure_compare_structures(pdb_mirror, tmp_path):
    worst = {"all-atom": 0.0, "ca": 0.0, "per-residue": 0.0}
    for name, entry, aatype, pred, pred_mask in lddt_cases(pdb_mirror):
        _, ref, ref_mask = real_atom37(pdb_mirror, entry)
        pred, ref = np.round(pred, 3), np.round(ref, 3)
        reference.write_pdb(tmp_path / "ref.pdb", aatype, ref, ref_mask)
        reference.write_pdb(tmp_path / "model.pdb", aatype, pred, pred_mask)
        expected = ost_lddt(tmp_path / "model.pdb", tmp_path / "ref.pdb", ca_only=False)
        ca_ok = ref_mask[:, CA_INDEX]
        if pred_mask[:, ATOM_ORDER["CB"]].any():
            found = metrics.lddt_all_atom(pred, ref, ref_mask, aatype, pred_mask)
            per_residue = metrics.lddt_all_atom(pred, ref, ref_mask, aatype, pred_mask, per_residue=True)
        else:  # compare-structures treats a model without any CB as Cα-only (qsscoring)
            found = metrics.lddt_ca(pred[:, CA_INDEX], ref[:, CA_INDEX], ca_ok, pred_mask[:, CA_INDEX])
            per_residue = metrics.lddt_ca(pred[:, CA_INDEX], ref[:, CA_INDEX], ca_ok,
                                          pred_mask[:, CA_INDEX], per_residue=True)
        assert found == pytest.approx(expected.global_score, abs=1e-3), name
        for number, value in expected.per_residue.items():
            assert per_residue[number - 1] == pytest.approx(value, abs=1e-3), (name, number)
            worst["per-residue"] = max(worst["per-residue"], abs(per_residue[number - 1] - value))
        worst["all-atom"] = max(worst["all-atom"], abs(found - expected.global_score))
        expected_ca = ost_lddt(tmp_path / "model.pdb", tmp_path / "ref.pdb", ca_only=True)
        found_ca = metrics.lddt_ca(pred[:, CA_INDEX], ref[:, CA_INDEX], ca_ok, pred_mask[:, CA_INDEX])
        assert found_ca == pytest.approx(expected_ca.global_score, abs=1e-3), name
        worst["ca"] = max(worst["ca"], abs(found_ca - expected_ca.global_score))
        if name == "1ubq-noise-swapped":  # without resolving names the score drops below OST's
            assert metrics.lddt(pred, ref, ref_mask, pred_mask) < expected.global_score - 0.01
    print("max |delta| vs OpenStructure:", worst)


def test_symmetry_resolution_is_per_model_in_a_batch(pdb_mirror):
    aatype, ref, mask = real_atom37(pdb_mirror, "1ubq")
    noisy = np.where(mask[..., None], ref + np.random.default_rng(9).normal(0, 0.3, ref.shape), 0.0)
    swapped = swap_names(swap_names(noisy, aatype, "E", "OE1", "OE2"), aatype, "Y", "CE1", "CE2")
    swapped = swap_names(swapped, aatype, "Y", "CD1", "CD2")
    batch = metrics.lddt_all_atom(np.stack([noisy, swapped]), ref, mask, aatype, mask)
    assert batch[0] == pytest.approx(batch[1], abs=1e-12)
    assert batch[0] == pytest.approx(metrics.lddt_all_atom(noisy, ref, mask, aatype, mask), abs=1e-12)
    assert metrics.lddt(swapped, ref, mask, mask) < batch[1] - 0.002
    assert metrics.lddt_all_atom(ref, ref, mask, aatype) == 1.0


def test_heavy_atom_rmsd_matches_gemmi_superposition(pdb_mirror):
    structure = gemmi.read_structure(str(pdb_mirror / "1l2y.cif.gz"))
    structure.setup_entities()
    structure.remove_hydrogens()
    _, ref, ref_mask = real_atom37(pdb_mirror, "1l2y", 0)
    models = np.stack([real_atom37(pdb_mirror, "1l2y", k)[1] for k in (1, 2)])
    masks = np.stack([real_atom37(pdb_mirror, "1l2y", k)[2] for k in (1, 2)])
    found = metrics.rmsd_heavy(models, ref, ref_mask, masks)
    for k, value in zip((1, 2), found):
        expected = gemmi.calculate_superposition(structure[0][0].get_polymer(), structure[k][0].get_polymer(),
                                                 gemmi.PolymerType.PeptideL, gemmi.SupSelect.All)
        assert value == pytest.approx(expected.rmsd, abs=1e-6)
    assert metrics.rmsd_heavy(ref, ref, ref_mask) == pytest.approx(0.0, abs=1e-6)
    assert found[0] > metrics.rmsd(models[0][:, CA_INDEX], ref[:, CA_INDEX])  # side chains move more


def brute_force_pairs(xyz: np.ndarray, residue_of: np.ndarray, radius: float) -> set[tuple[int, int]]:
    """Pairs ``i < j`` of atoms in different residues closer than ``radius`` from the full matrix."""
    dist = np.linalg.norm(xyz[:, None] - xyz[None], axis=-1)
    near = (dist < radius) & (residue_of[:, None] != residue_of[None, :])
    return {(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(near, 1)))}


def test_reference_pairs_equal_the_full_distance_matrix(pdb_mirror):
    aatype, xyz, mask = real_atom37(pdb_mirror, "1stp")  # gaps, long side chains, OXT
    keep = np.flatnonzero(mask.reshape(-1))
    atoms, residue_of = xyz.reshape(-1, 3)[keep], keep // ATOM_TYPE_NUM
    for radius in (4.0, 8.0, 15.0):
        i, j, dist = lddt_module.reference_pairs(atoms, residue_of, radius)
        expected = brute_force_pairs(atoms, residue_of, radius)
        assert len(i) == len(expected) and set(zip(i.tolist(), j.tolist())) == expected, radius
        assert np.all(np.diff(i) >= 0) and np.all((np.diff(i) > 0) | (np.diff(j) > 0))  # sorted
        np.testing.assert_allclose(dist, np.linalg.norm(atoms[i] - atoms[j], axis=-1), rtol=0, atol=1e-12)
    ca = xyz[mask[:, CA_INDEX], CA_INDEX]  # one atom per residue, the lDDT-Cα case
    i, j, _ = lddt_module.reference_pairs(ca, np.arange(len(ca)))
    assert set(zip(i.tolist(), j.tolist())) == brute_force_pairs(ca, np.arange(len(ca)), 15.0)


def direct_all_atom_lddt(pred, ref, ref_mask, pred_mask, aatype) -> tuple[float, np.ndarray]:
    """All-atom lDDT from the definition on full distance matrices: per residue, OpenStructure's
    swap decision (pairs of its ambiguous atoms with unambiguous atoms of other residues), then
    every pair scored with the final names. Returns (global, per-residue [L])."""
    n_res = len(aatype)
    pred, present = pred.copy(), pred_mask.copy()
    amb = np.zeros_like(ref_mask)
    for r, kind in enumerate(aatype):
        for first, second in metrics.SYMMETRIC_ATOMS.get(RESTYPES[kind] if kind < 20 else "X", ()):
            amb[r, [ATOM_ORDER[first], ATOM_ORDER[second]]] = True
    keep = np.flatnonzero(ref_mask.reshape(-1))
    res = keep // ATOM_TYPE_NUM
    d_ref = np.linalg.norm(ref.reshape(-1, 3)[keep][:, None] - ref.reshape(-1, 3)[keep][None], axis=-1)
    scored = (d_ref < 15.0) & (res[:, None] != res[None, :])

    def hits(model, ok):
        d = np.linalg.norm(model.reshape(-1, 3)[keep][:, None] - model.reshape(-1, 3)[keep][None], axis=-1)
        both = ok.reshape(-1)[keep][:, None] & ok.reshape(-1)[keep][None, :]
        return sum((np.abs(d - d_ref) < t) for t in (0.5, 1.0, 2.0, 4.0)) * both * scored

    flat_amb = amb.reshape(-1)[keep]
    before = hits(pred, present)
    for r in range(n_res):
        rows = (res == r) & flat_amb
        if not rows.any():
            continue
        swapped, swapped_ok = pred.copy(), present.copy()
        for first, second in metrics.SYMMETRIC_ATOMS[RESTYPES[aatype[r]]]:
            a, b = ATOM_ORDER[first], ATOM_ORDER[second]
            swapped[r, [a, b]], swapped_ok[r, [a, b]] = pred[r, [b, a]], present[r, [b, a]]
        after = hits(swapped, swapped_ok)
        if after[rows][:, ~flat_amb].sum() > before[rows][:, ~flat_amb].sum():
            pred[r], present[r] = swapped[r], swapped_ok[r]
    final = hits(pred, present)
    per_residue = np.array([final[res == r].sum() / (4 * scored[res == r].sum()) if scored[res == r].any()
                            else np.nan for r in range(n_res)])
    return final.sum() / (4 * scored.sum()), per_residue


@pytest.mark.parametrize("part_pairs", [None, 997])  # pairs are scored in parts: any size, same result
def test_all_atom_lddt_equals_the_direct_definition(pdb_mirror, monkeypatch, part_pairs):
    if part_pairs:
        monkeypatch.setattr(lddt_module, "_PART_PAIRS", part_pairs)
    lddt_module.clear_cache()
    aatype, ref, mask = real_atom37(pdb_mirror, "1ubq")
    rng = np.random.default_rng(11)
    for sigma in (0.4, 1.5):  # small noise: most swaps undo the renaming; large: decisions vary
        pred = np.where(mask[..., None], ref + rng.normal(0, sigma, ref.shape), 0.0)
        pred = swap_names(swap_names(pred, aatype, "E", "OE1", "OE2"), aatype, "L", "CD1", "CD2")
        pred_mask = mask.copy()
        pred_mask[30:33, 6:] = False  # missing side-chain atoms, some of them symmetric
        expected, expected_residues = direct_all_atom_lddt(pred, ref, mask, pred_mask, aatype)
        found = metrics.lddt_all_atom(pred, ref, mask, aatype, pred_mask)
        residues = metrics.lddt_all_atom(pred, ref, mask, aatype, pred_mask, per_residue=True)
        assert found == pytest.approx(expected, abs=1e-12)
        np.testing.assert_allclose(residues, expected_residues, rtol=0, atol=1e-12)
    if part_pairs:
        assert len(lddt_module.cached_reference(ref, mask, aatype).plain_parts) > 10
    lddt_module.clear_cache()


def test_reference_scorer_batch_equals_the_single_metrics(pdb_mirror):
    aatype, ref, mask = real_atom37(pdb_mirror, "1stp")  # 38 unresolved residues
    rng = np.random.default_rng(12)
    preds = np.stack([np.where(mask[..., None], ref + rng.normal(0, sigma, ref.shape), 0.0)
                      for sigma in (0.5, 2.0, 1.0)])
    masks = np.stack([mask] * 3)
    masks[2, 40:45] = False  # a model missing whole residues ...
    preds[2, 50, CA_INDEX] = np.nan  # ... and one with a non-finite coordinate (treated as absent)
    found = metrics.ReferenceScorer(ref, mask, aatype).score_batch(preds, masks)
    assert found[0] == metrics.metric_set(preds[0], ref, mask, aatype, masks[0])._replace(
        lddt_ca_residues=found[0].lddt_ca_residues)
    for pred, pred_mask, row in zip(preds, masks, found):
        pred_mask = pred_mask & np.isfinite(pred).all(-1)
        pred = np.nan_to_num(pred)
        ok, ca_ok = mask[:, CA_INDEX], pred_mask[:, CA_INDEX]
        paired = ok & ca_ok
        search = metrics.superposition_scores(pred[paired, CA_INDEX], ref[paired, CA_INDEX], int(ok.sum()))
        assert (row.rmsd_ca, row.tm_score) == (search.rmsd, search.tm_score)
        assert row.gdt_ts == search.gdt(metrics.GDT_TS_CUTOFFS)
        assert row.gdt_ha == search.gdt(metrics.GDT_HA_CUTOFFS)
        assert row.lddt_ca == metrics.lddt_ca(pred[:, CA_INDEX], ref[:, CA_INDEX], ok, ca_ok)
        np.testing.assert_array_equal(row.lddt_ca_residues, metrics.lddt_ca(
            pred[:, CA_INDEX], ref[:, CA_INDEX], ok, ca_ok, per_residue=True))
        assert row.lddt_all_atom == metrics.lddt_all_atom(pred, ref, mask, aatype, pred_mask)
        assert row.rmsd_heavy == metrics.rmsd_heavy(pred, ref, mask, pred_mask)
    assert found[0].lddt_all_atom > found[2].lddt_all_atom > found[1].lddt_all_atom


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
            "--residues-out", str(root / "residues.tsv"),
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
    residues = pd.read_csv(root / "residues.tsv", sep="\t")
    assert list(residues.columns) == list(RESIDUE_COLUMNS)
    stp_rows = residues[residues["target"] == "1stp_A"]
    assert list(stp_rows["residue"]) == list(np.flatnonzero(ok) + 1)  # resolved residues only
    assert len(residues) == 121 + 76
    np.testing.assert_allclose(stp_rows["plddt"], np.linspace(30, 90, 159)[ok], atol=6e-5)
    per_residue = metrics.lddt_ca(pred, np.nan_to_num(ca), ok, per_residue=True)
    np.testing.assert_allclose(stp_rows["lddt_ca"], per_residue[ok], atol=1e-3)


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
