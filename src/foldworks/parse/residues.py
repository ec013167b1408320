"""Residue-name → one-letter code and entity polymer type → molecule type.

Modified residues map to their parent (``MSE``→M, ``TYS``→Y, ``PSU``→U) through gemmi's
tabulated residues (a lower-case ``one_letter_code`` names the parent). Unknown amino acids
are ``X``; unknown nucleotides are ``N``. D-amino acids (e.g. ``DAL``) map to their L parent
letter, but a ``polypeptide(D)`` entity is typed ``other`` so it never enters training.
"""

from __future__ import annotations

import functools

import gemmi

from foldworks.constants import RESTYPE_3TO1, RESTYPES

PROTEIN, DNA, RNA, OTHER = "protein", "dna", "rna", "other"

_MOLECULE_TYPES = {
    gemmi.PolymerType.PeptideL: PROTEIN,
    gemmi.PolymerType.Dna: DNA,
    gemmi.PolymerType.Rna: RNA,
}
_NUCLEOTIDES = {"DA": "A", "DC": "C", "DG": "G", "DT": "T", "DU": "U", "DI": "I",
                "A": "A", "C": "C", "G": "G", "U": "U", "T": "T", "I": "I", "N": "N", "DN": "N"}


def molecule_type(polymer_type: gemmi.PolymerType) -> str:
    """``protein`` (polypeptide(L)), ``dna``, ``rna``, else ``other`` (D-peptides, hybrids, ...)."""
    return _MOLECULE_TYPES.get(polymer_type, OTHER)


@functools.lru_cache(maxsize=4096)
def one_letter(name: str, mol_type: str) -> str:
    """One-letter code of residue ``name`` in a chain of ``mol_type`` (``X``/``N`` if unknown)."""
    if mol_type in (DNA, RNA):
        if name in _NUCLEOTIDES:
            return _NUCLEOTIDES[name]
        info = gemmi.find_tabulated_residue(name)
        code = info.one_letter_code.upper() if info is not None and info.is_nucleic_acid() else " "
        return code if code in "ACGTUI" else "N"
    letter = RESTYPE_3TO1.get(name)
    if letter is not None:
        return letter
    info = gemmi.find_tabulated_residue(name)
    if info is not None and info.is_amino_acid():
        code = info.one_letter_code.upper()
        if code in RESTYPES:
            return code
    return "X"


def sequence_letters(mon_ids: list[str], mol_type: str, can_code: str | None) -> str:
    """One-letter sequence of ``mon_ids``; for unknown protein residues (``X``) use the entity's
    canonical code ``can_code`` when it has exactly one letter per residue (else keep ``X``)."""
    letters = [one_letter(m, mol_type) for m in mon_ids]
    if mol_type == PROTEIN and can_code and len(can_code) == len(letters) and "X" in letters:
        letters = [c if (x == "X" and c in RESTYPES) else x for x, c in zip(letters, can_code)]
    return "".join(letters)
