"""Reading an :class:`AF2Config` back from an AF2 state dict's shapes.

The weights fix every channel count, block count and head count that owns a parameter. Sizes that
leave no trace in the weights (structure-module layer count, template pointwise-attention heads,
recycles, dropout, bins) come from ``base``.
"""

from __future__ import annotations

import dataclasses
import re

import torch

from foldworks.models.af2.config import AF2Config


def _blocks(state: dict[str, torch.Tensor], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = {int(m.group(1)) for k in state if (m := pattern.match(k))}
    return max(found) + 1 if found else 0


def config_from_state_dict(state: dict[str, torch.Tensor], base: AF2Config) -> AF2Config:
    """Sizes read from shapes (``state`` uses our key names); missing anchors raise ``KeyError``."""
    s = lambda k: tuple(state[k].shape)  # noqa: E731
    e0, x0 = "evoformer.blocks.0.", "extra_msa_stack.blocks.0."
    c_m, c_z = s("input_embedder.linear_msa_m.weight")[0], s("input_embedder.linear_tf_z_i.weight")[0]
    c_e = s("extra_msa_embedder.linear.weight")[0]
    msa_heads = s(e0 + "msa_att_row.linear_z.weight")[0]
    pair_heads = s(e0 + "pair_stack.tri_att_start.linear.weight")[0]
    extra_heads = s(x0 + "msa_att_row.linear_z.weight")[0]
    ipa_heads = s("structure_module.ipa.head_weights")[0]
    templates = "template_embedder.template_pair_embedder.linear.weight" in state
    values = dict(
        c_m=c_m, c_z=c_z, c_s=s("evoformer.linear.weight")[0], c_e=c_e,
        relpos_k=(s("input_embedder.linear_relpos.weight")[1] - 1) // 2,
        num_evoformer_blocks=_blocks(state, "evoformer.blocks."),
        msa_heads=msa_heads, c_hidden_msa=s(e0 + "msa_att_row.mha.linear_q.weight")[0] // msa_heads,
        pair_heads=pair_heads, c_hidden_pair=s(e0 + "pair_stack.tri_att_start.mha.linear_q.weight")[0] // pair_heads,
        c_hidden_mul=s(e0 + "pair_stack.tri_mul_out.linear_a_p.weight")[0],
        c_hidden_opm=s(e0 + "outer_product_mean.linear_1.weight")[0],
        transition_factor=s(e0 + "msa_transition.linear_1.weight")[0] // c_m,
        num_extra_blocks=_blocks(state, "extra_msa_stack.blocks."),
        extra_msa_heads=extra_heads, extra_c_hidden_msa=s(x0 + "msa_att_row.mha.linear_q.weight")[0] // extra_heads,
        extra_c_hidden_mul=s(x0 + "pair_stack.tri_mul_out.linear_a_p.weight")[0],
        extra_c_hidden_opm=s(x0 + "outer_product_mean.linear_1.weight")[0],
        templates=templates,
        c_ipa=s("structure_module.ipa.linear_q.weight")[0] // ipa_heads, ipa_heads=ipa_heads,
        ipa_qk_points=s("structure_module.ipa.linear_q_points.linear.weight")[0] // (3 * ipa_heads),
        structure_transition_layers=_blocks(state, "structure_module.transition.layers."),
        c_resnet=s("structure_module.angle_resnet.linear_in.weight")[0],
        num_resnet_blocks=_blocks(state, "structure_module.angle_resnet.layers."),
        distogram_bins=s("aux_heads.distogram.linear.weight")[0],
        masked_msa_classes=s("aux_heads.masked_msa.linear.weight")[0],
        plddt_bins=s("aux_heads.plddt.linear_3.weight")[0], c_plddt=s("aux_heads.plddt.linear_1.weight")[0],
        ptm="aux_heads.tm.linear.weight" in state,
    )
    kv_points = s("structure_module.ipa.linear_kv_points.linear.weight")[0] // (3 * ipa_heads)
    values["ipa_v_points"] = kv_points - values["ipa_qk_points"]
    if values["ptm"]:
        values["pae_bins"] = s("aux_heads.tm.linear.weight")[0]
    if templates:
        t, t0 = "template_embedder.", "template_embedder.template_pair_stack.blocks.0."
        c_t = s(t + "template_pair_embedder.linear.weight")[0]
        t_heads = s(t0 + "tri_att_start.linear.weight")[0]
        pw_heads = base.template_pointwise_heads
        values.update(
            c_t=c_t, num_template_blocks=_blocks(state, t + "template_pair_stack.blocks."),
            template_att_heads=t_heads, template_c_hidden_att=s(t0 + "tri_att_start.mha.linear_q.weight")[0] // t_heads,
            template_c_hidden_mul=s(t0 + "tri_mul_out.linear_a_p.weight")[0],
            template_transition_factor=s(t0 + "pair_transition.linear_1.weight")[0] // c_t,
            template_pointwise_c_hidden=s(t + "template_pointwise_att.mha.linear_q.weight")[0] // pw_heads)
    return dataclasses.replace(base, **values)
