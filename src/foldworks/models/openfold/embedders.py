"""Input and recycling embedders (AF2 supplement 1.5, Alg 3, 4, 32).

Shapes: target features ``[B, L, tf_dim]``, MSA features ``[B, N, L, msa_dim]`` → MSA
representation ``m [B, N, L, c_m]`` and pair representation ``z [B, L, L, c_z]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class InputEmbedder(nn.Module):
    """Alg 3 with relative positions (Alg 4, offsets clipped to ±``max_relpos`` residues, one-hot → linear)."""

    def __init__(self, tf_dim: int, msa_dim: int, c_m: int, c_z: int, max_relpos: int = 32) -> None:
        super().__init__()
        self.max_relpos = max_relpos
        self.left, self.right = nn.Linear(tf_dim, c_z), nn.Linear(tf_dim, c_z)
        self.relpos = nn.Linear(2 * max_relpos + 1, c_z)
        self.msa, self.tf_m = nn.Linear(msa_dim, c_m), nn.Linear(tf_dim, c_m)

    def forward(self, target_feat: Tensor, msa_feat: Tensor, residue_index: Tensor) -> tuple[Tensor, Tensor]:
        offset = residue_index[:, None, :] - residue_index[:, :, None]  # j − i
        onehot = F.one_hot(offset.clamp(-self.max_relpos, self.max_relpos) + self.max_relpos,
                           2 * self.max_relpos + 1).to(target_feat.dtype)
        z = self.left(target_feat)[:, :, None] + self.right(target_feat)[:, None] + self.relpos(onehot)
        m = self.msa(msa_feat) + self.tf_m(target_feat)[:, None]
        return m, z


class RecyclingEmbedder(nn.Module):
    """Alg 32: ``m_1 += LN(m_1^prev)``, ``z += LN(z^prev) + Linear(one-hot d^prev)``.

    ``d^prev`` are pseudo-Cβ distances (Å) of the previous cycle's structure in 15 bins with lower
    edges 3 3/8 … 21 3/8 Å (the last bin open); shorter distances fall in no bin (AF2 1.10).
    """

    def __init__(self, c_m: int, c_z: int, n_bins: int = 15, first: float = 3.375, last: float = 21.375) -> None:
        super().__init__()
        self.norm_m, self.norm_z = nn.LayerNorm(c_m), nn.LayerNorm(c_z)
        self.dist = nn.Linear(n_bins, c_z)
        self.register_buffer("lower", torch.linspace(first, last, n_bins), persistent=False)

    def forward(self, m_prev: Tensor, z_prev: Tensor, x_prev: Tensor) -> tuple[Tensor, Tensor]:
        """``m_prev [B, L, c_m]`` (first MSA row), ``z_prev``, ``x_prev [B, L, 3]`` → updates to add."""
        d = torch.sqrt(((x_prev[:, :, None] - x_prev[:, None]) ** 2).sum(-1) + 1e-8).float()[..., None]
        upper = torch.cat([self.lower[1:], self.lower.new_tensor([1e8])])
        onehot = ((d > self.lower) & (d < upper)).to(z_prev.dtype)
        return self.norm_m(m_prev), self.norm_z(z_prev) + self.dist(onehot)
