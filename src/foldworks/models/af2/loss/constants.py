"""Residue tables the AlphaFold2 loss needs, in AlphaFold2's own conventions.

Index conventions (AF2 ``residue_constants``): residue types 0..19 follow ``foldworks.constants.RESTYPES``
(``ARNDCQEGHILKMFPSTWYV``), 20 is UNK, which has **no atoms** (its atom14/atom37 masks, chi masks and
group tables are all zero, as in AF2). Atom37 order is ``foldworks.constants.ATOM_TYPES``; the
per-residue atom14 order is :data:`ATOM14_NAMES`.

Tables (``numpy``, built once at import):

* ``ATOM14_TO_ATOM37 [21, 14]`` int64 (0 where absent), ``ATOM14_MASK [21, 14]``, ``ATOM37_MASK [21, 37]``.
* ``CHI_ATOM37 [21, 4, 4]`` atom37 indices of each chi's four atoms, ``CHI_MASK [21, 4]``,
  ``CHI_PI_PERIODIC [21, 4]`` (AF2 supp. 1.9.1: chis whose atoms are symmetric under a pi flip).
* ``ATOM14_RENAMING [21, 14, 14]`` permutation matrix of the symmetric renaming (AF2 supp. 1.8.5,
  Alg 26), ``ATOM14_IS_AMBIGUOUS [21, 14]``.
* ``GROUP_BASE_ATOM37 [21, 8, 3]`` the atoms (negative-x point, origin, xy-plane point) of each rigid
  group's ground-truth frame (supp. 1.8.1, Table 2), ``GROUP_EXISTS [21, 8]``, ``GROUP_IS_AMBIGUOUS [21, 8]``.
* ``ATOM14_VDW_RADIUS [21, 14]`` van der Waals radius (Å) of each atom14 slot (Bondi radii as used
  by AF2: C 1.7, N 1.55, O 1.52, S 1.8).
"""

from __future__ import annotations

import numpy as np

from foldworks.constants import ATOM_ORDER, RESTYPE_1TO3, RESTYPES
from foldworks.models.af2 import residue_constants as _model_rc

NUM_RESTYPES = 21  # 20 amino acids + UNK
UNK = 20
GLY = RESTYPES.index("G")
PRO = RESTYPES.index("P")
CA37 = ATOM_ORDER["CA"]
CB37 = ATOM_ORDER["CB"]

