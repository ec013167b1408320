"""Geometric features computed inside AlphaFold2: pseudo-β positions, binned distances, and the
template torsion-angle features (AF2 supp. 1.4, Alg 2 lines 7–9, Table 1 "template_angle_feat").

Atom layouts follow AF2's atom37; positions are in Å. Residue types use AF2's order
(``ARNDCQEGHILKMFPSTWYV`` + X = 20, gap = 21).
"""

from __future__ import annotations

import torch
from torch import Tensor

from foldworks.constants import ATOM_ORDER
from foldworks.models.af2 import residue_constants as rc
from foldworks.models.af2.rigid import frame_from_neg_x, invert_apply, rigid_from_3_points

_N, _CA, _C, _CB, _O = (ATOM_ORDER[a] for a in ("N", "CA", "C", "CB", "O"))
GLY_INDEX = rc.RESNAMES.index("GLY")


def pseudo_beta(aatype: Tensor, atom37: Tensor) -> Tensor:
    """Cβ, or Cα for glycine, ``[*, N, 3]`` (AF2 ``pseudo_beta_fn``; X uses its (absent) Cβ)."""
    is_gly = (aatype == GLY_INDEX)[..., None]
    return torch.where(is_gly, atom37[..., _CA, :], atom37[..., _CB, :])


def squared_distance_onehot(x: Tensor, min_bin: float, max_bin: float, num_bins: int) -> Tensor:
    """One-hot distance bins of all pairs of ``x [*, N, 3]`` → ``[*, N, N, num_bins]``.

    Lower edges ``linspace(min_bin, max_bin, num_bins)`` Å; the last bin is open. Squared
    distances are compared with squared edges (AF2 ``dgram_from_positions``), so no square root
    moves a distance across an edge.
    """
    lower = torch.linspace(min_bin, max_bin, num_bins, dtype=x.dtype, device=x.device) ** 2
    upper = torch.cat([lower[1:], lower.new_tensor([1e8])])
    d2 = ((x[..., :, None, :] - x[..., None, :, :]) ** 2).sum(-1, keepdim=True)
    return ((d2 > lower) & (d2 < upper)).to(x.dtype)


def _dihedral_sin_cos(a0: Tensor, a1: Tensor, a2: Tensor, a3: Tensor) -> Tensor:
    """(sin, cos) ``[..., 2]`` of the torsion ``a0–a1–a2–a3``: ``a3`` in the frame with origin ``a2``,
    x along ``a2 − a1`` and y towards ``a0``; normalised with ε = 1e-8 (AF2 supp. 1.9.1).

    A torsion whose frame is undefined (``a0``, ``a1``, ``a2`` collinear or coincident, e.g. the
    zero-padded residue before the first one) is (0, 0)."""
    local = invert_apply(frame_from_neg_x(a1, a2, a0), a3)
    yz = torch.stack([local[..., 2], local[..., 1]], -1)
    sin_cos = yz / torch.sqrt((yz ** 2).sum(-1, keepdim=True) + 1e-8)
    v1, v2 = a2 - a1, a0 - a2
    area2 = (torch.linalg.cross(v1, v2) ** 2).sum(-1)
    defined = area2 > 1e-12 * (v1 ** 2).sum(-1) * (v2 ** 2).sum(-1)
    return sin_cos * defined[..., None].to(sin_cos.dtype)


def _table(name: str, like: Tensor) -> Tensor:
    return torch.as_tensor(getattr(rc, name), device=like.device)


