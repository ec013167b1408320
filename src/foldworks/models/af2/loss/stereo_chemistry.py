"""Intra-residue bond-length and bond-angle statistics, and the atom14 distance bounds they imply.

Source: Engh & Huber (1991) ideal geometry as tabulated in AlphaFold2's
``alphafold/common/stereo_chemical_props.txt`` (used by AF2's violation loss, supp. 1.9.11).
Rows: ``RES ATOM1-ATOM2 mean_Å stddev_Å`` and ``RES ATOM1-ATOM2-ATOM3 mean_deg stddev_deg``.
"""

from __future__ import annotations

import math

import numpy as np

from foldworks.models.af2.loss import constants as rc

_BACKBONE = {  # N-CA, CA-C, C-O bonds and N-CA-C, CA-C-O angles shared by 18 residue types
    "bonds": ["N-CA 1.459 0.020", "CA-C 1.525 0.026", "C-O 1.229 0.019"],
    "angles": ["N-CA-C 111.0 2.7", "CA-C-O 120.1 2.1"],
}

_SIDECHAIN_BONDS = """
ALA CA-CB 1.520 0.021
ARG CA-CB 1.535 0.022|CB-CG 1.521 0.027|CG-CD 1.515 0.025|CD-NE 1.460 0.017|NE-CZ 1.326 0.013|CZ-NH1 1.326 0.013|CZ-NH2 1.326 0.013
ASN CA-CB 1.527 0.026|CB-CG 1.506 0.023|CG-OD1 1.235 0.022|CG-ND2 1.324 0.025
ASP CA-CB 1.535 0.022|CB-CG 1.513 0.021|CG-OD1 1.249 0.023|CG-OD2 1.249 0.023
CYS CA-CB 1.526 0.013|CB-SG 1.812 0.016
GLU CA-CB 1.535 0.022|CB-CG 1.517 0.019|CG-CD 1.515 0.015|CD-OE1 1.252 0.011|CD-OE2 1.252 0.011
GLN CA-CB 1.535 0.022|CB-CG 1.521 0.027|CG-CD 1.506 0.023|CD-OE1 1.235 0.022|CD-NE2 1.324 0.025
GLY N-CA 1.456 0.015|CA-C 1.514 0.016|C-O 1.232 0.016
HIS CA-CB 1.535 0.022|CB-CG 1.492 0.016|CG-ND1 1.369 0.015|CG-CD2 1.353 0.017|ND1-CE1 1.343 0.025|CD2-NE2 1.415 0.021|CE1-NE2 1.322 0.023
ILE CA-CB 1.544 0.023|CB-CG1 1.536 0.028|CB-CG2 1.524 0.031|CG1-CD1 1.500 0.069
LEU CA-CB 1.533 0.023|CB-CG 1.521 0.029|CG-CD1 1.514 0.037|CG-CD2 1.514 0.037
LYS CA-CB 1.535 0.022|CB-CG 1.521 0.027|CG-CD 1.520 0.034|CD-CE 1.508 0.025|CE-NZ 1.486 0.025
MET CA-CB 1.535 0.022|CB-CG 1.509 0.032|CG-SD 1.807 0.026|SD-CE 1.774 0.056
PHE CA-CB 1.535 0.022|CB-CG 1.509 0.017|CG-CD1 1.383 0.015|CG-CD2 1.383 0.015|CD1-CE1 1.388 0.020|CD2-CE2 1.388 0.020|CE1-CZ 1.369 0.019|CE2-CZ 1.369 0.019
PRO CA-CB 1.531 0.020|CB-CG 1.495 0.050|CG-CD 1.502 0.033|CD-N 1.474 0.014|N-CA 1.468 0.017|CA-C 1.524 0.020|C-O 1.228 0.020
SER CA-CB 1.525 0.015|CB-OG 1.418 0.013
THR CA-CB 1.529 0.026|CB-OG1 1.428 0.020|CB-CG2 1.519 0.033
TRP CA-CB 1.535 0.022|CB-CG 1.498 0.018|CG-CD1 1.363 0.014|CG-CD2 1.432 0.017|CD1-NE1 1.375 0.017|NE1-CE2 1.371 0.013|CD2-CE2 1.409 0.012|CD2-CE3 1.399 0.015|CE2-CZ2 1.393 0.017|CE3-CZ3 1.380 0.017|CZ2-CH2 1.369 0.019|CZ3-CH2 1.396 0.016
TYR CA-CB 1.535 0.022|CB-CG 1.512 0.015|CG-CD1 1.387 0.013|CG-CD2 1.387 0.013|CD1-CE1 1.389 0.015|CD2-CE2 1.389 0.015|CE1-CZ 1.381 0.013|CE2-CZ 1.381 0.013|CZ-OH 1.374 0.017
VAL CA-CB 1.543 0.021|CB-CG1 1.524 0.021|CB-CG2 1.524 0.021
"""

