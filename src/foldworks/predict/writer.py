"""Write predictions: mmCIF with gemmi (one model, chain ``A``, pLDDT in B-factors) and PAE JSON.

- :func:`write_ca_mmcif`: Cα-only families, one CA atom per residue.
- :func:`write_atom37_mmcif`: all-atom families, every atom of ``atom37_mask`` (atom37 layout,
  :data:`foldworks.constants.ATOM_TYPES`) with its element; the residue's pLDDT is copied to every
  atom of the residue, as the AlphaFold DB files do.
- :func:`write_pae_json`: the predicted aligned error in the AlphaFold DB layout
  ``[{"predicted_aligned_error": [[...]], "max_predicted_aligned_error": X}]`` (values rounded to
  the nearest integer as AFDB v3/v4 files; ``X`` the largest possible unrounded value, Å).

Temp files carry no ``.cif``/``.json`` suffix, so a killed writer's leftover never matches a
reader's glob (:func:`foldworks.fsutil.atomic_path`).
"""

from __future__ import annotations

import json
from pathlib import Path

import gemmi
import numpy as np

from foldworks.constants import ATOM_TYPE_NUM, ATOM_TYPES, CA_INDEX, RESTYPE_1TO3
from foldworks.fsutil import atomic_path


def _check_shapes(name: str, sequence: str, coords: np.ndarray, plddt: np.ndarray, atom_shape: tuple) -> None:
    """Raise ``ValueError`` naming ``name`` when the arrays do not fit ``sequence``."""
    length = len(sequence)
    if coords.shape != (length, *atom_shape) or plddt.shape != (length,):
        raise ValueError(f"{name}: coords {coords.shape} / plddt {plddt.shape} do not match length {length}")


def _atom(name: str, xyz: np.ndarray, b_iso: float) -> gemmi.Atom:
    """A gemmi atom; the element is the first letter of the atom37 name (N, C, O, S)."""
    atom = gemmi.Atom()
    atom.name, atom.element = name, gemmi.Element(name[0])
    atom.pos = gemmi.Position(*(float(v) for v in xyz))
    atom.occ, atom.b_iso = 1.0, b_iso
    return atom


def _structure(sequence: str, residues: list[gemmi.Residue], name: str) -> gemmi.Structure:
    """One model, chain ``A`` holding ``residues``, with the full ``entity_poly_seq``."""
    chain = gemmi.Chain("A")
    for residue in residues:
        chain.add_residue(residue)
    model = gemmi.Model("1")
    model.add_chain(chain)
    structure = gemmi.Structure()
    structure.name = name
    structure.add_model(model)
    structure.setup_entities()
    entity = structure.entities[0]
    entity.full_sequence = [RESTYPE_1TO3.get(a.upper(), "UNK") for a in sequence]
    entity.entity_type = gemmi.EntityType.Polymer
    entity.polymer_type = gemmi.PolymerType.PeptideL
    return structure


def _residue(letter: str, index: int) -> gemmi.Residue:
    """Empty polymer residue number ``index`` (1-based) of one-letter type ``letter``."""
    residue = gemmi.Residue()
    residue.name = RESTYPE_1TO3.get(letter.upper(), "UNK")
    residue.seqid = gemmi.SeqId(index, " ")
    residue.label_seq = index
    residue.entity_type = gemmi.EntityType.Polymer
    return residue


def ca_structure(sequence: str, ca_coords: np.ndarray, plddt: np.ndarray, name: str) -> gemmi.Structure:
    """Structure with one CA atom per residue numbered 1..L (``ca_coords [L, 3]`` Å, ``plddt [L]`` 0..1)."""
    _check_shapes(name, sequence, ca_coords, plddt, (3,))
    if not np.isfinite(ca_coords).all():
        raise ValueError(f"{name}: non-finite predicted coordinates")
    residues = []
    for index, (letter, xyz, conf) in enumerate(zip(sequence, ca_coords, plddt), start=1):
        residue = _residue(letter, index)
        residue.add_atom(_atom("CA", xyz, float(np.clip(conf, 0.0, 1.0) * 100.0)))
        residues.append(residue)
    return _structure(sequence, residues, name)


