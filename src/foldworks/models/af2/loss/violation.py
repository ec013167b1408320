"""Structural violation loss (AF2 supp. 1.9.11): peptide bonds and angles, steric clashes
between and within residues, on the last structure-module layer's atom14 positions.

Shapes: ``pos [..., N, 14, 3]`` (Å), ``exists [..., N, 14]``, ``residue_index [..., N]``,
``aatype [..., N]``. Distances get eps under the root (1e-6 for bonds/angles, 1e-10 for clashes).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from foldworks.models.af2.loss import constants as rc
from foldworks.models.af2.loss.stereo_chemistry import atom14_distance_bounds


def _norm(x: Tensor, eps: float) -> Tensor:
    return torch.sqrt(eps + (x * x).sum(-1))


def _flagged(loss: Tensor, mask: Tensor, error: Tensor, limit: Tensor | float, eps: float) -> tuple[Tensor, Tensor]:
    """Masked mean of a per-link loss, and the mask of links whose error exceeds ``limit``."""
    return (mask * loss).sum(-1) / (mask.sum(-1) + eps), mask * (error > limit)


def between_residue_bond_and_angle(pos: Tensor, exists: Tensor, residue_index: Tensor, aatype: Tensor,
                                   tolerance_factor: float = 12.0, eps: float = 1e-6) -> dict[str, Tensor]:
    """Flat-bottom losses on the C–N bond and the CA–C–N / C–N–CA angles of consecutive residues.

    Each link's error |x − mean| beyond ``tolerance_factor`` · stddev is penalised linearly.
    Returns the three masked means ``c_n_loss_mean``, ``ca_c_n_loss_mean``, ``c_n_ca_loss_mean``
    ``[...]``, ``per_residue_loss_sum [..., N]`` (each link split half/half between its residues) and
    ``per_residue_violation_mask [..., N]``.
    """
    ca, c, n_next, ca_next = pos[..., :-1, 1, :], pos[..., :-1, 2, :], pos[..., 1:, 0, :], pos[..., 1:, 1, :]
    m_ca, m_c, m_n, m_ca_next = exists[..., :-1, 1], exists[..., :-1, 2], exists[..., 1:, 0], exists[..., 1:, 1]
    no_gap = (residue_index[..., 1:] - residue_index[..., :-1] == 1).to(pos.dtype)
    next_pro = (aatype[..., 1:] == rc.PRO).to(pos.dtype)
    gt_len = (1 - next_pro) * rc.BETWEEN_RES_BOND_LENGTH_C_N[0] + next_pro * rc.BETWEEN_RES_BOND_LENGTH_C_N[1]
    gt_sd = ((1 - next_pro) * rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N[0]
             + next_pro * rc.BETWEEN_RES_BOND_LENGTH_STDDEV_C_N[1])
    c_n_len = _norm(c - n_next, eps)
    c_n_err = torch.sqrt(eps + (c_n_len - gt_len) ** 2)
    c_n_loss = F.relu(c_n_err - tolerance_factor * gt_sd)
    c_n_mean, c_n_viol = _flagged(c_n_loss, m_c * m_n * no_gap, c_n_err, tolerance_factor * gt_sd, eps)

    c_ca_unit = (ca - c) / _norm(ca - c, eps)[..., None]
    c_n_unit = (n_next - c) / c_n_len[..., None]
    n_ca_unit = (ca_next - n_next) / _norm(ca_next - n_next, eps)[..., None]
    losses = [c_n_loss]
    means, viols = [c_n_mean], [c_n_viol]
    for cos, (mean, sd), mask in (
        ((c_ca_unit * c_n_unit).sum(-1), rc.BETWEEN_RES_COS_ANGLE_CA_C_N, m_ca * m_c * m_n * no_gap),
        (((-c_n_unit) * n_ca_unit).sum(-1), rc.BETWEEN_RES_COS_ANGLE_C_N_CA, m_c * m_n * m_ca_next * no_gap),
    ):
        err = torch.sqrt(eps + (cos - mean) ** 2)
        loss = F.relu(err - tolerance_factor * sd)
        m, v = _flagged(loss, mask, err, tolerance_factor * sd, eps)
        losses.append(loss)
        means.append(m)
        viols.append(v)
    per_link = sum(losses)
    per_residue = 0.5 * (F.pad(per_link, (0, 1)) + F.pad(per_link, (1, 0)))
    viol = torch.stack(viols, -2).amax(-2)
    viol = torch.maximum(F.pad(viol, (0, 1)), F.pad(viol, (1, 0)))
    return {"c_n_loss_mean": means[0], "ca_c_n_loss_mean": means[1], "c_n_ca_loss_mean": means[2],
            "per_residue_loss_sum": per_residue, "per_residue_violation_mask": viol}


def between_residue_clash(pos: Tensor, exists: Tensor, radius: Tensor, residue_index: Tensor,
                          overlap_tolerance: float = 1.5, eps: float = 1e-10) -> dict[str, Tensor]:
    """Steric clashes between atoms of different residues: overlap beyond the vdW sum − tol.

    The peptide C–N pair of consecutive residues and every SG–SG pair (atom14 slot 5, as in AF2,
    for disulfides) are exempt. ``radius [..., N, 14]`` Å. Returns ``mean_loss [...]``,
    ``per_atom_loss_sum [..., N, 14]`` and ``per_atom_clash_mask [..., N, 14]``.
    """
    d = _norm(pos[..., :, None, :, None, :] - pos[..., None, :, None, :, :], eps)  # [..., N, N, 14, 14]
    ri = residue_index[..., :, None, None, None]
    rj = residue_index[..., None, :, None, None]
    mask = exists[..., :, None, :, None] * exists[..., None, :, None, :] * (ri < rj)
    slot = torch.arange(14, device=pos.device)
    c_n = ((ri + 1) == rj) * ((slot == 2)[:, None] & (slot == 0)[None, :])
    sg_sg = ((slot == 5)[:, None] & (slot == 5)[None, :])
    mask = mask * ~c_n * ~sg_sg
    lower = mask * (radius[..., :, None, :, None] + radius[..., None, :, None, :])
    err = mask * F.relu(lower - overlap_tolerance - d)
    clash = mask * (d < lower - overlap_tolerance)
    return {
        "mean_loss": err.sum((-1, -2, -3, -4)) / (1e-6 + mask.sum((-1, -2, -3, -4))),
        "per_atom_loss_sum": err.sum((-4, -2)) + err.sum((-3, -1)),
        "per_atom_clash_mask": torch.maximum(clash.amax((-4, -2)), clash.amax((-3, -1))),
    }


@functools.lru_cache(maxsize=4)
def _bounds(overlap_tolerance: float, tolerance_factor: float) -> tuple[np.ndarray, np.ndarray]:
    return atom14_distance_bounds(overlap_tolerance, tolerance_factor)


def within_residue_violations(pos: Tensor, exists: Tensor, aatype: Tensor, overlap_tolerance: float = 1.5,
                              tolerance_factor: float = 12.0, eps: float = 1e-10) -> dict[str, Tensor]:
    """Intra-residue pair distances outside [lower, upper] (bounds from :mod:`stereo_chemistry`).

    Returns ``per_atom_loss_sum [..., N, 14]`` and ``per_atom_violations [..., N, 14]``.
    """
    lo, up = (torch.as_tensor(b, device=pos.device).to(pos.dtype)[aatype]
              for b in _bounds(overlap_tolerance, tolerance_factor))
    mask = (1 - torch.eye(14, device=pos.device, dtype=pos.dtype)) * exists[..., :, None] * exists[..., None, :]
    d = _norm(pos[..., :, None, :] - pos[..., None, :, :], eps)
    loss = mask * (F.relu(lo - d) + F.relu(d - up))
    viol = mask * ((d < lo) | (d > up))
    return {"per_atom_loss_sum": loss.sum(-2) + loss.sum(-1),
            "per_atom_violations": torch.maximum(viol.amax(-2), viol.amax(-1))}


def violation_loss(pos: Tensor, batch: dict[str, Tensor], violation_tolerance_factor: float = 12.0,
                   clash_overlap_tolerance: float = 1.5, eps: float = 1e-8) -> tuple[Tensor, dict[str, Tensor]]:
    """Total violation loss (supp. 1.9.11; OpenFold ``violation_loss``, average_clashes off).

    ``bonds + two angles + Σ_atoms(between + within clash loss) / (eps + Σ atom14_atom_exists)``.
    ``batch`` holds ``atom14_atom_exists``, ``residue_index``, ``aatype``. Returns the batch-mean
    loss and the parts (per-term values and ``per_residue_violation_mask``).
    """
    exists, aatype = batch["atom14_atom_exists"], batch["aatype"]
    conn = between_residue_bond_and_angle(pos, exists, batch["residue_index"], aatype, violation_tolerance_factor)
    radius = exists * torch.as_tensor(rc.ATOM14_VDW_RADIUS, device=pos.device).to(pos.dtype)[aatype]
    clash = between_residue_clash(pos, exists, radius, batch["residue_index"], clash_overlap_tolerance)
    within = within_residue_violations(pos, exists, aatype, clash_overlap_tolerance, violation_tolerance_factor)
    clash_term = (clash["per_atom_loss_sum"] + within["per_atom_loss_sum"]).sum((-1, -2))
    clash_term = clash_term / (eps + exists.sum((-1, -2)))
    loss = conn["c_n_loss_mean"] + conn["ca_c_n_loss_mean"] + conn["c_n_ca_loss_mean"] + clash_term
    flagged = torch.stack([conn["per_residue_violation_mask"], clash["per_atom_clash_mask"].amax(-1),
                           within["per_atom_violations"].amax(-1)], 0).amax(0)
    parts = {"bonds_c_n": conn["c_n_loss_mean"], "angles_ca_c_n": conn["ca_c_n_loss_mean"],
             "angles_c_n_ca": conn["c_n_ca_loss_mean"], "clash_term": clash_term,
             "between_residue_clash_mean": clash["mean_loss"], "per_residue_violation_mask": flagged}
    return loss.mean(), parts
