"""Torsion angles ↔ rigid-group frames ↔ atom coordinates (AF2 supp. 1.8, Alg 24, 1.9.1).

Shapes: ``B`` chains, ``L`` residues; torsions ``[B, L, 7, 2]`` as (sin, cos) in the AF2 order
(pre-omega, phi, psi, chi1..chi4); group frames ``[B, L, 8]`` (backbone + the 7 torsion groups);
atoms in the atom14 layout ``[B, L, 14, 3]`` or the atom37 layout ``[B, L, 37, 3]`` (Å).

Angle convention (self-consistent with :func:`torsion_angles_to_frames`): a torsion over atoms
``(a0, a1, a2, a3)`` is ``atan2(z, y)`` of ``a3`` in the frame with origin ``a2``, x along
``a2 − a1`` and y towards ``a0`` (0 = cis), i.e. the IUPAC dihedral; psi is measured on O
(``N, CA, C, O``) and shifted by π so it equals the usual N–CA–C–N(next) psi (supp. 1.8).
"""

from __future__ import annotations

import torch
from torch import Tensor

from foldworks.constants import ATOM_ORDER
from foldworks.models.af2 import residue_constants as rc
from foldworks.models.af2.rigid import (
    Frames, apply, compose, frame_from_neg_x, invert_apply, rigid_from_3_points, rot_x,
)

_N, _CA, _C, _O, _CB = (ATOM_ORDER[a] for a in ("N", "CA", "C", "O", "CB"))
_GLY, _UNK = rc.RESNAMES.index("GLY"), rc.RESNAMES.index("UNK")


_TABLE_CACHE: dict[tuple[str, torch.device, torch.dtype], Tensor] = {}


def _table(name: str, like: Tensor) -> Tensor:
    """A residue-constant table as a tensor on ``like``'s device (floats in ``like``'s dtype), cached
    so a GPU forward does not copy the tables from the host every call."""
    key = (name, like.device, like.dtype)
    if key not in _TABLE_CACHE:
        t = torch.as_tensor(getattr(rc, name), device=like.device)
        _TABLE_CACHE[key] = t.to(like.dtype) if t.is_floating_point() else t
    return _TABLE_CACHE[key]


def torsion_angles_to_frames(backbone: Frames, angles: Tensor, aatype: Tensor) -> Frames:
    """Alg 24 lines 1–10: backbone frames ``[B, L]`` + torsions ``[B, L, 7, 2]`` → group frames ``[B, L, 8]``.

    Each group frame is ``parent ∘ T_lit ∘ makeRotX(angle)``; parents are the backbone frame for
    pre-omega/phi/psi/chi1 and the previous chi frame for chi2..chi4.
    """
    default = _table("DEFAULT_FRAMES", angles)[aatype]  # [B, L, 8, 4, 4]
    zero = torch.zeros_like(angles[..., :1, 0])
    sin = torch.cat([zero, angles[..., 0]], -1)  # [B, L, 8]; backbone group angle 0
    cos = torch.cat([zero + 1, angles[..., 1]], -1)
    local = compose((default[..., :3, :3], default[..., :3, 3]), (rot_x(sin, cos), torch.zeros_like(default[..., :3, 3])))
    bb = (backbone[0][..., None, :, :], backbone[1][..., None, :])
    rots, trans = [], []
    for g in range(rc.NUM_GROUPS):
        parent = bb if g <= 4 else (rots[-1], trans[-1])
        r, t = compose(parent, (local[0][..., g:g + 1, :, :], local[1][..., g:g + 1, :]))
        rots.append(r)
        trans.append(t)
    return torch.cat(rots, -3), torch.cat(trans, -2)


def frames_to_atom14(group_frames: Frames, aatype: Tensor) -> Tensor:
    """Alg 24 line 11: place the ideal local atom positions with their group frames → ``[B, L, 14, 3]``."""
    rot, trans = group_frames
    group = _table("ATOM14_GROUP", aatype)[aatype]  # [B, L, 14]
    r = torch.gather(rot, -3, group[..., None, None].expand(*group.shape, 3, 3))
    t = torch.gather(trans, -2, group[..., None].expand(*group.shape, 3))
    local = _table("ATOM14_LOCAL", rot)[aatype]
    mask = _table("ATOM14_MASK", aatype)[aatype]
    return apply((r, t), local) * mask[..., None].to(rot.dtype)


