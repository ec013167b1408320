"""Residue and atom vocabularies shared by every stage (AlphaFold/OpenFold conventions).

Atoms are stored in the *atom37* layout: one fixed slot per heavy-atom name, so a chain's
coordinates are an array ``[L, 37, 3]`` (Å) with a mask ``[L, 37]``.
"""

from __future__ import annotations

#: One-letter codes of the 20 standard amino acids, in the order used for ``aatype``.
RESTYPES: str = "ARNDCQEGHILKMFPSTWYV"
#: ``aatype`` of an unknown residue (``X``).
UNK_INDEX: int = 20
#: MSA alphabet index of a gap (``-``); MSA rows use ``aatype`` 0..20 plus this.
GAP_INDEX: int = 21
#: Number of MSA tokens (20 amino acids + X + gap).
MSA_ALPHABET_SIZE: int = 22

RESTYPE_1TO3: dict[str, str] = {
    "A": "ALA", "R": "ARG", "N": "ASN", "D": "ASP", "C": "CYS", "Q": "GLN", "E": "GLU",
    "G": "GLY", "H": "HIS", "I": "ILE", "L": "LEU", "K": "LYS", "M": "MET", "F": "PHE",
    "P": "PRO", "S": "SER", "T": "THR", "W": "TRP", "Y": "TYR", "V": "VAL", "X": "UNK",
}
RESTYPE_3TO1: dict[str, str] = {v: k for k, v in RESTYPE_1TO3.items()}

#: The atom37 slots (AlphaFold ``residue_constants.atom_types``).
ATOM_TYPES: tuple[str, ...] = (
    "N", "CA", "C", "CB", "O", "CG", "CG1", "CG2", "OG", "OG1", "SG", "CD", "CD1", "CD2",
    "ND1", "ND2", "OD1", "OD2", "SD", "CE", "CE1", "CE2", "CE3", "NE", "NE1", "NE2", "OE1",
    "OE2", "CH2", "NH1", "NH2", "OH", "CZ", "CZ2", "CZ3", "NZ", "OXT",
)
ATOM_ORDER: dict[str, int] = {name: i for i, name in enumerate(ATOM_TYPES)}
ATOM_TYPE_NUM: int = len(ATOM_TYPES)  # 37
CA_INDEX: int = ATOM_ORDER["CA"]
BACKBONE_ATOMS: tuple[str, ...] = ("N", "CA", "C", "O")


def sequence_to_aatype(sequence: str) -> list[int]:
    """Map a one-letter sequence to ``aatype`` indices (anything non-standard → ``UNK_INDEX``)."""
    lookup = {aa: i for i, aa in enumerate(RESTYPES)}
    return [lookup.get(aa, UNK_INDEX) for aa in sequence.upper()]
