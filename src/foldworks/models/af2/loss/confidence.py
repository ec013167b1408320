"""Confidence-head losses, each gated on 0.1 Å ≤ resolution ≤ 3.0 Å: pLDDT (AF2 supp. 1.9.6),
experimentally resolved (1.9.10) and predicted aligned error / TM (1.9.7)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from foldworks.models.af2.loss.categorical import bin_index, softmax_cross_entropy
from foldworks.models.af2.loss.constants import CA37
from foldworks.models.af2.loss.geometry import from_tensor_4x4, from_tensor_7, invert_apply


def resolution_gate(resolution: Tensor, min_resolution: float = 0.1, max_resolution: float = 3.0) -> Tensor:
    """1 where ``min_resolution ≤ resolution ≤ max_resolution`` (Å), else 0 (float)."""
    return ((resolution >= min_resolution) & (resolution <= max_resolution)).float()


def lddt_ca(pred_ca: Tensor, true_ca: Tensor, mask: Tensor, cutoff: float = 15.0, eps: float = 1e-10) -> Tensor:
    """Per-residue lDDT-Cα in [0, 1] (AF2 supp. Alg 29 target; Mariani et al. 2013, no stereo checks).

    Args: ``pred_ca``, ``true_ca [..., N, 3]`` (Å), ``mask [..., N]``. Pairs within ``cutoff`` Å in the
    truth are scored on thresholds 0.5, 1, 2, 4 Å. Returns ``[..., N]``.
    """
    def dmat(x: Tensor) -> Tensor:
        d = x[..., :, None, :] - x[..., None, :, :]
        return torch.sqrt(eps + (d * d).sum(-1))

    d_true, d_pred = dmat(true_ca), dmat(pred_ca)
    n = mask.shape[-1]
    eye = torch.eye(n, device=mask.device, dtype=mask.dtype)
    to_score = (d_true < cutoff).to(mask.dtype) * mask[..., :, None] * mask[..., None, :] * (1 - eye)
    l1 = (d_true - d_pred).abs()
    score = 0.25 * sum((l1 < t).to(mask.dtype) for t in (0.5, 1.0, 2.0, 4.0))
    norm = 1.0 / (eps + to_score.sum(-1))  # reciprocal first, as OpenFold: scores like 0.1 sit on a bin edge
    return norm * (eps + (to_score * score).sum(-1))


def plddt_target_bins(final_atom_positions: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor,
                      cutoff: float = 15.0, no_bins: int = 50, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """lDDT-Cα of the final prediction (atom37, Å) against the truth, and its bin ``⌊50·lDDT⌋`` (≤ 49)."""
    score = lddt_ca(final_atom_positions[..., CA37, :], all_atom_positions[..., CA37, :],
                    all_atom_mask[..., CA37], cutoff, eps).detach()
    return score, torch.clamp(torch.floor(score * no_bins).long(), max=no_bins - 1)


def plddt_loss(logits: Tensor, final_atom_positions: Tensor, all_atom_positions: Tensor, all_atom_mask: Tensor,
               resolution: Tensor, cutoff: float = 15.0, no_bins: int = 50, min_resolution: float = 0.1,
               max_resolution: float = 3.0, eps: float = 1e-8) -> Tensor:
    """pLDDT-head cross-entropy against binned lDDT-Cα (AF2 supp. 1.9.6), masked by resolved Cα.

    Args: ``logits [..., N, no_bins]``, positions ``[..., N, 37, 3]`` (Å), ``all_atom_mask [..., N, 37]``,
    ``resolution [...]`` (Å). Returns the batch mean.
    """
    _, bins = plddt_target_bins(final_atom_positions, all_atom_positions, all_atom_mask, cutoff, no_bins, eps)
    errors = softmax_cross_entropy(logits, F.one_hot(bins, no_bins).to(logits.dtype))
    mask = all_atom_mask[..., CA37]
    loss = (errors * mask).sum(-1) / (eps + mask.sum(-1))
    return (loss * resolution_gate(resolution, min_resolution, max_resolution)).mean()


def experimentally_resolved_loss(logits: Tensor, atom37_atom_exists: Tensor, all_atom_mask: Tensor,
                                 resolution: Tensor, min_resolution: float = 0.1, max_resolution: float = 3.0,
                                 eps: float = 1e-8) -> Tensor:
    """Per-atom sigmoid cross-entropy of "resolved in the experiment" (AF2 supp. 1.9.10).

    The cross-entropy is evaluated in float64 and cast back, as in OpenFold. Args: ``logits``,
    ``atom37_atom_exists``, ``all_atom_mask`` ``[..., N, 37]``; ``resolution [...]`` (Å).
    """
    x, y = logits.double(), all_atom_mask.double()
    errors = (-y * F.logsigmoid(x) - (1 - y) * F.logsigmoid(-x)).to(logits.dtype)
    loss = (errors * atom37_atom_exists).sum(-1)
    loss = (loss / (eps + atom37_atom_exists.sum((-1, -2)))[..., None]).sum(-1)
    return (loss * resolution_gate(resolution, min_resolution, max_resolution)).mean()


def aligned_error_bins(final_affine_tensor: Tensor, backbone_rigid_tensor: Tensor, max_bin: float = 31.0,
                       no_bins: int = 64) -> Tensor:
    """Binned aligned error ``[..., N, N]`` (AF2 supp. 1.9.7): Cα j in frame i, predicted vs true.

    Edges ``linspace(0, max_bin, no_bins − 1)`` compared on squared errors (bin 0 only at zero error).
    Args: ``final_affine_tensor [..., N, 7]``, ``backbone_rigid_tensor [..., N, 4, 4]``.
    """
    def points(rot: Tensor, trans: Tensor) -> Tensor:
        return invert_apply((rot[..., :, None, :, :], trans[..., :, None, :]), trans[..., None, :, :])

    sq = ((points(*from_tensor_7(final_affine_tensor)) - points(*from_tensor_4x4(backbone_rigid_tensor))) ** 2).sum(-1)
    edges = torch.linspace(0.0, max_bin, no_bins - 1, device=sq.device, dtype=sq.dtype)
    return bin_index(sq.detach(), edges)


def tm_loss(logits: Tensor, final_affine_tensor: Tensor, backbone_rigid_tensor: Tensor,
            backbone_rigid_mask: Tensor, resolution: Tensor, max_bin: float = 31.0, no_bins: int = 64,
            min_resolution: float = 0.1, max_resolution: float = 3.0, eps: float = 1e-8) -> Tensor:
    """Predicted-aligned-error cross-entropy (AF2 supp. 1.9.7), averaged over valid pairs.

    OpenFold's form: the denominator is ``eps + 0.5 Σ mask_ij`` and the result is halved, which equals
    the plain masked mean up to eps. Args: ``logits [..., N, N, no_bins]``, ``resolution [...]`` (Å).
    """
    bins = aligned_error_bins(final_affine_tensor, backbone_rigid_tensor, max_bin, no_bins)
    errors = softmax_cross_entropy(logits, F.one_hot(bins, no_bins).to(logits.dtype))
    square = backbone_rigid_mask[..., :, None] * backbone_rigid_mask[..., None, :]
    loss = (errors * square).sum(-1)
    denom = eps + (0.5 * square).sum((-1, -2))
    loss = (loss / denom[..., None]).sum(-1) * 0.5
    return (loss * resolution_gate(resolution, min_resolution, max_resolution)).mean()
