"""Residue tables the AlphaFold2 loss needs, in AlphaFold2's own conventions.

Index conventions (AF2 ``residue_constants``): residue types 0..19 follow ``foldworks.constants.RESTYPES``
(``ARNDCQEGHILKMFPSTWYV``), 20 is UNK, which has **no atoms** (its atom14/atom37 masks, chi masks and
group tables are all zero, as in AF2). Atom37 order is ``foldworks.constants.ATOM_TYPES``; the
per-residue atom14 order is :data:`ATOM14_NAMES`.

Tables (``numpy``, derived once at import from the model's :mod:`foldworks.models.af2.residue_constants`,
which gives UNK a backbone and uses boolean masks; here masks are float32 and UNK is empty):

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

#: Atom14 slot names per residue (the model's, AF2's ``restype_name_to_atom14_names``); UNK has none.
ATOM14_NAMES: dict[str, tuple[str, ...]] = {
    name: () if name == "UNK" else tuple(names) for name, names in _model_rc.ATOM14_NAMES.items()}

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
    real = (np.arange(NUM_RESTYPES) != UNK)[:, None]  # the model's tables give UNK a backbone
    t["ATOM14_TO_ATOM37"] = _model_rc.ATOM14_TO_ATOM37 * real
    t["ATOM14_MASK"] = (_model_rc.ATOM14_MASK & real).astype(np.float32)
    t["ATOM37_MASK"] = (_model_rc.ATOM37_MASK & real).astype(np.float32)
    t["ATOM14_VDW_RADIUS"] = np.zeros((NUM_RESTYPES, 14), np.float32)
    for r, name in enumerate(resnames()):
        for i, atom in enumerate(ATOM14_NAMES[name]):
            t["ATOM14_VDW_RADIUS"][r, i] = VDW_RADIUS[atom[0]]
    t["ATOM14_RENAMING"] = np.eye(14, dtype=np.float32)[_model_rc.ATOM14_AMBIGUOUS_SWAP]
    t["ATOM14_IS_AMBIGUOUS"] = _model_rc.ATOM14_IS_AMBIGUOUS.astype(np.float32)


def _chi_and_group_tables(t: dict[str, np.ndarray]) -> None:
    t["CHI_ATOM37"] = _model_rc.CHI_ATOM37.copy()
    t["CHI_MASK"] = _model_rc.CHI_MASK.astype(np.float32)
    t["CHI_PI_PERIODIC"] = _model_rc.CHI_PI_PERIODIC.astype(np.float32)
    t["GROUP_EXISTS"] = _model_rc.GROUP_EXISTS.astype(np.float32)  # backbone and psi exist for UNK too
    t["GROUP_IS_AMBIGUOUS"] = _model_rc.GROUP_AMBIGUOUS.astype(np.float32)
    base = _model_rc.GROUP_BASE_ATOM37.copy()
    base[:, 0] = base[:, 0, ::-1]  # the loss builds the backbone frame from (C, CA, N)
    base[UNK, [0, 3]] = 0  # AF2 leaves UNK's base atoms at index 0 (N): a degenerate, unused frame
    t["GROUP_BASE_ATOM37"] = base


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
