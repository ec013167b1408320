"""Evoformer stack (AF2 supplement 1.6, Alg 6–15).

Shapes: MSA ``m [B, N, L, c_m]``, pair ``z [B, L, L, c_z]``, masks bool ``msa_mask [B, N, L]``,
``pair_mask [B, L, L]``. Attention uses :func:`torch.nn.functional.scaled_dot_product_attention`
with an additive float bias (mask + pair bias); gating as AF2 (sigmoid gate on the attention
output, supp. 1.11.8). ``chunk_size`` slices attention, triangle and outer-product ops along a
batch-like axis (rows / residues) so peak memory scales with the chunk, with identical results.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

_INF = 1e9


def _chunked(fn, args: list[Tensor], dims: list[int | None], chunk_size: int | None, out_dim: int) -> Tensor:
    """Call ``fn(*args)`` on slices of size ``chunk_size`` along ``dims`` (``None`` = broadcast arg)."""
    sized = [a.shape[d] for a, d in zip(args, dims) if d is not None and a.shape[d] != 1]
    size = max(sized) if sized else 1
    if chunk_size is None or size <= chunk_size:
        return fn(*args)
    outs = []
    for start in range(0, size, chunk_size):
        part = [a if d is None or a.shape[d] == 1 else a.narrow(d, start, min(chunk_size, size - start))
                for a, d in zip(args, dims)]
        outs.append(fn(*part))
    return torch.cat(outs, out_dim)


class Attention(nn.Module):
    """Gated multi-head attention over axis −2 (supp. 1.11.8): ``x [..., S, c]`` → ``[..., S, c]``."""

    def __init__(self, c_in: int, c_hidden: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.c_hidden = n_heads, c_hidden
        self.qkv = nn.Linear(c_in, 3 * n_heads * c_hidden, bias=False)
        self.gate = nn.Linear(c_in, n_heads * c_hidden)
        self.out = nn.Linear(n_heads * c_hidden, c_in)
        nn.init.zeros_(self.gate.weight)
        nn.init.ones_(self.gate.bias)
        nn.init.zeros_(self.out.weight)  # AF2 "final" init: each residual update starts at 0
        nn.init.zeros_(self.out.bias)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        """``bias`` broadcastable to ``[..., H, S, S]`` (key mask and pair bias, added to logits)."""
        q, k, v = self.qkv(x).unflatten(-1, (3, self.n_heads, self.c_hidden)).unbind(-3)
        q, k, v = (t.transpose(-2, -3) for t in (q, k, v))  # [..., H, S, c]
        bias = bias.to(q.dtype).expand(*q.shape[:-1], k.shape[-2])
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # softmax(q·k/√c + bias) v
        o = o.transpose(-2, -3).flatten(-2)
        return self.out(o * torch.sigmoid(self.gate(x)))


def _mask_bias(mask: Tensor) -> Tensor:
    """Key mask ``[..., S]`` → additive bias ``[..., 1, 1, S]``."""
    return ((mask.float() - 1.0) * _INF)[..., None, None, :]


class MSARowAttentionWithPairBias(nn.Module):
    """Alg 7: attention along residues within each MSA row, biased by the pair representation."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int = 32, n_heads: int = 8) -> None:
        super().__init__()
        self.norm_m, self.norm_z = nn.LayerNorm(c_m), nn.LayerNorm(c_z)
        self.pair_bias = nn.Linear(c_z, n_heads, bias=False)
        self.attn = Attention(c_m, c_hidden, n_heads)

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor, chunk_size: int | None = None) -> Tensor:
        pair = self.pair_bias(self.norm_z(z)).permute(0, 3, 1, 2)[:, None]  # [B, 1, H, L, L]
        fn = lambda x, mb: self.attn(x, mb.to(pair.dtype) + pair)  # noqa: E731  (bias built per chunk)
        return _chunked(fn, [self.norm_m(m), _mask_bias(msa_mask)], [1, 1], chunk_size, 1)