def atom14_to_atom37(atom14: Tensor, aatype: Tensor) -> tuple[Tensor, Tensor]:
    """Scatter ``[B, L, 14, 3]`` into the atom37 layout; returns ``(coords [B, L, 37, 3], exists [B, L, 37])``."""
    index = _table("ATOM37_TO_ATOM14", aatype)[aatype]  # [B, L, 37]
    exists = _table("ATOM37_MASK", aatype)[aatype]
    coords = torch.gather(atom14, -2, index[..., None].expand(*index.shape, 3))
    return coords * exists[..., None].to(atom14.dtype), exists


def atom37_to_atom14(atom37: Tensor, mask37: Tensor, aatype: Tensor) -> tuple[Tensor, Tensor]:
    """Gather reference atoms into atom14: ``(coords [B, L, 14, 3], mask [B, L, 14])``."""
    index = _table("ATOM14_TO_ATOM37", aatype)[aatype]  # [B, L, 14]
    exists = _table("ATOM14_MASK", aatype)[aatype]
    coords = torch.gather(atom37, -2, index[..., None].expand(*index.shape, 3))
    mask = torch.gather(mask37, -1, index) & exists
    return coords * mask[..., None].to(atom37.dtype), mask


def backbone_frames(atom37: Tensor, mask37: Tensor) -> tuple[Frames, Tensor]:
    """Reference backbone frames (Alg 21 on N, CA, C) ``[B, L]`` and their mask (all three atoms resolved)."""
    frames = rigid_from_3_points(atom37[..., _N, :], atom37[..., _CA, :], atom37[..., _C, :])
    return frames, mask37[..., _N] & mask37[..., _CA] & mask37[..., _C]


def reference_group_frames(atom37: Tensor, mask37: Tensor, aatype: Tensor) -> tuple[Frames, Frames, Tensor]:
    """Reference rigid-group frames ``[B, L, 8]``, their π-rotated alternatives and the mask.

    Group 0 is the Alg 21 backbone frame; psi and chi frames have e1 along the rotation axis and
    e2 towards the group's first moving atom (O for psi), matching the predicted group frames. The
    alternative frame of the π-periodic chi group (ASP/PHE/TYR chi2, GLU chi3) is rotated by π about
    its axis (the frame of the renamed residue, Alg 26); other groups are unchanged. Mask: the group
    exists for the residue type and its three base atoms are resolved (pre-omega/phi never, as AF2).
    """
    base = _table("GROUP_BASE_ATOM37", aatype)[aatype]  # [B, L, 8, 3]
    pts = torch.gather(atom37[..., None, :, :].expand(*base.shape[:-1], 37, 3), -2,
                       base[..., None].expand(*base.shape, 3))  # [B, L, 8, 3, 3]
    present = torch.gather(mask37[..., None, :].expand(*base.shape[:-1], 37), -1, base).all(-1)
    rot, trans = frame_from_neg_x(pts[..., 0, :], pts[..., 1, :], pts[..., 2, :])
    bb_rot, bb_trans = rigid_from_3_points(pts[..., 0, 0, :], pts[..., 0, 1, :], pts[..., 0, 2, :])
    rot = torch.cat([bb_rot[..., None, :, :], rot[..., 1:, :, :]], -3)
    trans = torch.cat([bb_trans[..., None, :], trans[..., 1:, :]], -2)
    exists = _table("GROUP_EXISTS", aatype)[aatype] & present
    ambiguous = _table("GROUP_AMBIGUOUS", aatype)[aatype]
    flip = torch.diag(torch.tensor([1.0, -1.0, -1.0], dtype=rot.dtype, device=rot.device))
    alt_rot = torch.where(ambiguous[..., None, None], rot @ flip, rot)
    return (rot, trans), (alt_rot, trans), exists


def _torsion(a0: Tensor, a1: Tensor, a2: Tensor, a3: Tensor) -> Tensor:
    """(sin, cos) ``[..., 2]`` of the dihedral a0–a1–a2–a3 (0 = cis; module convention)."""
    local = invert_apply(frame_from_neg_x(a1, a2, a0), a3)
    yz = torch.stack([local[..., 2], local[..., 1]], -1)
    return yz / torch.sqrt((yz ** 2).sum(-1, keepdim=True) + 1e-8)


