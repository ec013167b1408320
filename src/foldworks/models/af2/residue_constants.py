"""Ideal amino-acid geometry for all-atom construction (AF2 supplement 1.8, Table 2; Engh & Huber 1991).

Each residue is a set of rigid groups (AF2 supp. Table 2): 0 backbone (N, CA, C, CB), 1 pre-omega,
2 phi, 3 psi (O), 4..7 chi1..chi4. ``IDEAL_POSITIONS[resname]`` gives every heavy atom's group and
its position (Å) in that group's local frame; the numbers are the published Engh & Huber ideal
geometry as tabulated with AF2 (public scientific data, re-typed here). A group frame's default
placement in its parent frame (the "literature" transform ``T_lit`` of Alg 24) is derived from
these positions by :func:`_default_frames`.

Tables (``numpy``; index 0..20 = ``constants.RESTYPES`` + X):

* ``DEFAULT_FRAMES [21, 8, 4, 4]`` group → parent-frame transforms (homogeneous).
* ``ATOM14_GROUP [21, 14]`` long, ``ATOM14_LOCAL [21, 14, 3]`` Å, ``ATOM14_MASK [21, 14]`` bool.
* ``ATOM14_TO_ATOM37 [21, 14]``, ``ATOM37_TO_ATOM14 [21, 37]`` (0 where absent), ``ATOM37_MASK [21, 37]``.
* ``CHI_MASK [21, 4]``, ``CHI_PI_PERIODIC [21, 4]``, ``CHI_ATOM37 [21, 4, 4]`` (atom37 indices).
* ``GROUP_EXISTS [21, 8]`` groups with a ground-truth frame (0, 3 and present chis; AF2 masks
  the atom-less pre-omega and phi groups), ``GROUP_BASE_ATOM37 [21, 8, 3]`` the atoms
  (negative-x point, origin, xy-plane point) defining each ground-truth group frame,
  ``GROUP_AMBIGUOUS [21, 8]`` groups whose frame flips by pi under symmetric renaming.
* ``ATOM14_AMBIGUOUS_SWAP [21, 14]`` atom14 permutation of the renamed residue (identity if none),
  ``ATOM14_IS_AMBIGUOUS [21, 14]``.

Symmetric renaming (AF2 supp. 1.8.5, Alg 26): ASP OD1/OD2, GLU OE1/OE2, PHE and TYR CD1/CD2 +
CE1/CE2 — exactly the residues with a pi-periodic chi. ARG NH1/NH2 is *not* renamed, as in AF2:
IUPAC naming fixes NH1 cis to CD, so the two names are not interchangeable given chi4, and
no modelled torsion maps one onto the other.

Unknown residues (X): backbone atoms only (ALA backbone geometry), no chis, side chains masked.
"""

from __future__ import annotations

import numpy as np

from foldworks.constants import ATOM_ORDER, ATOM_TYPE_NUM, RESTYPE_1TO3, RESTYPES

NUM_RESTYPES = 21  # 20 + X
NUM_GROUPS = 8

