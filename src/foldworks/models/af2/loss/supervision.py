"""Ground-truth supervision features of the AlphaFold2 loss, derived from one chain's atom37 truth.

Every function is pure and takes (leading dims ``...``, ``N`` residues):
``aatype [..., N]`` int (AF2 order, 20 = UNK), ``all_atom_positions [..., N, 37, 3]`` (Å),
``all_atom_mask [..., N, 37]`` (1 = atom resolved). :func:`make_supervision` returns the whole set
under the feature names AF2/OpenFold use, so a training data path can build them per chain.
"""

from __future__ import annotations

import torch
from torch import Tensor

from foldworks.models.af2.loss import constants as rc
from foldworks.models.af2.loss.geometry import compose_rot, from_3_points, invert_apply, to_tensor_4x4


def _table(array, like: Tensor, aatype: Tensor) -> Tensor:
    t = torch.as_tensor(array, device=like.device)
    return t.to(like.dtype)[aatype] if t.is_floating_point() else t[aatype]


def _gather_atoms(x: Tensor, index: Tensor) -> Tensor:
    """``x [..., N, 37, *rest]`` gathered at ``index [..., N, K]`` → ``[..., N, K, *rest]``."""
    rest = x.shape[index.dim():]
    idx = index.reshape(index.shape + (1,) * len(rest)).expand(index.shape + rest)
    return torch.gather(x, index.dim() - 1, idx)


