"""Building blocks of the ``msa_trunk`` family (small Evoformer-style MSA/pair layers, EGNN head).

Shapes: MSA ``m [B, N, L, c_m]``, pair ``z [B, L, L, c_z]``, single ``s [B, L, c_s]``,
coordinates ``x [B, L, 3]`` (Å). Masks are bool; padding never attends or is attended to.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_NEG = -1e4


class Transition(nn.Module):
    """LayerNorm → Linear(×2) → ReLU → Linear, residual added by the caller."""

    def __init__(self, dim: int, factor: int = 2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, factor * dim), nn.ReLU(),
                                 nn.Linear(factor * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class GatedAttention(nn.Module):
    """Multi-head gated self-attention over the second-to-last axis with an optional bias ``[B, H, Q, K]``."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, max(1, dim // n_heads)
        inner = self.n_heads * self.head_dim
        self.norm = nn.LayerNorm(dim)
        self.qkvg = nn.Linear(dim, 4 * inner)
        self.out = nn.Linear(inner, dim)

    def forward(self, x: Tensor, key_mask: Tensor, bias: Tensor | None = None) -> Tensor:
        """``x [..., S, dim]``, ``key_mask [..., S]`` bool, ``bias`` broadcastable to ``[..., H, S, S]``."""
        h = self.norm(x)
        q, k, v, g = self.qkvg(h).chunk(4, dim=-1)
        shape = (*x.shape[:-1], self.n_heads, self.head_dim)
        q, k, v = (t.reshape(shape).transpose(-2, -3) for t in (q, k, v))  # [..., H, S, d]
        mask_bias = (~key_mask[..., None, None, :]).to(q.dtype) * _NEG  # [..., 1, 1, S]
        if bias is not None:
            mask_bias = mask_bias + bias.to(q.dtype)
        mask_bias = mask_bias.expand(*q.shape[:-1], q.shape[-2])
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_bias)  # fused softmax(qk/√d + bias) v
        attn = attn.transpose(-2, -3).reshape(*x.shape[:-1], -1)
        return self.out(attn * torch.sigmoid(g))


