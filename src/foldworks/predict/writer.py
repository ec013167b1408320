"""Write a predicted Cα trace as mmCIF with gemmi (one model, chain ``A``, pLDDT in B-factors)."""

from __future__ import annotations

from pathlib import Path

import gemmi
import numpy as np

from foldworks.constants import RESTYPE_1TO3
from foldworks.fsutil import atomic_path


def ca_structure(sequence: str, ca_coords: np.ndarray, plddt: np.ndarray, name: str) -> gemmi.Structure:
    """Structure with one CA atom per residue numbered 1..L (``ca_coords [L, 3]`` Å, ``plddt [L]`` 0..1)."""
    if ca_coords.shape != (len(sequence), 3) or plddt.shape != (len(sequence),):
        raise ValueError(f"{name}: coords {ca_coords.shape} / plddt {plddt.shape} do not match length {len(sequence)}")
    if not np.isfinite(ca_coords).all():
        raise ValueError(f"{name}: non-finite predicted coordinates")
    chain = gemmi.Chain("A")
    for index, (letter, xyz, conf) in enumerate(zip(sequence, ca_coords, plddt), start=1):
        residue = gemmi.Residue()
        residue.name = RESTYPE_1TO3.get(letter.upper(), "UNK")
        residue.seqid = gemmi.SeqId(index, " ")
        residue.label_seq = index
        residue.entity_type = gemmi.EntityType.Polymer
        atom = gemmi.Atom()
        atom.name, atom.element = "CA", gemmi.Element("C")
        atom.pos = gemmi.Position(*(float(v) for v in xyz))
        atom.occ, atom.b_iso = 1.0, float(np.clip(conf, 0.0, 1.0) * 100.0)
        residue.add_atom(atom)
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


def write_ca_mmcif(path: str | Path, sequence: str, ca_coords: np.ndarray, plddt: np.ndarray, name: str) -> None:
    """Atomically write :func:`ca_structure` as mmCIF to ``path``."""
    document = ca_structure(sequence, ca_coords, plddt, name).make_mmcif_document()
    with atomic_path(path) as tmp:  # no .cif suffix: a leftover temp must not match *.cif
        document.write_file(str(tmp))