_SIDECHAIN_ANGLES = """
ALA N-CA-CB 110.1 1.4|CB-CA-C 110.1 1.5
ARG N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.4 2.2|CB-CG-CD 111.6 2.6|CG-CD-NE 111.8 2.1|CD-NE-CZ 123.6 1.4|NE-CZ-NH1 120.3 0.5|NE-CZ-NH2 120.3 0.5|NH1-CZ-NH2 119.4 1.1
ASN N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.4 2.2|CB-CG-ND2 116.7 2.4|CB-CG-OD1 121.6 2.0|ND2-CG-OD1 121.9 2.3
ASP N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.4 2.2|CB-CG-OD1 118.3 0.9|CB-CG-OD2 118.3 0.9|OD1-CG-OD2 123.3 1.9
CYS N-CA-CB 110.8 1.5|CB-CA-C 111.5 1.2|CA-CB-SG 114.2 1.1
GLU N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.4 2.2|CB-CG-CD 114.2 2.7|CG-CD-OE1 118.3 2.0|CG-CD-OE2 118.3 2.0|OE1-CD-OE2 123.3 1.2
GLN N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.4 2.2|CB-CG-CD 111.6 2.6|CG-CD-OE1 121.6 2.0|CG-CD-NE2 116.7 2.4|OE1-CD-NE2 121.9 2.3
GLY N-CA-C 113.1 2.5|CA-C-O 120.6 1.8
HIS N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.6 1.7|CB-CG-ND1 123.2 2.5|CB-CG-CD2 130.8 3.1|CG-ND1-CE1 108.2 1.4|ND1-CE1-NE2 109.9 2.2|CE1-NE2-CD2 106.6 2.5|NE2-CD2-CG 109.2 1.9|CD2-CG-ND1 106.0 1.4
ILE N-CA-CB 110.8 2.3|CB-CA-C 111.6 2.0|CA-CB-CG1 111.0 1.9|CB-CG1-CD1 113.9 2.8|CA-CB-CG2 110.9 2.0|CG1-CB-CG2 111.4 2.2
LEU N-CA-CB 110.4 2.0|CB-CA-C 110.2 1.9|CA-CB-CG 115.3 2.3|CB-CG-CD1 111.0 1.7|CB-CG-CD2 111.0 1.7|CD1-CG-CD2 110.5 3.0
LYS N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.4 2.2|CB-CG-CD 111.6 2.6|CG-CD-CE 111.9 3.0|CD-CE-NZ 111.7 2.3
MET N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.3 1.7|CB-CG-SD 112.4 3.0|CG-SD-CE 100.2 1.6
PHE N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.9 2.4|CB-CG-CD1 120.8 0.7|CB-CG-CD2 120.8 0.7|CD1-CG-CD2 118.3 1.3|CG-CD1-CE1 120.8 1.1|CG-CD2-CE2 120.8 1.1|CD1-CE1-CZ 120.1 1.2|CD2-CE2-CZ 120.1 1.2|CE1-CZ-CE2 120.0 1.8
PRO N-CA-CB 103.3 1.2|CB-CA-C 111.7 2.1|CA-CB-CG 104.8 1.9|CB-CG-CD 106.5 3.9|CG-CD-N 103.2 1.5|CA-N-CD 111.7 1.4|N-CA-C 112.1 2.6|CA-C-O 120.2 2.4
SER N-CA-CB 110.5 1.5|CB-CA-C 110.1 1.9|CA-CB-OG 111.2 2.7
THR N-CA-CB 110.3 1.9|CB-CA-C 111.6 2.7|CA-CB-OG1 109.0 2.1|CA-CB-CG2 112.4 1.4|OG1-CB-CG2 110.0 2.3
TRP N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.7 1.9|CB-CG-CD1 127.0 1.3|CB-CG-CD2 126.6 1.3|CD1-CG-CD2 106.3 0.8|CG-CD1-NE1 110.1 1.0|CD1-NE1-CE2 109.0 0.9|NE1-CE2-CD2 107.3 1.0|CE2-CD2-CG 107.3 0.8|CG-CD2-CE3 133.9 0.9|NE1-CE2-CZ2 130.4 1.1|CE3-CD2-CE2 118.7 1.2|CD2-CE2-CZ2 122.3 1.2|CE2-CZ2-CH2 117.4 1.0|CZ2-CH2-CZ3 121.6 1.2|CH2-CZ3-CE3 121.2 1.1|CZ3-CE3-CD2 118.8 1.3
TYR N-CA-CB 110.6 1.8|CB-CA-C 110.4 2.0|CA-CB-CG 113.4 1.9|CB-CG-CD1 121.0 0.6|CB-CG-CD2 121.0 0.6|CD1-CG-CD2 117.9 1.1|CG-CD1-CE1 121.3 0.8|CG-CD2-CE2 121.3 0.8|CD1-CE1-CZ 119.8 0.9|CD2-CE2-CZ 119.8 0.9|CE1-CZ-CE2 119.8 1.6|CE1-CZ-OH 120.1 2.7|CE2-CZ-OH 120.1 2.7
VAL N-CA-CB 111.5 2.2|CB-CA-C 111.4 1.9|CA-CB-CG1 110.9 1.5|CA-CB-CG2 110.9 1.5|CG1-CB-CG2 110.9 1.6
"""