class MSAColumnAttention(nn.Module):
    """Alg 8: attention along the MSA rows for each residue (column)."""

    def __init__(self, c_m: int, c_hidden: int = 32, n_heads: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(c_m)
        self.attn = Attention(c_m, c_hidden, n_heads)

    def forward(self, m: Tensor, msa_mask: Tensor, chunk_size: int | None = None) -> Tensor:
        x = self.norm(m).transpose(1, 2)  # [B, L, N, c]
        bias = _mask_bias(msa_mask.transpose(1, 2))  # [B, L, 1, 1, N]
        out = _chunked(lambda a, b: self.attn(a, b), [x, bias], [1, 1], chunk_size, 1)
        return out.transpose(1, 2)


class Transition(nn.Module):
    """Alg 9 / Alg 15: LayerNorm → Linear(n·c) → ReLU → Linear(c)."""

    def __init__(self, c: int, n: int = 4) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.lin1, self.lin2 = nn.Linear(c, n * c), nn.Linear(n * c, c)
        nn.init.zeros_(self.lin2.weight)
        nn.init.zeros_(self.lin2.bias)

    def forward(self, x: Tensor, chunk_size: int | None = None) -> Tensor:
        fn = lambda a: self.lin2(torch.relu(self.lin1(self.norm(a))))  # noqa: E731
        return _chunked(fn, [x], [1], chunk_size, 1)


class OuterProductMean(nn.Module):
    """Alg 10: ``z_ij += Linear(mean_s a_si ⊗ b_sj)`` over the present MSA rows."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(c_m)
        self.left, self.right = nn.Linear(c_m, c_hidden), nn.Linear(c_m, c_hidden)
        self.out = nn.Linear(c_hidden * c_hidden, c_z)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, m: Tensor, msa_mask: Tensor, chunk_size: int | None = None) -> Tensor:
        w = msa_mask.to(m.dtype)[..., None]  # [B, N, L, 1]
        h = self.norm(m)
        a, b = self.left(h) * w, self.right(h) * w
        norm = torch.einsum("bni,bnj->bij", w[..., 0], w[..., 0])[..., None]  # rows present for both

        def fn(a_part: Tensor, norm_part: Tensor) -> Tensor:
            outer = torch.einsum("bnic,bnjd->bijcd", a_part, b).flatten(-2)
            return self.out(outer) / (norm_part + 1e-3)

        return _chunked(fn, [a, norm], [2, 1], chunk_size, 1)


class TriangleMultiplication(nn.Module):
    """Alg 11 (``outgoing``: Σ_k a_ik b_jk) and Alg 12 (incoming: Σ_k a_ki b_kj)."""

    def __init__(self, c_z: int, c_hidden: int = 128, outgoing: bool = True) -> None:
        super().__init__()
        self.outgoing = outgoing
        self.norm_in, self.norm_out = nn.LayerNorm(c_z), nn.LayerNorm(c_hidden)
        self.proj, self.proj_gate = nn.Linear(c_z, 2 * c_hidden), nn.Linear(c_z, 2 * c_hidden)
        self.gate, self.out = nn.Linear(c_z, c_z), nn.Linear(c_hidden, c_z)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, z: Tensor, pair_mask: Tensor, chunk_size: int | None = None) -> Tensor:
        x = self.norm_in(z)
        ab = self.proj(x) * torch.sigmoid(self.proj_gate(x)) * pair_mask.to(z.dtype)[..., None]
        a, b = ab.chunk(2, -1)
        if not self.outgoing:  # incoming = outgoing on the transposed pair
            a, b = a.transpose(1, 2), b.transpose(1, 2)
        fn = lambda a_part: torch.einsum("bikc,bjkc->bijc", a_part, b)  # noqa: E731
        prod = _chunked(fn, [a], [1], chunk_size, 1)
        return torch.sigmoid(self.gate(x)) * self.out(self.norm_out(prod))


class TriangleAttention(nn.Module):
    """Alg 13 (starting node: row i attends over j with bias b_jk) and Alg 14 (ending node, on zᵀ)."""

    def __init__(self, c_z: int, c_hidden: int = 32, n_heads: int = 4, starting: bool = True) -> None:
        super().__init__()
        self.starting = starting
        self.norm = nn.LayerNorm(c_z)
        self.bias = nn.Linear(c_z, n_heads, bias=False)
        self.attn = Attention(c_z, c_hidden, n_heads)

    def forward(self, z: Tensor, pair_mask: Tensor, chunk_size: int | None = None) -> Tensor:
        if not self.starting:
            z, pair_mask = z.transpose(1, 2), pair_mask.transpose(1, 2)
        x = self.norm(z)
        tri = self.bias(x).permute(0, 3, 1, 2)[:, None]  # [B, 1, H, L, L]
        fn = lambda a, mb: self.attn(a, mb.to(tri.dtype) + tri)  # noqa: E731  (bias [B, chunk, H, L, L] per chunk)
        out = _chunked(fn, [x, _mask_bias(pair_mask)], [1, 1], chunk_size, 1)
        return out.transpose(1, 2) if not self.starting else out


class _RowDropout(nn.Module):
    """Dropout with the mask shared along one axis (AF2 1.11.6: rows for MSA/pair-row updates)."""

    def __init__(self, p: float, shared_dim: int) -> None:
        super().__init__()
        self.p, self.shared_dim = p, shared_dim

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        shape = list(x.shape)
        shape[self.shared_dim] = 1
        keep = torch.bernoulli(torch.full(shape, 1.0 - self.p, device=x.device, dtype=x.dtype))
        return x * keep / (1.0 - self.p)


class EvoformerBlock(nn.Module):
    """Alg 6: MSA stack (row attn, column attn, transition) → outer-product mean → pair stack."""

    def __init__(self, c_m: int, c_z: int, c_hidden_msa: int = 32, n_heads_msa: int = 8, c_hidden_opm: int = 32,
                 c_hidden_mul: int = 128, c_hidden_tri: int = 32, n_heads_tri: int = 4, transition_n: int = 4,
                 msa_dropout: float = 0.15, pair_dropout: float = 0.25) -> None:
        super().__init__()
        self.row_attn = MSARowAttentionWithPairBias(c_m, c_z, c_hidden_msa, n_heads_msa)
        self.col_attn = MSAColumnAttention(c_m, c_hidden_msa, n_heads_msa)
        self.msa_transition = Transition(c_m, transition_n)
        self.opm = OuterProductMean(c_m, c_z, c_hidden_opm)
        self.tri_mul_out = TriangleMultiplication(c_z, c_hidden_mul, outgoing=True)
        self.tri_mul_in = TriangleMultiplication(c_z, c_hidden_mul, outgoing=False)
        self.tri_att_start = TriangleAttention(c_z, c_hidden_tri, n_heads_tri, starting=True)
        self.tri_att_end = TriangleAttention(c_z, c_hidden_tri, n_heads_tri, starting=False)
        self.pair_transition = Transition(c_z, transition_n)
        self.msa_drop = _RowDropout(msa_dropout, 1)
        self.pair_drop_row, self.pair_drop_col = _RowDropout(pair_dropout, 1), _RowDropout(pair_dropout, 2)

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor,
                chunk_size: int | None = None) -> tuple[Tensor, Tensor]:
        m = m + self.msa_drop(self.row_attn(m, z, msa_mask, chunk_size))
        m = m + self.col_attn(m, msa_mask, chunk_size)
        m = m + self.msa_transition(m, chunk_size)
        z = z + self.opm(m, msa_mask, chunk_size)
        z = z + self.pair_drop_row(self.tri_mul_out(z, pair_mask, chunk_size))
        z = z + self.pair_drop_row(self.tri_mul_in(z, pair_mask, chunk_size))
        z = z + self.pair_drop_row(self.tri_att_start(z, pair_mask, chunk_size))
        z = z + self.pair_drop_col(self.tri_att_end(z, pair_mask, chunk_size))
        z = z + self.pair_transition(z, chunk_size)
        return m, z


class EvoformerStack(nn.Module):
    """Alg 6 repeated ``n_blocks`` times; optional activation checkpointing per block (non-reentrant)."""

    def __init__(self, n_blocks: int, c_m: int, c_z: int, activation_checkpointing: bool = False, **block_kwargs) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([EvoformerBlock(c_m, c_z, **block_kwargs) for _ in range(n_blocks)])
        self.activation_checkpointing = activation_checkpointing

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor,
                chunk_size: int | None = None) -> tuple[Tensor, Tensor]:
        for block in self.blocks:
            if self.activation_checkpointing and torch.is_grad_enabled():
                m, z = checkpoint(block, m, z, msa_mask, pair_mask, chunk_size, use_reentrant=False)
            else:
                m, z = block(m, z, msa_mask, pair_mask, chunk_size)
        return m, z