#: Atom14 slot names per residue (AF2's ``restype_name_to_atom14_names``); UNK has none.
ATOM14_NAMES: dict[str, tuple[str, ...]] = {
    "ALA": ("N", "CA", "C", "O", "CB"),
    "ARG": ("N", "CA", "C", "O", "CB", "CG", "CD", "NE", "CZ", "NH1", "NH2"),
    "ASN": ("N", "CA", "C", "O", "CB", "CG", "OD1", "ND2"),
    "ASP": ("N", "CA", "C", "O", "CB", "CG", "OD1", "OD2"),
    "CYS": ("N", "CA", "C", "O", "CB", "SG"),
    "GLN": ("N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "NE2"),
    "GLU": ("N", "CA", "C", "O", "CB", "CG", "CD", "OE1", "OE2"),
    "GLY": ("N", "CA", "C", "O"),
    "HIS": ("N", "CA", "C", "O", "CB", "CG", "ND1", "CD2", "CE1", "NE2"),
    "ILE": ("N", "CA", "C", "O", "CB", "CG1", "CG2", "CD1"),
    "LEU": ("N", "CA", "C", "O", "CB", "CG", "CD1", "CD2"),
    "LYS": ("N", "CA", "C", "O", "CB", "CG", "CD", "CE", "NZ"),
    "MET": ("N", "CA", "C", "O", "CB", "CG", "SD", "CE"),
    "PHE": ("N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ"),
    "PRO": ("N", "CA", "C", "O", "CB", "CG", "CD"),
    "SER": ("N", "CA", "C", "O", "CB", "OG"),
    "THR": ("N", "CA", "C", "O", "CB", "OG1", "CG2"),
    "TRP": ("N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "NE1", "CE2", "CE3", "CZ2", "CZ3", "CH2"),
    "TYR": ("N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "OH"),
    "VAL": ("N", "CA", "C", "O", "CB", "CG1", "CG2"),
    "UNK": (),
}

# Chi atoms (supp. Table 2), pi-periodic chis and renaming swaps (supp. 1.8.5): the model's tables.
CHI_ATOMS = _model_rc.CHI_ATOMS
PI_PERIODIC_CHIS: tuple[tuple[str, int], ...] = tuple(_model_rc.PI_PERIODIC_CHI.items())
RENAMING_SWAPS = _model_rc.RENAMING_SWAPS

VDW_RADIUS: dict[str, float] = {"C": 1.7, "N": 1.55, "O": 1.52, "S": 1.8}

# Peptide-bond geometry (Engh & Huber 1991, as tabulated in AF2 ``residue_constants``):
# C-N bond length (Å) and its standard deviation, [other residue, next residue is PRO].
BETWEEN_RES_BOND_LENGTH_C_N = (1.329, 1.341)
BETWEEN_RES_BOND_LENGTH_STDDEV_C_N = (0.014, 0.016)
# Cosines of the CA-C-N and C-N-CA angles with their standard deviations (cos units):
# 116.568 ± 1.995 degrees and 121.352 ± 2.315 degrees.
BETWEEN_RES_COS_ANGLE_CA_C_N = (-0.4473, 0.0140)
BETWEEN_RES_COS_ANGLE_C_N_CA = (-0.5203, 0.0353)


def resnames() -> list[str]:
    """The 21 three-letter names in index order (20 amino acids, then UNK)."""
    return [RESTYPE_1TO3[r] for r in RESTYPES] + ["UNK"]


def _atom_tables(t: dict[str, np.ndarray]) -> None:
    t["ATOM14_TO_ATOM37"] = np.zeros((NUM_RESTYPES, 14), np.int64)
    t["ATOM14_MASK"] = np.zeros((NUM_RESTYPES, 14), np.float32)
    t["ATOM37_MASK"] = np.zeros((NUM_RESTYPES, 37), np.float32)
    t["ATOM14_VDW_RADIUS"] = np.zeros((NUM_RESTYPES, 14), np.float32)
    t["ATOM14_RENAMING"] = np.tile(np.eye(14, dtype=np.float32), (NUM_RESTYPES, 1, 1))
    t["ATOM14_IS_AMBIGUOUS"] = np.zeros((NUM_RESTYPES, 14), np.float32)
    for r, name in enumerate(resnames()):
        for i, atom in enumerate(ATOM14_NAMES[name]):
            t["ATOM14_TO_ATOM37"][r, i] = ATOM_ORDER[atom]
            t["ATOM14_MASK"][r, i] = 1.0
            t["ATOM37_MASK"][r, ATOM_ORDER[atom]] = 1.0
            t["ATOM14_VDW_RADIUS"][r, i] = VDW_RADIUS[atom[0]]
        atoms = ATOM14_NAMES[name]
        for a, b in RENAMING_SWAPS.get(name, {}).items():
            i, j = atoms.index(a), atoms.index(b)
            t["ATOM14_RENAMING"][r, [i, j, i, j], [i, j, j, i]] = (0.0, 0.0, 1.0, 1.0)
            t["ATOM14_IS_AMBIGUOUS"][r, [i, j]] = 1.0


def _chi_and_group_tables(t: dict[str, np.ndarray]) -> None:
    t["CHI_ATOM37"] = np.zeros((NUM_RESTYPES, 4, 4), np.int64)
    t["CHI_MASK"] = np.zeros((NUM_RESTYPES, 4), np.float32)
    t["CHI_PI_PERIODIC"] = np.zeros((NUM_RESTYPES, 4), np.float32)
    t["GROUP_BASE_ATOM37"] = np.zeros((NUM_RESTYPES, 8, 3), np.int64)
    t["GROUP_EXISTS"] = np.zeros((NUM_RESTYPES, 8), np.float32)
    t["GROUP_IS_AMBIGUOUS"] = np.zeros((NUM_RESTYPES, 8), np.float32)
    t["GROUP_EXISTS"][:, 0] = 1.0  # backbone and psi groups exist for every type, UNK included (as AF2)
    t["GROUP_EXISTS"][:, 3] = 1.0
    for r, name in enumerate(resnames()):
        for c, atoms in enumerate(CHI_ATOMS[name]):
            t["CHI_ATOM37"][r, c] = [ATOM_ORDER[a] for a in atoms]
            t["CHI_MASK"][r, c] = 1.0
            t["GROUP_BASE_ATOM37"][r, 4 + c] = [ATOM_ORDER[a] for a in atoms[1:]]
            t["GROUP_EXISTS"][r, 4 + c] = 1.0
        if name == "UNK":
            continue  # AF2 leaves UNK's base atoms at index 0 (N): a degenerate, unused frame
        t["GROUP_BASE_ATOM37"][r, 0] = [ATOM_ORDER[a] for a in ("C", "CA", "N")]
        t["GROUP_BASE_ATOM37"][r, 3] = [ATOM_ORDER[a] for a in ("CA", "C", "O")]
        if name in RENAMING_SWAPS:
            t["GROUP_IS_AMBIGUOUS"][r, 3 + len(CHI_ATOMS[name])] = 1.0
    for name, c in PI_PERIODIC_CHIS:
        t["CHI_PI_PERIODIC"][resnames().index(name), c] = 1.0


def _build() -> dict[str, np.ndarray]:
    tables: dict[str, np.ndarray] = {}
    _atom_tables(tables)
    _chi_and_group_tables(tables)
    return tables


_T = _build()
ATOM14_TO_ATOM37: np.ndarray = _T["ATOM14_TO_ATOM37"]
ATOM14_MASK: np.ndarray = _T["ATOM14_MASK"]
ATOM37_MASK: np.ndarray = _T["ATOM37_MASK"]
ATOM14_VDW_RADIUS: np.ndarray = _T["ATOM14_VDW_RADIUS"]
ATOM14_RENAMING: np.ndarray = _T["ATOM14_RENAMING"]
ATOM14_IS_AMBIGUOUS: np.ndarray = _T["ATOM14_IS_AMBIGUOUS"]
CHI_ATOM37: np.ndarray = _T["CHI_ATOM37"]
CHI_MASK: np.ndarray = _T["CHI_MASK"]
CHI_PI_PERIODIC: np.ndarray = _T["CHI_PI_PERIODIC"]
GROUP_BASE_ATOM37: np.ndarray = _T["GROUP_BASE_ATOM37"]
GROUP_EXISTS: np.ndarray = _T["GROUP_EXISTS"]
GROUP_IS_AMBIGUOUS: np.ndarray = _T["GROUP_IS_AMBIGUOUS"]
