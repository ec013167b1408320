"""Side-chain torsion loss (AF2 supp. 1.9.1, Alg 27): chi angles supervised, all seven angles normed."""

from __future__ import annotations

import torch
from torch import Tensor

from foldworks.models.af2.loss import constants as rc


def _masked_mean(mask: Tensor, value: Tensor, dims: tuple[int, ...], eps: float) -> Tensor:
    mask = mask.expand_as(value)
    return (mask * value).sum(dims) / (eps + mask.sum(dims))


def chi_squared_error(angles: Tensor, aatype: Tensor, chi_mask: Tensor, chi_angles_sin_cos: Tensor,
                      eps: float = 1e-8) -> Tensor:
    """Masked mean over layers, residues and chis of the squared (sin, cos) chi error (Alg 27).

    Pi-periodic chis take the smaller error of the true and the pi-shifted angle.
    Args: ``angles [L, ..., N, 7, 2]`` normalised predictions; ``aatype [..., N]``;
    ``chi_mask [..., N, 4]``; ``chi_angles_sin_cos [..., N, 4, 2]``. Returns ``[...]``.
    """
    pred = angles[..., 3:, :]
    periodic = torch.as_tensor(rc.CHI_PI_PERIODIC, device=aatype.device).to(angles.dtype)[aatype]
    true = chi_angles_sin_cos[None]
    shifted = (1 - 2 * periodic)[..., None] * true
    err = torch.minimum(((true - pred) ** 2).sum(-1), ((shifted - pred) ** 2).sum(-1))  # [L, ..., N, 4]
    err = err.movedim(0, -3)  # [..., L, N, 4]
    return _masked_mean(chi_mask[..., None, :, :], err, (-1, -2, -3), eps)


def angle_norm_error(unnormalized_angles: Tensor, seq_mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Masked mean of |‖(a, b)‖ − 1| over layers, residues and all 7 torsions (Alg 27).

    Args: ``unnormalized_angles [L, ..., N, 7, 2]``, ``seq_mask [..., N]``. Returns ``[...]``.
    """
    norm = torch.sqrt((unnormalized_angles ** 2).sum(-1) + eps)
    err = (norm - 1.0).abs().movedim(0, -3)  # [..., L, N, 7]
    return _masked_mean(seq_mask[..., None, :, None], err, (-1, -2, -3), eps)


def supervised_chi_loss(angles: Tensor, unnormalized_angles: Tensor, aatype: Tensor, seq_mask: Tensor,
                        chi_mask: Tensor, chi_angles_sin_cos: Tensor, chi_weight: float = 0.5,
                        angle_norm_weight: float = 0.01, eps: float = 1e-8) -> Tensor:
    """``chi_weight · chi error + angle_norm_weight · norm error`` (Alg 27), averaged over the batch."""
    loss = chi_weight * chi_squared_error(angles, aatype, chi_mask, chi_angles_sin_cos, eps)
    loss = loss + angle_norm_weight * angle_norm_error(unnormalized_angles, seq_mask, eps)
    return loss.mean()