# (atom, group, (x, y, z) Å in the group frame). Group 0 backbone, 3 psi, 4..7 chi1..4.
IDEAL_POSITIONS: dict[str, list[tuple[str, int, tuple[float, float, float]]]] = {
    "ALA": [("N", 0, (-0.525, 1.363, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.526, 0.0, 0.0)),
            ("CB", 0, (-0.529, -0.774, -1.205)), ("O", 3, (0.627, 1.062, 0.0))],
    "ARG": [("N", 0, (-0.524, 1.362, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.525, 0.0, 0.0)),
            ("CB", 0, (-0.524, -0.778, -1.209)), ("O", 3, (0.626, 1.062, 0.0)),
            ("CG", 4, (0.616, 1.390, 0.0)), ("CD", 5, (0.564, 1.414, 0.0)), ("NE", 6, (0.539, 1.357, 0.0)),
            ("NH1", 7, (0.206, 2.301, 0.0)), ("NH2", 7, (2.078, 0.978, 0.0)), ("CZ", 7, (0.758, 1.093, 0.0))],
    "ASN": [("N", 0, (-0.536, 1.357, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.526, 0.0, 0.0)),
            ("CB", 0, (-0.531, -0.787, -1.200)), ("O", 3, (0.625, 1.062, 0.0)),
            ("CG", 4, (0.584, 1.399, 0.0)), ("ND2", 5, (0.593, -1.188, 0.001)), ("OD1", 5, (0.633, 1.059, 0.0))],
    "ASP": [("N", 0, (-0.525, 1.362, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.527, 0.0, 0.0)),
            ("CB", 0, (-0.526, -0.778, -1.208)), ("O", 3, (0.626, 1.062, 0.0)),
            ("CG", 4, (0.593, 1.398, 0.0)), ("OD1", 5, (0.610, 1.091, 0.0)), ("OD2", 5, (0.592, -1.101, -0.003))],
    "CYS": [("N", 0, (-0.522, 1.362, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.524, 0.0, 0.0)),
            ("CB", 0, (-0.519, -0.773, -1.212)), ("O", 3, (0.625, 1.062, 0.0)), ("SG", 4, (0.728, 1.653, 0.0))],
    "GLN": [("N", 0, (-0.526, 1.361, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.526, 0.0, 0.0)),
            ("CB", 0, (-0.525, -0.779, -1.207)), ("O", 3, (0.626, 1.062, 0.0)),
            ("CG", 4, (0.615, 1.393, 0.0)), ("CD", 5, (0.587, 1.399, 0.0)),
            ("NE2", 6, (0.593, -1.189, -0.001)), ("OE1", 6, (0.634, 1.060, 0.0))],
    "GLU": [("N", 0, (-0.528, 1.361, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.526, 0.0, 0.0)),
            ("CB", 0, (-0.526, -0.781, -1.207)), ("O", 3, (0.626, 1.062, 0.0)),
            ("CG", 4, (0.615, 1.392, 0.0)), ("CD", 5, (0.600, 1.397, 0.0)),
            ("OE1", 6, (0.607, 1.095, 0.0)), ("OE2", 6, (0.589, -1.104, -0.001))],
    "GLY": [("N", 0, (-0.572, 1.337, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.517, 0.0, 0.0)),
            ("O", 3, (0.626, 1.062, 0.0))],
    "HIS": [("N", 0, (-0.527, 1.360, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.525, 0.0, 0.0)),
            ("CB", 0, (-0.525, -0.778, -1.208)), ("O", 3, (0.625, 1.063, 0.0)),
            ("CG", 4, (0.600, 1.370, 0.0)), ("CD2", 5, (0.889, -1.021, 0.003)), ("ND1", 5, (0.744, 1.160, 0.0)),
            ("CE1", 5, (2.030, 0.851, 0.002)), ("NE2", 5, (2.145, -0.466, 0.004))],
    "ILE": [("N", 0, (-0.493, 1.373, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.527, 0.0, 0.0)),
            ("CB", 0, (-0.536, -0.793, -1.213)), ("O", 3, (0.627, 1.062, 0.0)),
            ("CG1", 4, (0.534, 1.437, 0.0)), ("CG2", 4, (0.540, -0.785, -1.199)), ("CD1", 5, (0.619, 1.391, 0.0))],
    "LEU": [("N", 0, (-0.520, 1.363, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.525, 0.0, 0.0)),
            ("CB", 0, (-0.522, -0.773, -1.214)), ("O", 3, (0.625, 1.063, 0.0)),
            ("CG", 4, (0.678, 1.371, 0.0)), ("CD1", 5, (0.530, 1.430, 0.0)), ("CD2", 5, (0.535, -0.774, 1.200))],
    "LYS": [("N", 0, (-0.526, 1.362, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.526, 0.0, 0.0)),
            ("CB", 0, (-0.524, -0.778, -1.208)), ("O", 3, (0.626, 1.062, 0.0)),
            ("CG", 4, (0.619, 1.390, 0.0)), ("CD", 5, (0.559, 1.417, 0.0)), ("CE", 6, (0.560, 1.416, 0.0)),
            ("NZ", 7, (0.554, 1.387, 0.0))],
    "MET": [("N", 0, (-0.521, 1.364, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.525, 0.0, 0.0)),
            ("CB", 0, (-0.523, -0.776, -1.210)), ("O", 3, (0.625, 1.062, 0.0)),
            ("CG", 4, (0.613, 1.391, 0.0)), ("SD", 5, (0.703, 1.695, 0.0)), ("CE", 6, (0.320, 1.786, 0.0))],
    "PHE": [("N", 0, (-0.518, 1.363, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.524, 0.0, 0.0)),
            ("CB", 0, (-0.525, -0.776, -1.212)), ("O", 3, (0.626, 1.062, 0.0)),
            ("CG", 4, (0.607, 1.377, 0.0)), ("CD1", 5, (0.709, 1.195, 0.0)), ("CD2", 5, (0.706, -1.196, 0.0)),
            ("CE1", 5, (2.102, 1.198, 0.0)), ("CE2", 5, (2.098, -1.201, 0.0)), ("CZ", 5, (2.794, -0.003, -0.001))],
    "PRO": [("N", 0, (-0.566, 1.351, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.527, 0.0, 0.0)),
            ("CB", 0, (-0.546, -0.611, -1.293)), ("O", 3, (0.621, 1.066, 0.0)),
            ("CG", 4, (0.382, 1.445, 0.0)), ("CD", 5, (0.477, 1.424, 0.0))],
    "SER": [("N", 0, (-0.529, 1.360, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.525, 0.0, 0.0)),
            ("CB", 0, (-0.518, -0.777, -1.211)), ("O", 3, (0.626, 1.062, 0.0)), ("OG", 4, (0.503, 1.325, 0.0))],
    "THR": [("N", 0, (-0.517, 1.364, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.526, 0.0, 0.0)),
            ("CB", 0, (-0.516, -0.793, -1.215)), ("O", 3, (0.626, 1.062, 0.0)),
            ("CG2", 4, (0.550, -0.718, -1.228)), ("OG1", 4, (0.472, 1.353, 0.0))],
    "TRP": [("N", 0, (-0.521, 1.363, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.525, 0.0, 0.0)),
            ("CB", 0, (-0.523, -0.776, -1.212)), ("O", 3, (0.627, 1.062, 0.0)),
            ("CG", 4, (0.609, 1.370, 0.0)), ("CD1", 5, (0.824, 1.091, 0.0)), ("CD2", 5, (0.854, -1.148, -0.005)),
            ("CE2", 5, (2.186, -0.678, -0.007)), ("CE3", 5, (0.622, -2.530, -0.007)),
            ("NE1", 5, (2.140, 0.690, -0.004)), ("CH2", 5, (3.028, -2.890, -0.013)),
            ("CZ2", 5, (3.283, -1.543, -0.011)), ("CZ3", 5, (1.715, -3.389, -0.011))],
    "TYR": [("N", 0, (-0.522, 1.362, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.524, 0.0, 0.0)),
            ("CB", 0, (-0.522, -0.776, -1.213)), ("O", 3, (0.627, 1.062, 0.0)),
            ("CG", 4, (0.607, 1.382, 0.0)), ("CD1", 5, (0.716, 1.195, 0.0)), ("CD2", 5, (0.713, -1.194, -0.001)),
            ("CE1", 5, (2.107, 1.200, -0.002)), ("CE2", 5, (2.104, -1.201, -0.003)),
            ("OH", 5, (4.168, -0.002, -0.005)), ("CZ", 5, (2.791, -0.001, -0.003))],
    "VAL": [("N", 0, (-0.494, 1.373, 0.0)), ("CA", 0, (0.0, 0.0, 0.0)), ("C", 0, (1.527, 0.0, 0.0)),
            ("CB", 0, (-0.533, -0.795, -1.213)), ("O", 3, (0.627, 1.062, 0.0)),
            ("CG1", 4, (0.540, 1.429, 0.0)), ("CG2", 4, (0.533, -0.776, 1.203))],
}
IDEAL_POSITIONS["UNK"] = [a for a in IDEAL_POSITIONS["ALA"] if a[0] in ("N", "CA", "C", "O")]

