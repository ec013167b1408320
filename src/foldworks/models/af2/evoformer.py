"""The Evoformer (AF2 Alg 6), the extra-MSA stack (Alg 18) and the template pair stack (Alg 16),
built from the MSA and pair updates of AF2 Alg 7–15.

Shapes: MSA ``m [*, S, N, c_m]`` with ``msa_mask [*, S, N]``; pair ``z [*, N, N, c_z]`` with
``pair_mask [*, N, N]``. Every update returns the residual increment; the blocks add it with AF2's
shared dropout (row-wise for row updates and the outgoing/incoming updates, column-wise for
the ending-node attention).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from foldworks.models.af2.primitives import (
    CPU_CHUNK_ELEMENTS,
    Attention,
    GlobalAttention,
    Linear,
    mask_bias,
    shared_dropout,
)


class MSARowAttentionWithPairBias(nn.Module):
    """Alg 7: gated self-attention along each MSA row, biased by the pair representation."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int, num_heads: int) -> None:
        super().__init__()
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.layer_norm_z = nn.LayerNorm(c_z)
        self.linear_z = Linear(c_z, num_heads, bias=False, init="default")
        self.mha = Attention(c_m, c_m, c_hidden, num_heads)

    def forward(self, m: Tensor, z: Tensor, mask: Tensor) -> Tensor:
        m = self.layer_norm_m(m)
        pair_bias = self.linear_z(self.layer_norm_z(z)).movedim(-1, -3)[..., None, :, :, :]  # [*, 1, H, N, N]
        return self.mha(m, m, [mask_bias(mask)[..., :, None, None, :], pair_bias])


class MSAColumnAttention(nn.Module):
    """Alg 8: gated self-attention along each MSA column."""

    def __init__(self, c_m: int, c_hidden: int, num_heads: int) -> None:
        super().__init__()
        self._msa_att = _ColumnInner(c_m, c_hidden, num_heads)

    def forward(self, m: Tensor, mask: Tensor) -> Tensor:
        return self._msa_att(m.transpose(-2, -3), mask.transpose(-1, -2)).transpose(-2, -3)


class _ColumnInner(nn.Module):
    def __init__(self, c_m: int, c_hidden: int, num_heads: int) -> None:
        super().__init__()
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.mha = Attention(c_m, c_m, c_hidden, num_heads)

    def forward(self, m: Tensor, mask: Tensor) -> Tensor:
        m = self.layer_norm_m(m)
        return self.mha(m, m, [mask_bias(mask)[..., :, None, None, :]])


class MSAColumnGlobalAttention(nn.Module):
    """Alg 19: global attention along each extra-MSA column."""

    def __init__(self, c_m: int, c_hidden: int, num_heads: int) -> None:
        super().__init__()
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.global_attention = GlobalAttention(c_m, c_hidden, num_heads)

    def forward(self, m: Tensor, mask: Tensor) -> Tensor:
        m_t = self.layer_norm_m(m.transpose(-2, -3))  # [*, N, S, c]
        return self.global_attention(m_t, mask.transpose(-1, -2)).transpose(-2, -3)


class Transition(nn.Module):
    """Alg 9 / 15: layer norm, ``c → factor·c`` ReLU, back to ``c``."""

    def __init__(self, c: int, factor: int) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(c)
        self.linear_1 = Linear(c, factor * c, init="relu")
        self.linear_2 = Linear(factor * c, c, init="final")

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_2(torch.relu_(self.linear_1(self.layer_norm(x))))  # in place: one buffer fewer


class OuterProductMean(nn.Module):
    """Alg 10: mean over MSA rows of the outer product of two projections → pair update.

    ``out[i, j] = W · vec(Σ_s a[s, i] ⊗ b[s, j]) / (1e-3 + Σ_s mask[s, i] mask[s, j]) + bias``.
    """

    def __init__(self, c_m: int, c_z: int, c_hidden: int, eps: float = 1e-3) -> None:
        super().__init__()
        self.eps = eps
        self.layer_norm = nn.LayerNorm(c_m)
        self.linear_1 = Linear(c_m, c_hidden)
        self.linear_2 = Linear(c_m, c_hidden)
        self.linear_out = Linear(c_hidden * c_hidden, c_z, init="final")

    def forward(self, m: Tensor, mask: Tensor) -> Tensor:
        m = self.layer_norm(m)
        a = self.linear_1(m) * mask[..., None]
        b = self.linear_2(m) * mask[..., None]
        norm = torch.einsum("...si,...sj->...ij", mask, mask)[..., None]
        rows = a.shape[-2]
        if a.device.type == "cpu":  # residues i per step: the [i, j, c, e] outer product stays in cache
            rows = max(1, CPU_CHUNK_ELEMENTS // (b.shape[-2] * a.shape[-1] * b.shape[-1]))
        parts = [self._project(a_i, b) for a_i in a.split(rows, dim=-2)]  # split: backward is one cat
        outer = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-3)
        return outer / (self.eps + norm)

    def _project(self, a: Tensor, b: Tensor) -> Tensor:
        """``linear_out(vec(Σ_s a[s, i] ⊗ b[s, j]))`` for ``a [*, S, I, c]``, ``b [*, S, J, c]`` → ``[*, I, J, c_z]``."""
        return self.linear_out(torch.einsum("...sic,...sje->...ijce", a, b).flatten(-2))


