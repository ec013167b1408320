"""Auxiliary heads (AF2 supplement 1.9.6–1.9.9, Alg 29).

Pair ``z [B, L, L, c_z]``, single ``s [B, L, c_s]``, MSA ``m [B, N, L, c_m]``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from foldworks.models.common import bin_centers

DISTOGRAM_BINS = (64, 2.3125, 21.6875)  # supp. 1.9.8: 64 bins, 62 equal inner bins + 2 open
PAE_BINS = (64, 0.0, 31.0)  # supp. 1.9.7: 64 bins of width 0.5 Å, the last open (≥ 31 Å)
PLDDT_BINS = 50  # Alg 29: lDDT-Cα in 50 bins of width 0.02
MSA_CLASSES = 23  # 20 amino acids + X + gap + mask token (supp. 1.9.9)


class DistogramHead(nn.Module):
    """Supp. 1.9.8: symmetrised linear projection of the pair representation → ``[B, L, L, 64]``."""

    def __init__(self, c_z: int, n_bins: int = DISTOGRAM_BINS[0]) -> None:
        super().__init__()
        self.lin = nn.Linear(c_z, n_bins)

    def forward(self, z: Tensor) -> Tensor:
        logits = self.lin(z)
        return logits + logits.transpose(1, 2)


class MaskedMSAHead(nn.Module):
    """Supp. 1.9.9: linear projection of the MSA representation → 23 token logits ``[B, N, L, 23]``."""

    def __init__(self, c_m: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c_m, MSA_CLASSES)

    def forward(self, m: Tensor) -> Tensor:
        return self.lin(m)


class PLDDTHead(nn.Module):
    """Alg 29: LN → Linear → ReLU → Linear → ReLU → Linear on the final single repr → ``[B, L, 50]``."""

    def __init__(self, c_s: int, c_hidden: int = 128, n_bins: int = PLDDT_BINS) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(c_s), nn.Linear(c_s, c_hidden), nn.ReLU(),
                                 nn.Linear(c_hidden, c_hidden), nn.ReLU(), nn.Linear(c_hidden, n_bins))
        self.register_buffer("centers", (torch.arange(n_bins) + 0.5) / n_bins, persistent=False)

    def forward(self, s: Tensor) -> tuple[Tensor, Tensor]:
        """Returns ``(logits [B, L, 50], plddt [B, L] in 0..1)`` (expected bin centre)."""
        logits = self.net(s)
        return logits, torch.softmax(logits.float(), -1) @ self.centers


class PAEHead(nn.Module):
    """Supp. 1.9.7: linear projection of the pair representation → aligned-error logits ``[B, L, L, 64]``."""

    def __init__(self, c_z: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c_z, PAE_BINS[0])
        self.register_buffer("centers", pae_bin_centers(), persistent=False)

    def forward(self, z: Tensor) -> Tensor:
        return self.lin(z)


def pae_bin_centers() -> Tensor:
    """Centres ``[64]`` (Å) of the PAE bins: 0.25, 0.75, … 31.25, and 31.75 for the open last bin."""
    n, first, last = PAE_BINS
    step = (last - first) / (n - 2)
    return first + step * (torch.arange(n, dtype=torch.float32) + 0.5)


def distogram_bin_centers() -> Tensor:
    """Centres ``[64]`` (Å) of the distogram bins."""
    return bin_centers(*DISTOGRAM_BINS)