#: Chi-angle atom quadruples (IUPAC; AF2 supp. Table 2).
CHI_ATOMS: dict[str, list[tuple[str, str, str, str]]] = {
    "ALA": [], "GLY": [], "UNK": [],
    "ARG": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD"), ("CB", "CG", "CD", "NE"), ("CG", "CD", "NE", "CZ")],
    "ASN": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "OD1")],
    "ASP": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "OD1")],
    "CYS": [("N", "CA", "CB", "SG")],
    "GLN": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD"), ("CB", "CG", "CD", "OE1")],
    "GLU": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD"), ("CB", "CG", "CD", "OE1")],
    "HIS": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "ND1")],
    "ILE": [("N", "CA", "CB", "CG1"), ("CA", "CB", "CG1", "CD1")],
    "LEU": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD1")],
    "LYS": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD"), ("CB", "CG", "CD", "CE"), ("CG", "CD", "CE", "NZ")],
    "MET": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "SD"), ("CB", "CG", "SD", "CE")],
    "PHE": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD1")],
    "PRO": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD")],
    "SER": [("N", "CA", "CB", "OG")],
    "THR": [("N", "CA", "CB", "OG1")],
    "TRP": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD1")],
    "TYR": [("N", "CA", "CB", "CG"), ("CA", "CB", "CG", "CD1")],
    "VAL": [("N", "CA", "CB", "CG1")],
}
#: Chis whose 180° rotation maps the residue onto itself (supp. 1.9.1): index of the chi per residue.
PI_PERIODIC_CHI: dict[str, int] = {"ASP": 1, "GLU": 2, "PHE": 1, "TYR": 1}
#: Symmetric atom-name swaps (Alg 26).
RENAMING_SWAPS: dict[str, dict[str, str]] = {
    "ASP": {"OD1": "OD2"}, "GLU": {"OE1": "OE2"},
    "PHE": {"CD1": "CD2", "CE1": "CE2"}, "TYR": {"CD1": "CD2", "CE1": "CE2"},
}
#: Atom14 order per residue (AF2 layout: backbone N, CA, C, O first).
ATOM14_NAMES: dict[str, list[str]] = {
    "ALA": ["CB"], "ARG": ["CB", "CG", "CD", "NE", "CZ", "NH1", "NH2"], "ASN": ["CB", "CG", "OD1", "ND2"],
    "ASP": ["CB", "CG", "OD1", "OD2"], "CYS": ["CB", "SG"], "GLN": ["CB", "CG", "CD", "OE1", "NE2"],
    "GLU": ["CB", "CG", "CD", "OE1", "OE2"], "GLY": [], "HIS": ["CB", "CG", "ND1", "CD2", "CE1", "NE2"],
    "ILE": ["CB", "CG1", "CG2", "CD1"], "LEU": ["CB", "CG", "CD1", "CD2"], "LYS": ["CB", "CG", "CD", "CE", "NZ"],
    "MET": ["CB", "CG", "SD", "CE"], "PHE": ["CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ"],
    "PRO": ["CB", "CG", "CD"], "SER": ["CB", "OG"], "THR": ["CB", "OG1", "CG2"],
    "TRP": ["CB", "CG", "CD1", "CD2", "NE1", "CE2", "CE3", "CZ2", "CZ3", "CH2"],
    "TYR": ["CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "OH"], "VAL": ["CB", "CG1", "CG2"], "UNK": [],
}
ATOM14_NAMES = {k: ["N", "CA", "C", "O"] + v for k, v in ATOM14_NAMES.items()}

RESNAMES: list[str] = [RESTYPE_1TO3[a] for a in RESTYPES] + ["UNK"]


def _rigid(ex: np.ndarray, ey: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """4x4 transform with x axis along ``ex``, y axis in the (ex, ey) plane (Gram–Schmidt, as Alg 21)."""
    ex = ex / np.linalg.norm(ex)
    ey = ey - np.dot(ey, ex) * ex
    ey = ey / np.linalg.norm(ey)
    out = np.eye(4)
    out[:3, :3] = np.stack([ex, ey, np.cross(ex, ey)], axis=-1)
    out[:3, 3] = origin
    return out


def _default_frames(resname: str) -> np.ndarray:
    """``T_lit`` of Alg 24 for the 8 groups ``[8, 4, 4]``: each group frame in its parent frame.

    Parents: groups 1–4 hang off the backbone frame, chi k+1 off chi k. The psi frame has x along
    CA→C and y along N→CA (origin C); chi1 has x along CA→CB and y towards N (origin CB);
    chi k≥2 has x along the previous chi's axis atom and y along the parent's −x (origin there).
    Pre-omega is the identity; phi has x along CA→N (no heavy atoms move with it).
    """
    pos = {name: np.asarray(xyz) for name, group, xyz in IDEAL_POSITIONS[resname] if group == 0}
    frames = np.tile(np.eye(4), (NUM_GROUPS, 1, 1))
    frames[2] = _rigid(pos["N"] - pos["CA"], np.array([1.0, 0.0, 0.0]), pos["N"])
    frames[3] = _rigid(pos["C"] - pos["CA"], pos["CA"] - pos["N"], pos["C"])
    local = {name: np.asarray(xyz) for name, group, xyz in IDEAL_POSITIONS[resname]}
    for k, atoms in enumerate(CHI_ATOMS[resname]):
        if k == 0:
            frames[4] = _rigid(pos[atoms[2]] - pos[atoms[1]], pos[atoms[0]] - pos[atoms[1]], pos[atoms[2]])
        else:
            axis = local[atoms[2]]
            frames[4 + k] = _rigid(axis, np.array([-1.0, 0.0, 0.0]), axis)
    return frames


def _build_tables() -> dict[str, np.ndarray]:
    t = {
        "DEFAULT_FRAMES": np.zeros((NUM_RESTYPES, NUM_GROUPS, 4, 4)),
        "ATOM14_GROUP": np.zeros((NUM_RESTYPES, 14), np.int64),
        "ATOM14_LOCAL": np.zeros((NUM_RESTYPES, 14, 3), np.float32),
        "ATOM14_MASK": np.zeros((NUM_RESTYPES, 14), bool),
        "ATOM14_TO_ATOM37": np.zeros((NUM_RESTYPES, 14), np.int64),
        "ATOM37_TO_ATOM14": np.zeros((NUM_RESTYPES, ATOM_TYPE_NUM), np.int64),
        "ATOM37_MASK": np.zeros((NUM_RESTYPES, ATOM_TYPE_NUM), bool),
        "CHI_MASK": np.zeros((NUM_RESTYPES, 4), bool),
        "CHI_PI_PERIODIC": np.zeros((NUM_RESTYPES, 4), bool),
        "CHI_ATOM37": np.zeros((NUM_RESTYPES, 4, 4), np.int64),
        "GROUP_EXISTS": np.zeros((NUM_RESTYPES, NUM_GROUPS), bool),
        "GROUP_BASE_ATOM37": np.zeros((NUM_RESTYPES, NUM_GROUPS, 3), np.int64),
        "GROUP_AMBIGUOUS": np.zeros((NUM_RESTYPES, NUM_GROUPS), bool),
        "ATOM14_AMBIGUOUS_SWAP": np.tile(np.arange(14), (NUM_RESTYPES, 1)),
        "ATOM14_IS_AMBIGUOUS": np.zeros((NUM_RESTYPES, 14), bool),
    }
    for r, name in enumerate(RESNAMES):
        t["DEFAULT_FRAMES"][r] = _default_frames(name)
        placed = {atom: (group, xyz) for atom, group, xyz in IDEAL_POSITIONS[name]}
        names14 = ATOM14_NAMES[name]
        for i, atom in enumerate(names14):
            group, xyz = placed[atom]
            t["ATOM14_GROUP"][r, i], t["ATOM14_LOCAL"][r, i], t["ATOM14_MASK"][r, i] = group, xyz, True
            t["ATOM14_TO_ATOM37"][r, i] = ATOM_ORDER[atom]
            t["ATOM37_TO_ATOM14"][r, ATOM_ORDER[atom]] = i
            t["ATOM37_MASK"][r, ATOM_ORDER[atom]] = True
        t["GROUP_EXISTS"][r, [0, 3]] = True
        t["GROUP_BASE_ATOM37"][r, 0] = [ATOM_ORDER[a] for a in ("N", "CA", "C")]  # Alg 21 (x1, x2, x3)
        t["GROUP_BASE_ATOM37"][r, 3] = [ATOM_ORDER[a] for a in ("CA", "C", "O")]  # (−x point, origin, xy)
        for k, atoms in enumerate(CHI_ATOMS[name]):
            t["CHI_MASK"][r, k] = True
            t["CHI_ATOM37"][r, k] = [ATOM_ORDER[a] for a in atoms]
            t["GROUP_EXISTS"][r, 4 + k] = True
            t["GROUP_BASE_ATOM37"][r, 4 + k] = [ATOM_ORDER[a] for a in atoms[1:]]
        if name in PI_PERIODIC_CHI:
            t["CHI_PI_PERIODIC"][r, PI_PERIODIC_CHI[name]] = True
            t["GROUP_AMBIGUOUS"][r, 4 + PI_PERIODIC_CHI[name]] = True
        for a, b in RENAMING_SWAPS.get(name, {}).items():
            i, j = names14.index(a), names14.index(b)
            t["ATOM14_AMBIGUOUS_SWAP"][r, i], t["ATOM14_AMBIGUOUS_SWAP"][r, j] = j, i
            t["ATOM14_IS_AMBIGUOUS"][r, [i, j]] = True
    return t


_TABLES = _build_tables()
DEFAULT_FRAMES: np.ndarray = _TABLES["DEFAULT_FRAMES"]
ATOM14_GROUP: np.ndarray = _TABLES["ATOM14_GROUP"]
ATOM14_LOCAL: np.ndarray = _TABLES["ATOM14_LOCAL"]
ATOM14_MASK: np.ndarray = _TABLES["ATOM14_MASK"]
ATOM14_TO_ATOM37: np.ndarray = _TABLES["ATOM14_TO_ATOM37"]
ATOM37_TO_ATOM14: np.ndarray = _TABLES["ATOM37_TO_ATOM14"]
ATOM37_MASK: np.ndarray = _TABLES["ATOM37_MASK"]
CHI_MASK: np.ndarray = _TABLES["CHI_MASK"]
CHI_PI_PERIODIC: np.ndarray = _TABLES["CHI_PI_PERIODIC"]
CHI_ATOM37: np.ndarray = _TABLES["CHI_ATOM37"]
GROUP_EXISTS: np.ndarray = _TABLES["GROUP_EXISTS"]
GROUP_BASE_ATOM37: np.ndarray = _TABLES["GROUP_BASE_ATOM37"]
GROUP_AMBIGUOUS: np.ndarray = _TABLES["GROUP_AMBIGUOUS"]
ATOM14_AMBIGUOUS_SWAP: np.ndarray = _TABLES["ATOM14_AMBIGUOUS_SWAP"]
ATOM14_IS_AMBIGUOUS: np.ndarray = _TABLES["ATOM14_IS_AMBIGUOUS"]
