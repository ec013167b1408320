"""AlphaFold2 embedders: input (Alg 3–4), recycling (Alg 32), extra MSA (Alg 2 line 14) and
templates (Alg 2 lines 7–13, Alg 17).

Shapes: ``N`` residues, ``S`` MSA rows, ``T`` templates; every tensor may carry leading batch
dimensions ``*``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from foldworks.models.af2.evoformer import TemplatePairStack
from foldworks.models.af2.geometry import (
    pseudo_beta, squared_distance_onehot, template_angle_features, template_pair_features,
)
from foldworks.models.af2.primitives import Attention, Linear, mask_bias

if TYPE_CHECKING:
    from foldworks.models.af2.config import AF2Config


class InputEmbedder(nn.Module):
    """Alg 3 + Alg 4: ``target_feat [*, N, 22]``, ``msa_feat [*, S, N, 49]``, ``residue_index [*, N]``
    → ``(m [*, S, N, c_m], z [*, N, N, c_z])``; relative positions ``i − j`` clipped to ±``relpos_k``."""

    def __init__(self, tf_dim: int, msa_dim: int, c_m: int, c_z: int, relpos_k: int) -> None:
        super().__init__()
        self.relpos_k = relpos_k
        self.linear_tf_z_i = Linear(tf_dim, c_z)
        self.linear_tf_z_j = Linear(tf_dim, c_z)
        self.linear_tf_m = Linear(tf_dim, c_m)
        self.linear_msa_m = Linear(msa_dim, c_m)
        self.linear_relpos = Linear(2 * relpos_k + 1, c_z)

    def forward(self, target_feat: Tensor, residue_index: Tensor, msa_feat: Tensor) -> tuple[Tensor, Tensor]:
        z = self.linear_tf_z_i(target_feat)[..., :, None, :] + self.linear_tf_z_j(target_feat)[..., None, :, :]
        offset = residue_index[..., :, None].long() - residue_index[..., None, :].long()
        onehot = torch.nn.functional.one_hot((offset + self.relpos_k).clamp(0, 2 * self.relpos_k),
                                             2 * self.relpos_k + 1).to(z.dtype)
        z = z + self.linear_relpos(onehot)
        m = self.linear_msa_m(msa_feat) + self.linear_tf_m(target_feat)[..., None, :, :]
        return m, z


class RecyclingEmbedder(nn.Module):
    """Alg 32: layer-normed previous first MSA row and pair, plus the previous pseudo-β distogram
    (15 bins, 3.25–20.75 Å, squared comparison) → ``(m0 update [*, N, c_m], z update [*, N, N, c_z])``."""

    def __init__(self, c_m: int, c_z: int, min_bin: float, max_bin: float, num_bins: int) -> None:
        super().__init__()
        self.bins = (min_bin, max_bin, num_bins)
        self.linear = Linear(num_bins, c_z)
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.layer_norm_z = nn.LayerNorm(c_z)

    def forward(self, aatype: Tensor, prev_m0: Tensor, prev_z: Tensor, prev_pos: Tensor) -> tuple[Tensor, Tensor]:
        dgram = squared_distance_onehot(pseudo_beta(aatype, prev_pos), *self.bins)
        return self.layer_norm_m(prev_m0), self.layer_norm_z(prev_z) + self.linear(dgram)


class ExtraMSAEmbedder(nn.Module):
    """Extra-MSA features (one-hot 23 + has_deletion + deletion_value = 25) → ``[*, S_e, N, c_e]``."""

    def __init__(self, c_in: int, c_e: int) -> None:
        super().__init__()
        self.linear = Linear(c_in, c_e)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        onehot = torch.nn.functional.one_hot(batch["extra_msa"].long(), 23).to(batch["extra_has_deletion"].dtype)
        feat = torch.cat([onehot, batch["extra_has_deletion"][..., None], batch["extra_deletion_value"][..., None]], -1)
        return self.linear(feat)


class TemplatePairEmbedder(nn.Module):
    """The template pair feature projection (88 → ``c_t``)."""

    def __init__(self, c_in: int, c_t: int) -> None:
        super().__init__()
        self.linear = Linear(c_in, c_t, init="relu")

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)


class TemplateSingleEmbedder(nn.Module):
    """Alg 2 line 7: template angle features (57) → two layers with ReLU → rows appended to the MSA."""

    def __init__(self, c_in: int, c_m: int) -> None:
        super().__init__()
        self.linear_1 = Linear(c_in, c_m, init="relu")
        self.linear_2 = Linear(c_m, c_m, init="relu")

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_2(torch.relu(self.linear_1(x)))


class TemplatePointwiseAttention(nn.Module):
    """Alg 17: each pair position attends over its templates (no gating)."""

    def __init__(self, c_t: int, c_z: int, c_hidden: int, num_heads: int) -> None:
        super().__init__()
        self.mha = Attention(c_z, c_t, c_hidden, num_heads, c_out=c_z, gating=False)

    def forward(self, t: Tensor, z: Tensor, template_mask: Tensor) -> Tensor:
        """``t [*, T, N, N, c_t]``, ``z [*, N, N, c_z]``, ``template_mask [*, T]`` → ``[*, N, N, c_z]``."""
        t = t.movedim(-4, -2)  # [*, N, N, T, c_t]
        bias = mask_bias(template_mask)[..., None, None, None, None, :]  # [*, 1, 1, 1(H), 1(Q), T]
        out = self.mha(z[..., None, :], t, [bias])[..., 0, :]
        return out * (template_mask.sum(-1) > 0).to(out.dtype)[..., None, None, None]


class TemplateEmbedder(nn.Module):
    """Templates → pair update (Alg 2 lines 8–13) and extra MSA rows (Alg 2 line 7)."""

    def __init__(self, cfg: "AF2Config") -> None:
        super().__init__()
        self.cfg = cfg
        self.template_single_embedder = TemplateSingleEmbedder(57, cfg.c_m)
        self.template_pair_embedder = TemplatePairEmbedder(cfg.template_dgram_bins[2] + 49, cfg.c_t)
        self.template_pair_stack = TemplatePairStack(
            cfg.num_template_blocks, cfg.c_t, cfg.template_c_hidden_mul, cfg.template_c_hidden_att,
            cfg.template_att_heads, cfg.template_transition_factor, cfg.pair_dropout)
        self.template_pointwise_att = TemplatePointwiseAttention(
            cfg.c_t, cfg.c_z, cfg.template_pointwise_c_hidden, cfg.template_pointwise_heads)

    def pair(self, batch: dict[str, Tensor], z: Tensor, pair_mask: Tensor) -> Tensor:
        """Pair update ``[*, N, N, c_z]`` from the templates; each template runs through the pair stack separately
        (templates are a batch dimension there)."""
        feats = template_pair_features(batch, self.cfg.template_dgram_bins, self.cfg.template_unit_vector)
        t = self.template_pair_stack(self.template_pair_embedder(feats), pair_mask[..., None, :, :])
        return self.template_pointwise_att(t, z, batch["template_mask"])

    def single(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Template MSA rows ``[*, T, N, c_m]`` and their mask (the ψ-torsion mask) ``[*, T, N]``."""
        feat, mask = template_angle_features(batch["template_aatype"], batch["template_all_atom_positions"],
                                             batch["template_all_atom_masks"])
        if "template_angle_feat" in batch:  # angle features supplied with the inputs
            feat = batch["template_angle_feat"]
        return self.template_single_embedder(feat), mask