def atom37_structure(sequence: str, coords: np.ndarray, mask: np.ndarray, plddt: np.ndarray,
                     name: str) -> gemmi.Structure:
    """Structure with the atoms of ``mask [L, 37]`` (``coords [L, 37, 3]`` Å, atom37 order) per
    residue numbered 1..L; B-factor = the residue's ``plddt [L]`` (0..1) × 100 on every atom.

    Every residue must have its CA in ``mask`` (the Cα metrics read it); coordinates of the
    masked atoms must be finite.
    """
    _check_shapes(name, sequence, coords, plddt, (ATOM_TYPE_NUM, 3))
    mask = np.asarray(mask, bool)
    if mask.shape != coords.shape[:2]:
        raise ValueError(f"{name}: atom mask {mask.shape} does not match coords {coords.shape}")
    if not mask[:, CA_INDEX].all():
        missing = np.flatnonzero(~mask[:, CA_INDEX]) + 1
        raise ValueError(f"{name}: predicted atom mask lacks CA at residues {missing[:10].tolist()}")
    if not np.isfinite(coords[mask]).all():
        raise ValueError(f"{name}: non-finite predicted coordinates")
    residues = []
    for index, letter in enumerate(sequence):
        residue = _residue(letter, index + 1)
        b_iso = float(np.clip(plddt[index], 0.0, 1.0) * 100.0)
        for slot in np.flatnonzero(mask[index]):
            residue.add_atom(_atom(ATOM_TYPES[slot], coords[index, slot], b_iso))
        residues.append(residue)
    return _structure(sequence, residues, name)


def _write_structure(path: str | Path, structure: gemmi.Structure) -> None:
    document = structure.make_mmcif_document()
    with atomic_path(path) as tmp:  # no .cif suffix: a leftover temp must not match *.cif
        document.write_file(str(tmp))


def write_ca_mmcif(path: str | Path, sequence: str, ca_coords: np.ndarray, plddt: np.ndarray, name: str) -> None:
    """Atomically write :func:`ca_structure` as mmCIF to ``path``."""
    _write_structure(path, ca_structure(sequence, ca_coords, plddt, name))


def write_atom37_mmcif(path: str | Path, sequence: str, coords: np.ndarray, mask: np.ndarray,
                       plddt: np.ndarray, name: str) -> None:
    """Atomically write :func:`atom37_structure` as mmCIF to ``path``."""
    _write_structure(path, atom37_structure(sequence, coords, mask, plddt, name))


def expected_pae(logits: np.ndarray, bin_centers: np.ndarray) -> np.ndarray:
    """Expected aligned error ``[L, L]`` (Å) of PAE logits ``[L, L, n_bins]`` over the bin centres
    ``[n_bins]`` (Å): ``sum_b softmax(logits)_b * centre_b`` (AF2 supplement 1.9.7, TM-score
    prediction)."""
    logits = np.asarray(logits, np.float64)
    centers = np.asarray(bin_centers, np.float64)
    if logits.ndim != 3 or logits.shape[0] != logits.shape[1] or logits.shape[2] != centers.shape[0]:
        raise ValueError(f"PAE logits {logits.shape} do not fit {centers.shape[0]} bin centres")
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return (shifted / shifted.sum(-1, keepdims=True)) @ centers


def pae_json_text(pae: np.ndarray, max_pae: float) -> str:
    """AlphaFold DB PAE JSON (compact, one line) of ``pae [L, L]`` (Å); values rounded to integers.

    Row ``i`` = residue the structure is aligned on, column ``j`` = residue whose error is given.
    """
    pae = np.asarray(pae, np.float64)
    if pae.ndim != 2 or pae.shape[0] != pae.shape[1]:
        raise ValueError(f"PAE must be a square matrix, got {pae.shape}")
    if not np.isfinite(pae).all():
        raise ValueError("PAE has non-finite values")
    rounded = np.rint(pae).astype(np.int64).tolist()
    payload = [{"predicted_aligned_error": rounded, "max_predicted_aligned_error": round(float(max_pae), 4)}]
    return json.dumps(payload, separators=(",", ":"))


def write_pae_json(path: str | Path, pae: np.ndarray, max_pae: float) -> None:
    """Atomically write :func:`pae_json_text` to ``path`` (temp name without ``.json``)."""
    text = pae_json_text(pae, max_pae)
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n")