def atom14_ground_truth(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> dict[str, Tensor]:
    """Atom14 truth and its symmetric-renaming alternative (AF2 supp. 1.8.5, input of Alg 26).

    Returns ``atom14_atom_exists``, ``atom14_gt_exists``, ``atom14_alt_gt_exists`` ``[..., N, 14]``,
    ``atom14_gt_positions``, ``atom14_alt_gt_positions`` ``[..., N, 14, 3]`` (Å),
    ``atom14_atom_is_ambiguous [..., N, 14]``, ``residx_atom14_to_atom37 [..., N, 14]`` and
    ``atom37_atom_exists [..., N, 37]``.
    """
    to37 = _table(rc.ATOM14_TO_ATOM37, aatype, aatype)
    exists = _table(rc.ATOM14_MASK, all_atom_mask, aatype)
    gt_exists = exists * _gather_atoms(all_atom_mask, to37)
    gt_pos = gt_exists[..., None] * _gather_atoms(all_atom_positions, to37)
    renaming = _table(rc.ATOM14_RENAMING, all_atom_positions, aatype)
    return {
        "atom14_atom_exists": exists,
        "atom14_gt_exists": gt_exists,
        "atom14_gt_positions": gt_pos,
        "atom14_alt_gt_positions": torch.einsum("...rac,...rab->...rbc", gt_pos, renaming),
        "atom14_alt_gt_exists": torch.einsum("...ra,...rab->...rb", gt_exists, renaming),
        "atom14_atom_is_ambiguous": _table(rc.ATOM14_IS_AMBIGUOUS, all_atom_mask, aatype),
        "residx_atom14_to_atom37": to37,
        "atom37_atom_exists": _table(rc.ATOM37_MASK, all_atom_mask, aatype),
    }


def rigid_group_frames(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> dict[str, Tensor]:
    """Ground-truth frames of the 8 rigid groups (AF2 supp. 1.8.1, Table 2; backbone frame Alg 21).

    Each frame is built from three atoms (negative-x point, origin, xy-plane point); the backbone
    group uses (C, CA, N) and is then rotated by pi about y so that x points from CA towards C.
    Groups flipped by the symmetric renaming get an alternative frame rotated by pi about x.

    Returns ``rigidgroups_gt_frames``, ``rigidgroups_alt_gt_frames`` ``[..., N, 8, 4, 4]``,
    ``rigidgroups_gt_exists``, ``rigidgroups_group_exists``, ``rigidgroups_group_is_ambiguous``
    ``[..., N, 8]``, and ``backbone_rigid_tensor [..., N, 4, 4]`` / ``backbone_rigid_mask [..., N]``.
    """
    base = _table(rc.GROUP_BASE_ATOM37, aatype, aatype)  # [..., N, 8, 3]
    flat = base.reshape(base.shape[:-2] + (24,))
    pts = _gather_atoms(all_atom_positions, flat).reshape(base.shape + (3,))
    pts_mask = _gather_atoms(all_atom_mask, flat).reshape(base.shape)
    group_exists = _table(rc.GROUP_EXISTS, all_atom_mask, aatype)
    gt_exists = pts_mask.amin(-1) * group_exists
    frames = from_3_points(pts[..., 0, :], pts[..., 1, :], pts[..., 2, :])
    flip = torch.ones(8, 3, dtype=all_atom_positions.dtype, device=all_atom_positions.device)
    flip[0, 0] = flip[0, 2] = -1.0
    frames = compose_rot(frames, torch.diag_embed(flip))
    ambiguous = _table(rc.GROUP_IS_AMBIGUOUS, all_atom_mask, aatype)
    alt_diag = torch.stack([torch.ones_like(ambiguous), 1 - 2 * ambiguous, 1 - 2 * ambiguous], -1)
    gt_4x4 = to_tensor_4x4(frames)
    return {
        "rigidgroups_gt_frames": gt_4x4,
        "rigidgroups_alt_gt_frames": to_tensor_4x4(compose_rot(frames, torch.diag_embed(alt_diag))),
        "rigidgroups_gt_exists": gt_exists,
        "rigidgroups_group_exists": group_exists,
        "rigidgroups_group_is_ambiguous": ambiguous,
        "backbone_rigid_tensor": gt_4x4[..., 0, :, :],
        "backbone_rigid_mask": gt_exists[..., 0],
    }


def chi_angles(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> dict[str, Tensor]:
    """Side-chain torsions chi1..chi4 as (sin, cos) (AF2 supp. 1.8.2, Table 2).

    The torsion of atoms (a, b, c, d) is read from d's (z, y) coordinates in the frame with origin c,
    x axis from b to c and a in the xy plane, normalised with eps 1e-8 under the root.
    Returns ``chi_angles_sin_cos [..., N, 4, 2]`` and ``chi_mask [..., N, 4]`` (1 where the residue
    type has the chi and all four atoms are resolved).
    """
    idx = _table(rc.CHI_ATOM37, aatype, aatype)  # [..., N, 4, 4]
    flat = idx.reshape(idx.shape[:-2] + (16,))
    pts = _gather_atoms(all_atom_positions, flat).reshape(idx.shape + (3,))
    pts_mask = _gather_atoms(all_atom_mask, flat).reshape(idx.shape)
    frames = from_3_points(pts[..., 1, :], pts[..., 2, :], pts[..., 0, :])
    local = invert_apply(frames, pts[..., 3, :])
    sin_cos = torch.stack([local[..., 2], local[..., 1]], -1)
    sin_cos = sin_cos / torch.sqrt((sin_cos * sin_cos).sum(-1, keepdim=True) + 1e-8)
    mask = _table(rc.CHI_MASK, all_atom_mask, aatype) * pts_mask.prod(-1)
    return {"chi_angles_sin_cos": sin_cos, "chi_mask": mask}


def pseudo_beta(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> dict[str, Tensor]:
    """Pseudo-β: CB, or CA for glycine. ``pseudo_beta [..., N, 3]`` (Å), ``pseudo_beta_mask [..., N]``."""
    is_gly = (aatype == rc.GLY)
    pos = torch.where(is_gly[..., None], all_atom_positions[..., rc.CA37, :], all_atom_positions[..., rc.CB37, :])
    mask = torch.where(is_gly, all_atom_mask[..., rc.CA37], all_atom_mask[..., rc.CB37])
    return {"pseudo_beta": pos, "pseudo_beta_mask": mask}


def make_supervision(aatype: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor) -> dict[str, Tensor]:
    """Every derived supervision feature of the loss (the union of the functions above), plus the inputs."""
    args = (aatype, all_atom_positions, all_atom_mask)
    out = {"aatype": aatype, "all_atom_positions": all_atom_positions, "all_atom_mask": all_atom_mask}
    for fn in (atom14_ground_truth, rigid_group_frames, chi_angles, pseudo_beta):
        out.update(fn(*args))
    return out