def torsion_angles(atom37: Tensor, mask37: Tensor, aatype: Tensor, residue_index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Reference torsions from atoms (supp. 1.9.1): ``(sin_cos [B, L, 7, 2], alt [B, L, 7, 2], mask [B, L, 7])``.

    Pre-omega and phi need the previous residue (index ``i − 1`` in the chain) resolved; ``alt`` adds π
    to the π-periodic chis. X residues have backbone torsions only.
    """
    prev = torch.roll(atom37, 1, dims=-3)
    prev_mask = torch.roll(mask37, 1, dims=-2)
    chained = torch.zeros_like(mask37[..., 0])
    chained[..., 1:] = residue_index[..., 1:] - residue_index[..., :-1] == 1
    x = lambda i: atom37[..., i, :]  # noqa: E731
    omega = _torsion(prev[..., _CA, :], prev[..., _C, :], x(_N), x(_CA))
    phi = _torsion(prev[..., _C, :], x(_N), x(_CA), x(_C))
    psi = -_torsion(x(_N), x(_CA), x(_C), x(_O))
    chi_idx = _table("CHI_ATOM37", aatype)[aatype]  # [B, L, 4, 4]
    chi_pts = torch.gather(atom37[..., None, :, :].expand(*chi_idx.shape[:-1], 37, 3), -2,
                           chi_idx[..., None].expand(*chi_idx.shape, 3))  # [B, L, 4, 4, 3]
    chis = _torsion(*chi_pts.unbind(-2))
    chi_present = torch.gather(mask37[..., None, :].expand(*chi_idx.shape[:-1], 37), -1, chi_idx).all(-1)
    sin_cos = torch.cat([omega[..., None, :], phi[..., None, :], psi[..., None, :], chis], -2)
    mask = torch.stack([
        chained & prev_mask[..., _CA] & prev_mask[..., _C] & mask37[..., _N] & mask37[..., _CA],
        chained & prev_mask[..., _C] & mask37[..., _N] & mask37[..., _CA] & mask37[..., _C],
        mask37[..., _N] & mask37[..., _CA] & mask37[..., _C] & mask37[..., _O],
    ], -1)
    mask = torch.cat([mask, _table("CHI_MASK", aatype)[aatype] & chi_present], -1)
    periodic = torch.cat([torch.zeros_like(mask[..., :3]), _table("CHI_PI_PERIODIC", aatype)[aatype]], -1)
    alt = torch.where(periodic[..., None], -sin_cos, sin_cos)
    return sin_cos * mask[..., None].to(sin_cos.dtype), alt * mask[..., None].to(sin_cos.dtype), mask


def renamed_alternative(atom14: Tensor, mask14: Tensor, aatype: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Atom14 reference with symmetric atoms swapped (Alg 26 input): ``(alt [..,14,3], alt_mask, is_ambiguous)``."""
    swap = _table("ATOM14_AMBIGUOUS_SWAP", aatype)[aatype]
    alt = torch.gather(atom14, -2, swap[..., None].expand(*swap.shape, 3))
    return alt, torch.gather(mask14, -1, swap), _table("ATOM14_IS_AMBIGUOUS", aatype)[aatype]


def pseudo_beta(atom37: Tensor, aatype: Tensor) -> Tensor:
    """Cβ (Cα for glycine and X) ``[B, L, 3]`` (Å), as AF2 uses for distogram and recycling."""
    is_gly = ((aatype == _GLY) | (aatype == _UNK))[..., None]
    return torch.where(is_gly, atom37[..., _CA, :], atom37[..., _CB, :])


def pseudo_beta_mask(mask37: Tensor, aatype: Tensor) -> Tensor:
    """Pseudo-Cβ resolved ``[B, L]``."""
    return torch.where((aatype == _GLY) | (aatype == _UNK), mask37[..., _CA], mask37[..., _CB])


__all__ = [
    "torsion_angles_to_frames", "frames_to_atom14", "atom14_to_atom37", "atom37_to_atom14", "backbone_frames",
    "reference_group_frames", "torsion_angles", "renamed_alternative", "pseudo_beta", "pseudo_beta_mask",
]