class OuterProductMean(nn.Module):
    """MSA → pair update: mean over rows of outer products of two low-rank projections."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(c_m)
        self.left, self.right = nn.Linear(c_m, c_hidden), nn.Linear(c_m, c_hidden)
        self.out = nn.Linear(c_hidden * c_hidden, c_z)

    def forward(self, m: Tensor, msa_mask: Tensor) -> Tensor:
        h = self.norm(m)
        w = msa_mask.float()[:, :, None, None]
        a, b = self.left(h) * w, self.right(h) * w
        outer = torch.einsum("bnic,bnjd->bijcd", a, b) / w.sum(1)[:, None, None].clamp(min=1.0)
        return self.out(outer.flatten(-2))


class TriangleMultiplication(nn.Module):
    """Outgoing triangle multiplicative update of the pair representation."""

    def __init__(self, c_z: int, c_hidden: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(c_z)
        self.ab = nn.Linear(c_z, 4 * c_hidden)
        self.gate = nn.Linear(c_z, c_z)
        self.out_norm = nn.LayerNorm(c_hidden)
        self.out = nn.Linear(c_hidden, c_z)

    def forward(self, z: Tensor, mask2d: Tensor) -> Tensor:
        h = self.norm(z)
        a, ga, b, gb = self.ab(h).chunk(4, dim=-1)
        m = mask2d.float()[..., None]
        a, b = a * torch.sigmoid(ga) * m, b * torch.sigmoid(gb) * m
        count = mask2d.float().sum(-1).amax(-1).clamp(min=1.0)[:, None, None, None]
        update = torch.einsum("bikc,bjkc->bijc", a, b) / count
        return torch.sigmoid(self.gate(h)) * self.out(self.out_norm(update))


class TrunkBlock(nn.Module):
    """Row attention with pair bias, column attention, MSA transition, OPM, triangle update, pair transition."""

    def __init__(self, c_m: int, c_z: int, n_heads: int) -> None:
        super().__init__()
        self.pair_bias = nn.Sequential(nn.LayerNorm(c_z), nn.Linear(c_z, n_heads, bias=False))
        self.row_attn = GatedAttention(c_m, n_heads)
        self.col_attn = GatedAttention(c_m, n_heads)
        self.msa_transition = Transition(c_m)
        self.opm = OuterProductMean(c_m, c_z)
        self.tri = TriangleMultiplication(c_z)
        self.pair_transition = Transition(c_z)

    def forward(self, m: Tensor, z: Tensor, mask: Tensor, msa_mask: Tensor) -> tuple[Tensor, Tensor]:
        bias = self.pair_bias(z).permute(0, 3, 1, 2)[:, None]  # [B, 1, H, L, L]
        m = m + self.row_attn(m, mask[:, None, :].expand(-1, m.shape[1], -1), bias)
        mt = m.transpose(1, 2)  # [B, L, N, c_m]
        m = m + self.col_attn(mt, msa_mask[:, None, :].expand(-1, mt.shape[1], -1)).transpose(1, 2)
        m = m + self.msa_transition(m)
        mask2d = mask[:, :, None] & mask[:, None, :]
        z = z + self.opm(m, msa_mask)
        z = z + self.tri(z, mask2d)
        z = z + self.pair_transition(z)
        return m, z


class EGNNLayer(nn.Module):
    """E(3)-equivariant update of Cα coordinates from pair features, single features and distances.

    ``x_i += Σ_j w_ij (x_i − x_j) / (d_ij + 1) · φ(e_ij) / Σ_j w_ij`` and ``s_i += ψ(Σ_j w_ij e_ij / Σ_j w_ij)``
    with ``e_ij`` a function of ``z_ij``, ``s_i``, ``s_j`` and radial basis functions of ``d_ij`` (0..24 Å)
    and ``w_ij = sigmoid((cutoff − d_ij) / 2 Å)``: messages come from the current ~``cutoff`` Å
    neighbourhood, so behaviour does not depend on chain length (crops vs whole chains).
    """

    def __init__(self, c_s: int, c_z: int, c_e: int = 32, n_rbf: int = 16, cutoff: float = 20.0) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.register_buffer("rbf_centers", torch.linspace(0.0, 24.0, n_rbf), persistent=False)
        self.edge_in = nn.Linear(c_z + n_rbf, c_e)
        self.src, self.dst = nn.Linear(c_s, c_e, bias=False), nn.Linear(c_s, c_e, bias=False)
        self.edge_mlp = nn.Sequential(nn.SiLU(), nn.Linear(c_e, c_e), nn.SiLU())
        self.coord_out = nn.Linear(c_e, 1)
        self.node_out = nn.Sequential(nn.LayerNorm(c_e), nn.Linear(c_e, c_s))
        nn.init.normal_(self.coord_out.weight, std=1e-3)
        nn.init.zeros_(self.coord_out.bias)

    def forward(self, s: Tensor, z: Tensor, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        diff = x[:, :, None] - x[:, None]
        d = torch.sqrt((diff ** 2).sum(-1, keepdim=True) + 1e-8)
        rbf = torch.exp(-((d - self.rbf_centers) ** 2) / 2.0)
        e = self.edge_in(torch.cat([z, rbf], -1)) + self.src(s)[:, :, None] + self.dst(s)[:, None]
        e = self.edge_mlp(e)
        m2 = (mask[:, :, None] & mask[:, None, :]).float()[..., None]
        m2 = m2 * torch.sigmoid((self.cutoff - d) / 2.0)  # local neighbourhood: length-independent
        count = m2.sum(2).clamp(min=1e-3)
        x = x + (diff / (d + 1.0) * self.coord_out(e) * m2).sum(2) / count * 10.0
        s = s + self.node_out((e * m2).sum(2) / count)
        return s, x
