"""Torsion angles → rigid-group frames → atom coordinates (AF2 supp. 1.8, Alg 24).

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

from foldworks.models.af2 import residue_constants as rc
from foldworks.models.af2.rigid import Frames, apply, compose, rot_x


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