class TriangleMultiplication(nn.Module):
    """Alg 11 (outgoing: ``Σ_k a_ik b_jk``) and Alg 12 (incoming: ``Σ_k a_ki b_kj``)."""

    def __init__(self, c_z: int, c_hidden: int, outgoing: bool) -> None:
        super().__init__()
        self.outgoing = outgoing
        self.layer_norm_in = nn.LayerNorm(c_z)
        self.linear_a_p = Linear(c_z, c_hidden)
        self.linear_a_g = Linear(c_z, c_hidden, init="gating")
        self.linear_b_p = Linear(c_z, c_hidden)
        self.linear_b_g = Linear(c_z, c_hidden, init="gating")
        self.layer_norm_out = nn.LayerNorm(c_hidden)
        self.linear_z = Linear(c_hidden, c_z, init="final")
        self.linear_g = Linear(c_z, c_z, init="gating")

    def forward(self, z: Tensor, mask: Tensor) -> Tensor:
        z = self.layer_norm_in(z)
        # The four input projections as one 2-D product over every batch and residue pair, channel-
        # first ([4·c, *·N·N]): the triangle products are then batched matrix products over c without
        # transposing copies (a matmul broadcast over templates was 1.3-1.8x slower).
        lins = (self.linear_a_p, self.linear_a_g, self.linear_b_p, self.linear_b_g)
        weight = torch.cat([lin.weight for lin in lins])
        bias = torch.cat([lin.bias for lin in lins])
        proj = torch.addmm(bias[:, None], weight, z.reshape(-1, z.shape[-1]).T)
        proj = proj.unflatten(-1, z.shape[:-1]).movedim(0, -3)  # [*, 4·c, N, N]
        a_p, a_g, b_p, b_g = proj.chunk(4, dim=-3)
        mask = mask[..., None, :, :]
        a = mask * a_p * torch.sigmoid(a_g)
        b = mask * b_p * torch.sigmoid(b_g)
        if self.outgoing:
            x = torch.matmul(a, b.transpose(-1, -2))  # Σ_k a_ik b_jk
        else:
            x = torch.matmul(a.transpose(-1, -2), b)  # Σ_k a_ki b_kj
        x = self.linear_z(self.layer_norm_out(x.movedim(-3, -1)))
        return x * torch.sigmoid(self.linear_g(z))


class TriangleAttention(nn.Module):
    """Alg 13 (starting node, attention along rows) and Alg 14 (ending node, along columns)."""

    def __init__(self, c_z: int, c_hidden: int, num_heads: int, starting: bool) -> None:
        super().__init__()
        self.starting = starting
        self.layer_norm = nn.LayerNorm(c_z)
        self.linear = Linear(c_z, num_heads, bias=False, init="default")
        self.mha = Attention(c_z, c_z, c_hidden, num_heads)

    def forward(self, z: Tensor, mask: Tensor) -> Tensor:
        if not self.starting:
            z, mask = z.transpose(-2, -3).contiguous(), mask.transpose(-1, -2)
        z = self.layer_norm(z)
        tri_bias = self.linear(z).movedim(-1, -3)[..., None, :, :, :]  # [*, 1, H, N, N]
        out = self.mha(z, z, [mask_bias(mask)[..., :, None, None, :], tri_bias])
        return out if self.starting else out.transpose(-2, -3)