def torsion_angles(aatype: Tensor, atom37: Tensor, mask37: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The seven torsions of each residue from its atoms (AF2 ``atom37_to_torsion_angles``).

    ``aatype [*, N]``, ``atom37 [*, N, 37, 3]``, ``mask37 [*, N, 37]`` (float) →
    ``(sin_cos [*, N, 7, 2], alt_sin_cos [*, N, 7, 2], mask [*, N, 7])`` in the order
    pre-ω, φ, ψ, χ1–χ4. The previous residue is the preceding row (zero before the first).
    ψ is measured on O and negated; ``alt`` negates π-periodic χ. As in AF2 the values are not
    multiplied by the mask (the mask is a separate feature); torsions with an undefined frame
    (the first residue's pre-ω, absent χ) are (0, 0). The first residue's φ (mask 0) is measured
    against the zero-padded previous residue at the coordinate origin, as in AF2, so that one
    masked value is invariant to rotations about the origin but not to translations.
    """
    pad = torch.zeros_like(atom37[..., :1, :, :])
    prev = torch.cat([pad, atom37[..., :-1, :, :]], -3)
    prev_mask = torch.cat([torch.zeros_like(mask37[..., :1, :]), mask37[..., :-1, :]], -2)
    x = lambda i: atom37[..., i, :]  # noqa: E731
    omega = _dihedral_sin_cos(prev[..., _CA, :], prev[..., _C, :], x(_N), x(_CA))
    phi = _dihedral_sin_cos(prev[..., _C, :], x(_N), x(_CA), x(_C))
    psi = -_dihedral_sin_cos(x(_N), x(_CA), x(_C), x(_O))
    chi_idx = _table("CHI_ATOM37", aatype)[aatype.long()]  # [*, N, 4, 4]
    gathered = torch.gather(atom37[..., None, :, :].expand(*chi_idx.shape[:-1], 37, 3), -2,
                            chi_idx[..., None].expand(*chi_idx.shape, 3))  # [*, N, 4, 4, 3]
    chis = _dihedral_sin_cos(*gathered.unbind(-2))
    chi_atoms_present = torch.gather(mask37[..., None, :].expand(*chi_idx.shape[:-1], 37), -1, chi_idx).prod(-1)
    m = lambda i: mask37[..., i]  # noqa: E731
    mask = torch.stack([
        prev_mask[..., _CA] * prev_mask[..., _C] * m(_N) * m(_CA),
        prev_mask[..., _C] * m(_N) * m(_CA) * m(_C),
        m(_N) * m(_CA) * m(_C) * m(_O),
    ], -1)
    chi_mask = _table("CHI_MASK", aatype).to(mask37.dtype)[aatype.long()] * chi_atoms_present
    mask = torch.cat([mask, chi_mask], -1)
    sin_cos = torch.cat([omega[..., None, :], phi[..., None, :], psi[..., None, :], chis], -2)
    periodic = torch.cat([torch.zeros_like(mask[..., :3], dtype=torch.bool),
                          _table("CHI_PI_PERIODIC", aatype)[aatype.long()]], -1)
    alt = torch.where(periodic[..., None], -sin_cos, sin_cos)
    return sin_cos, alt, mask


def template_angle_features(template_aatype: Tensor, atom37: Tensor, mask37: Tensor) -> tuple[Tensor, Tensor]:
    """Template single features (57 channels): aatype one-hot 22, torsions 14, alternative
    torsions 14, torsion mask 7 → ``([*, T, N, 57], psi_mask [*, T, N])``."""
    sin_cos, alt, mask = torsion_angles(template_aatype, atom37, mask37)
    onehot = torch.nn.functional.one_hot(template_aatype.long(), 22).to(atom37.dtype)
    feat = torch.cat([onehot, sin_cos.flatten(-2), alt.flatten(-2), mask], -1)
    return feat, mask[..., 2]


def template_pair_features(batch: dict[str, Tensor], dgram_bins: tuple[float, float, int],
                           use_unit_vector: bool) -> Tensor:
    """Template pair features (88 channels, AF2 Alg 2 line 9 inputs) ``[*, T, N, N, 88]``:
    pseudo-β distogram (39 bins 3.25–50.75 Å), pseudo-β pair mask, aatype of j and of i (22 each),
    unit vector from i's backbone frame to j's Cα (zero unless ``use_unit_vector``), backbone pair
    mask; everything multiplied by the backbone pair mask."""
    pb, pb_mask = batch["template_pseudo_beta"], batch["template_pseudo_beta_mask"]
    dgram = squared_distance_onehot(pb, *dgram_bins)
    pb_mask_2d = pb_mask[..., :, None] * pb_mask[..., None, :]
    aatype = torch.nn.functional.one_hot(batch["template_aatype"].long(), 22).to(pb.dtype)
    n_res = aatype.shape[-2]
    pos, m37 = batch["template_all_atom_positions"], batch["template_all_atom_masks"]
    bb_mask = m37[..., _N] * m37[..., _CA] * m37[..., _C]
    bb_mask_2d = bb_mask[..., :, None] * bb_mask[..., None, :]
    if use_unit_vector:
        rot, trans = rigid_from_3_points(pos[..., _N, :], pos[..., _CA, :], pos[..., _C, :])
        local = invert_apply((rot[..., :, None, :, :], trans[..., :, None, :]), trans[..., None, :, :])
        unit = local * torch.rsqrt(1e-6 + (local ** 2).sum(-1, keepdim=True)) * bb_mask_2d[..., None]
    else:
        unit = torch.zeros_like(dgram[..., :3])
    feats = [dgram, pb_mask_2d[..., None],
             aatype[..., None, :, :].expand(*aatype.shape[:-2], n_res, n_res, 22),
             aatype[..., :, None, :].expand(*aatype.shape[:-2], n_res, n_res, 22),
             unit, bb_mask_2d[..., None]]
    return torch.cat(feats, -1) * bb_mask_2d[..., None]
