"""AlphaFold2 output heads (supp. 1.9) and confidence metrics (supp. 1.9.6–1.9.7).

Shapes: ``N`` residues, ``S`` MSA rows; logits are float tensors over the last axis.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from foldworks.models.af2.primitives import Linear


class DistogramHead(nn.Module):
    """Pair → symmetrised distogram logits ``[*, N, N, num_bins]`` (supp. 1.9.8)."""

    def __init__(self, c_z: int, num_bins: int) -> None:
        super().__init__()
        self.linear = Linear(c_z, num_bins, init="final")

    def forward(self, z: Tensor) -> Tensor:
        logits = self.linear(z)
        return logits + logits.transpose(-2, -3)


class MaskedMSAHead(nn.Module):
    """MSA rows (not template rows) → masked-MSA logits ``[*, S, N, 23]`` (supp. 1.9.9)."""

    def __init__(self, c_m: int, num_classes: int) -> None:
        super().__init__()
        self.linear = Linear(c_m, num_classes, init="final")

    def forward(self, m: Tensor) -> Tensor:
        return self.linear(m)


class PLDDTHead(nn.Module):
    """Alg 29: structure-module single → pLDDT bin logits ``[*, N, num_bins]``."""

    def __init__(self, c_s: int, c_hidden: int, num_bins: int) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(c_s)
        self.linear_1 = Linear(c_s, c_hidden, init="relu")
        self.linear_2 = Linear(c_hidden, c_hidden, init="relu")
        self.linear_3 = Linear(c_hidden, num_bins, init="final")

    def forward(self, s: Tensor) -> Tensor:
        return self.linear_3(torch.relu(self.linear_2(torch.relu(self.linear_1(self.layer_norm(s))))))


class ExperimentallyResolvedHead(nn.Module):
    """Evoformer single → per-atom37 resolved logits ``[*, N, 37]`` (supp. 1.9.10)."""

    def __init__(self, c_s: int, num_atoms: int = 37) -> None:
        super().__init__()
        self.linear = Linear(c_s, num_atoms, init="final")

    def forward(self, s: Tensor) -> Tensor:
        return self.linear(s)


class TMScoreHead(nn.Module):
    """Pair → predicted-aligned-error bin logits ``[*, N, N, num_bins]`` (supp. 1.9.7)."""

    def __init__(self, c_z: int, num_bins: int) -> None:
        super().__init__()
        self.linear = Linear(c_z, num_bins, init="final")

    def forward(self, z: Tensor) -> Tensor:
        return self.linear(z)


def plddt(logits: Tensor) -> Tensor:
    """Expected lDDT-Cα in 0–100 from ``[*, N, B]`` logits (bin centres ``(k + 0.5)/B``)."""
    num_bins = logits.shape[-1]
    centers = (torch.arange(num_bins, dtype=logits.dtype, device=logits.device) + 0.5) / num_bins
    return (torch.softmax(logits, -1) * centers).sum(-1) * 100.0


def aligned_error_bin_centers(breaks: Tensor) -> Tensor:
    """Bin centres of the PAE head: ``breaks + step/2``, plus one more step for the open last bin (Å)."""
    step = breaks[1] - breaks[0]
    centers = breaks + step / 2
    return torch.cat([centers, centers[-1:] + step])


def pae_breaks(max_error_bin: float, num_bins: int, like: Tensor) -> Tensor:
    """``linspace(0, max_error_bin, num_bins − 1)`` (Å)."""
    return torch.linspace(0.0, max_error_bin, num_bins - 1, dtype=like.dtype, device=like.device)


def predicted_aligned_error(logits: Tensor, max_error_bin: float) -> dict[str, Tensor]:
    """Expected aligned error (Å) ``[*, N, N]``, its bin probabilities and the maximum (last centre)."""
    probs = torch.softmax(logits, -1)
    centers = aligned_error_bin_centers(pae_breaks(max_error_bin, logits.shape[-1], logits))
    return {"aligned_confidence_probs": probs, "predicted_aligned_error": (probs * centers).sum(-1),
            "max_predicted_aligned_error": centers[-1]}


def tm_d0(num_res: int) -> float:
    """TM-score distance scale ``d0 = 1.24 (max(N, 19) − 15)^{1/3} − 1.8`` (Å; supp. 1.9.7, Eq. 39)."""
    return 1.24 * (max(int(num_res), 19) - 15) ** (1.0 / 3) - 1.8


def tm_score_from_centers(logits: Tensor, centers: Tensor, residue_weights: Tensor | None = None) -> Tensor:
    """pTM (supp. 1.9.7, Eq. 40) of ``logits [N, N, B]`` over aligned-error bins with ``centers [B]``
    (Å): max over aligned residues i of the weighted mean over j of ``E[1 / (1 + (e / d0)²)]``.
    ``residue_weights [N]`` (default ones) select residues; ``d0`` from their count."""
    if residue_weights is None:
        residue_weights = logits.new_ones(logits.shape[-2])
    d0 = tm_d0(int(residue_weights.sum().item()))
    tm_per_bin = 1.0 / (1 + centers ** 2 / d0 ** 2)
    term = (torch.softmax(logits, -1) * tm_per_bin).sum(-1)  # [N, N]
    normed = residue_weights / (1e-8 + residue_weights.sum(-1, keepdim=True))
    per_alignment = (term * normed).sum(-1)
    return per_alignment[torch.argmax(per_alignment * residue_weights)]


def predicted_tm_score(logits: Tensor, max_error_bin: float, residue_weights: Tensor | None = None) -> Tensor:
    """pTM of the PAE head's ``logits [N, N, B]`` (bins up to ``max_error_bin`` Å); see
    :func:`tm_score_from_centers`."""
    centers = aligned_error_bin_centers(pae_breaks(max_error_bin, logits.shape[-1], logits))
    return tm_score_from_centers(logits, centers, residue_weights)