class PairStack(nn.Module):
    """The pair half of an Evoformer block (Alg 6 lines 6–10): triangle multiplications, triangle
    attentions, pair transition. ``attention_first`` gives the template pair stack's order (Alg 16)."""

    def __init__(self, c_z: int, c_hidden_mul: int, c_hidden_att: int, num_heads: int, factor: int,
                 dropout: float, attention_first: bool = False) -> None:
        super().__init__()
        self.dropout, self.attention_first = dropout, attention_first
        self.tri_mul_out = TriangleMultiplication(c_z, c_hidden_mul, outgoing=True)
        self.tri_mul_in = TriangleMultiplication(c_z, c_hidden_mul, outgoing=False)
        self.tri_att_start = TriangleAttention(c_z, c_hidden_att, num_heads, starting=True)
        self.tri_att_end = TriangleAttention(c_z, c_hidden_att, num_heads, starting=False)
        self.pair_transition = Transition(c_z, factor)

    def forward(self, z: Tensor, mask: Tensor) -> Tensor:
        p, train = self.dropout, self.training
        mul = [(self.tri_mul_out, -3), (self.tri_mul_in, -3)]
        att = [(self.tri_att_start, -3), (self.tri_att_end, -2)]
        for module, shared in (att + mul if self.attention_first else mul + att):
            z = z + shared_dropout(module(z, mask), p, shared, train)
        return z + self.pair_transition(z)


class EvoformerBlock(nn.Module):
    """Alg 6 (``global_column=False``) or the extra-MSA block of Alg 18 (``global_column=True``)."""

    def __init__(self, c_m: int, c_z: int, c_hidden_msa: int, msa_heads: int, c_hidden_opm: int,
                 c_hidden_mul: int, c_hidden_pair: int, pair_heads: int, factor: int,
                 msa_dropout: float, pair_dropout: float, global_column: bool = False) -> None:
        super().__init__()
        self.msa_dropout = msa_dropout
        self.msa_att_row = MSARowAttentionWithPairBias(c_m, c_z, c_hidden_msa, msa_heads)
        if global_column:
            self.msa_att_col: nn.Module = MSAColumnGlobalAttention(c_m, c_hidden_msa, msa_heads)
        else:
            self.msa_att_col = MSAColumnAttention(c_m, c_hidden_msa, msa_heads)
        self.msa_transition = Transition(c_m, factor)
        self.outer_product_mean = OuterProductMean(c_m, c_z, c_hidden_opm)
        self.pair_stack = PairStack(c_z, c_hidden_mul, c_hidden_pair, pair_heads, factor, pair_dropout)

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor) -> tuple[Tensor, Tensor]:
        m = m + shared_dropout(self.msa_att_row(m, z, msa_mask), self.msa_dropout, -3, self.training)
        m = m + self.msa_att_col(m, msa_mask)
        m = m + self.msa_transition(m)
        z = z + self.outer_product_mean(m, msa_mask)
        return m, self.pair_stack(z, pair_mask)


class BlockStack(nn.Module):
    """A sequence of :class:`EvoformerBlock` (attribute ``blocks``), optionally with activation
    checkpointing per block in training. With ``c_s`` set it adds the single projection of Alg 2
    line 17 (``linear``, on the first MSA row)."""

    def __init__(self, num_blocks: int, c_s: int | None, checkpointing: bool = False, **block_kwargs) -> None:
        super().__init__()
        self.checkpointing = checkpointing
        self.blocks = nn.ModuleList(EvoformerBlock(**block_kwargs) for _ in range(num_blocks))
        if c_s is not None:
            self.linear = Linear(block_kwargs["c_m"], c_s)

    def forward(self, m: Tensor, z: Tensor, msa_mask: Tensor, pair_mask: Tensor) -> tuple[Tensor, Tensor]:
        for block in self.blocks:
            if self.checkpointing and self.training and torch.is_grad_enabled():
                m, z = checkpoint(block, m, z, msa_mask, pair_mask, use_reentrant=False)
            else:
                m, z = block(m, z, msa_mask, pair_mask)
        return m, z


class TemplatePairStack(nn.Module):
    """Alg 16: the template pair stack (blocks in attention-first order) and its final layer norm."""

    def __init__(self, num_blocks: int, c_t: int, c_hidden_mul: int, c_hidden_att: int, num_heads: int,
                 factor: int, dropout: float) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            PairStack(c_t, c_hidden_mul, c_hidden_att, num_heads, factor, dropout, attention_first=True)
            for _ in range(num_blocks))
        self.layer_norm = nn.LayerNorm(c_t)

    def forward(self, t: Tensor, mask: Tensor) -> Tensor:
        for block in self.blocks:
            t = block(t, mask)
        return self.layer_norm(t)