def _parse(table: str) -> dict[str, list[tuple[list[str], float, float]]]:
    out: dict[str, list[tuple[list[str], float, float]]] = {}
    for line in table.strip().splitlines():
        resname, rows = line.split(" ", 1)
        for row in rows.split("|"):
            atoms, mean, sd = row.split()
            out.setdefault(resname, []).append((atoms.split("-"), float(mean), float(sd)))
    return out


def _with_backbone(table: dict, kind: str) -> dict[str, list[tuple[list[str], float, float]]]:
    shared = _parse("X " + "|".join(_BACKBONE[kind]))["X"]
    return {res: rows if res in ("GLY", "PRO") else rows + shared for res, rows in table.items()}


BONDS = _with_backbone(_parse(_SIDECHAIN_BONDS), "bonds")
ANGLES = _with_backbone(_parse(_SIDECHAIN_ANGLES), "angles")


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def bond_distances(resname: str) -> list[tuple[str, str, float, float]]:
    """``(atom1, atom2, length Å, stddev Å)`` for every bond and every angle's 1–3 "virtual bond".

    A virtual bond's length follows from the law of cosines; its stddev propagates the two bond and
    the angle stddevs to first order.
    """
    bonds = {_key(a, b): (mean, sd) for (a, b), mean, sd in BONDS.get(resname, [])}
    out = [(a, b, mean, sd) for (a, b), mean, sd in BONDS.get(resname, [])]
    for (a, b, c), mean_deg, sd_deg in ANGLES.get(resname, []):
        (l1, s1), (l2, s2) = bonds[_key(a, b)], bonds[_key(b, c)]
        gamma, s_gamma = math.radians(mean_deg), math.radians(sd_deg)
        length = math.sqrt(l1 ** 2 + l2 ** 2 - 2 * l1 * l2 * math.cos(gamma))
        d_gamma = l1 * l2 * math.sin(gamma) / length
        d_l1 = (l1 - l2 * math.cos(gamma)) / length
        d_l2 = (l2 - l1 * math.cos(gamma)) / length
        sd = math.sqrt((d_gamma * s_gamma) ** 2 + (d_l1 * s1) ** 2 + (d_l2 * s2) ** 2)
        out.append((a, c, length, sd))
    return out


def atom14_distance_bounds(overlap_tolerance: float = 1.5,
                           bond_length_tolerance_factor: float = 12.0) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds ``[21, 14, 14]`` (Å) on intra-residue atom14 pair distances.

    Non-bonded pairs: lower = sum of van der Waals radii − ``overlap_tolerance``, upper 1e10.
    Bonded and 1–3 pairs: mean ± ``bond_length_tolerance_factor`` · stddev. UNK and absent atoms: 0.
    """
    lower = np.zeros((rc.NUM_RESTYPES, 14, 14), np.float32)
    upper = np.zeros((rc.NUM_RESTYPES, 14, 14), np.float32)
    for r, resname in enumerate(rc.resnames()):
        atoms = rc.ATOM14_NAMES[resname]
        for i, a in enumerate(atoms):
            for j, b in enumerate(atoms):
                if i != j:
                    lower[r, i, j] = rc.VDW_RADIUS[a[0]] + rc.VDW_RADIUS[b[0]] - overlap_tolerance
                    upper[r, i, j] = 1e10
        for a, b, length, sd in bond_distances(resname):
            i, j = atoms.index(a), atoms.index(b)
            lower[r, [i, j], [j, i]] = length - bond_length_tolerance_factor * sd
            upper[r, [i, j], [j, i]] = length + bond_length_tolerance_factor * sd
    return lower, upper
