"""DeepMind AlphaFold2 parameters (``params_model_*.npz``) ↔ the foldworks AF2 state dict.

DeepMind stores flat keys ``alphafold/alphafold_iteration/<module path>//<name>`` with Haiku
layouts; the Evoformer, extra-MSA and template pair stacks are stacked on axis 0. Array transforms:
linear ``[in, out] → [out, in]``; multi-head projection ``[in, H, C] → [H·C, in]``; multi-head
output ``[H, C, out] → [out, H·C]``; outer-product output ``[C, C, c_z] → [c_z, C·C]``; layer norm
``scale/offset → weight/bias``. ``triangle_multiplication_incoming`` swaps DeepMind's left/right
projections relative to ``linear_a``/``linear_b``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

if TYPE_CHECKING:
    from foldworks.models.af2.config import AF2Config

PREFIX = "alphafold/alphafold_iteration/"

Transform = Callable[[np.ndarray], np.ndarray]


def _t(a: np.ndarray) -> np.ndarray:
    return a.T


def _heads_in(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], -1).T


def _heads_out(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, a.shape[-1]).T


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1)


def _same(a: np.ndarray) -> np.ndarray:
    return a


# A mapping entry: our key → (DeepMind key, block index on the stacked axis or None, transform,
# the config field giving the head count of a multi-head array or None).
Entry = tuple[str, "int | None", Transform, "str | None"]


class _Map:
    """Collects key mappings for one model configuration."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.block: int | None = None
        self.heads: str | None = None

    def add(self, ours: str, theirs: str, fn: Transform) -> None:
        heads = self.heads if fn in (_heads_in, _heads_out, _flat) else None
        self.entries[ours] = (PREFIX + theirs, self.block, fn, heads)

    def linear(self, ours: str, theirs: str, bias: bool = True) -> None:
        self.add(ours + ".weight", theirs + "//weights", _t)
        if bias:
            self.add(ours + ".bias", theirs + "//bias", _same)

    def norm(self, ours: str, theirs: str) -> None:
        self.add(ours + ".weight", theirs + "//scale", _same)
        self.add(ours + ".bias", theirs + "//offset", _same)

    def attention(self, ours: str, theirs: str, gating: bool = True) -> None:
        for o, t in (("q", "query"), ("k", "key"), ("v", "value")):
            self.add(f"{ours}.linear_{o}.weight", f"{theirs}//{t}_w", _heads_in)
        self.add(f"{ours}.linear_o.weight", f"{theirs}//output_w", _heads_out)
        self.add(f"{ours}.linear_o.bias", f"{theirs}//output_b", _same)
        if gating:
            self.add(f"{ours}.linear_g.weight", f"{theirs}//gating_w", _heads_in)
            self.add(f"{ours}.linear_g.bias", f"{theirs}//gating_b", _flat)

    def transition(self, ours: str, theirs: str) -> None:
        self.norm(ours + ".layer_norm", theirs + "/input_layer_norm")
        self.linear(ours + ".linear_1", theirs + "/transition1")
        self.linear(ours + ".linear_2", theirs + "/transition2")

    def tri_mul(self, ours: str, theirs: str, incoming: bool) -> None:
        a, b = ("right", "left") if incoming else ("left", "right")
        self.norm(ours + ".layer_norm_in", theirs + "/layer_norm_input")
        self.linear(ours + ".linear_a_p", f"{theirs}/{a}_projection")
        self.linear(ours + ".linear_a_g", f"{theirs}/{a}_gate")
        self.linear(ours + ".linear_b_p", f"{theirs}/{b}_projection")
        self.linear(ours + ".linear_b_g", f"{theirs}/{b}_gate")
        self.norm(ours + ".layer_norm_out", theirs + "/center_layer_norm")
        self.linear(ours + ".linear_z", theirs + "/output_projection")
        self.linear(ours + ".linear_g", theirs + "/gating_linear")

    def tri_att(self, ours: str, theirs: str) -> None:
        self.heads = "template_att_heads" if "template" in ours else "pair_heads"
        self.norm(ours + ".layer_norm", theirs + "/query_norm")
        self.add(ours + ".linear.weight", theirs + "//feat_2d_weights", _t)
        self.attention(ours + ".mha", theirs + "/attention")

    def pair_stack(self, ours: str, theirs: str) -> None:
        self.tri_mul(ours + ".tri_mul_out", theirs + "/triangle_multiplication_outgoing", incoming=False)
        self.tri_mul(ours + ".tri_mul_in", theirs + "/triangle_multiplication_incoming", incoming=True)
        self.tri_att(ours + ".tri_att_start", theirs + "/triangle_attention_starting_node")
        self.tri_att(ours + ".tri_att_end", theirs + "/triangle_attention_ending_node")
        self.transition(ours + ".pair_transition", theirs + "/pair_transition")

    def evoformer_block(self, ours: str, theirs: str, extra: bool) -> None:
        row = theirs + "/msa_row_attention_with_pair_bias"
        self.heads = "extra_msa_heads" if extra else "msa_heads"
        self.norm(ours + ".msa_att_row.layer_norm_m", row + "/query_norm")
        self.norm(ours + ".msa_att_row.layer_norm_z", row + "/feat_2d_norm")
        self.add(ours + ".msa_att_row.linear_z.weight", row + "//feat_2d_weights", _t)
        self.attention(ours + ".msa_att_row.mha", row + "/attention")
        if extra:
            col = theirs + "/msa_column_global_attention"
            self.norm(ours + ".msa_att_col.layer_norm_m", col + "/query_norm")
            g = ours + ".msa_att_col.global_attention"
            self.add(g + ".linear_q.weight", col + "/attention//query_w", _heads_in)
            self.add(g + ".linear_k.weight", col + "/attention//key_w", _t)
            self.add(g + ".linear_v.weight", col + "/attention//value_w", _t)
            self.add(g + ".linear_g.weight", col + "/attention//gating_w", _heads_in)
            self.add(g + ".linear_g.bias", col + "/attention//gating_b", _flat)
            self.add(g + ".linear_o.weight", col + "/attention//output_w", _heads_out)
            self.add(g + ".linear_o.bias", col + "/attention//output_b", _same)
        else:
            col = theirs + "/msa_column_attention"
            self.norm(ours + ".msa_att_col._msa_att.layer_norm_m", col + "/query_norm")
            self.attention(ours + ".msa_att_col._msa_att.mha", col + "/attention")
        self.transition(ours + ".msa_transition", theirs + "/msa_transition")
        opm = theirs + "/outer_product_mean"
        self.heads = "extra_c_hidden_opm" if extra else "c_hidden_opm"
        self.norm(ours + ".outer_product_mean.layer_norm", opm + "/layer_norm_input")
        self.linear(ours + ".outer_product_mean.linear_1", opm + "/left_projection")
        self.linear(ours + ".outer_product_mean.linear_2", opm + "/right_projection")
        self.add(ours + ".outer_product_mean.linear_out.weight", opm + "//output_w", _heads_out)
        self.add(ours + ".outer_product_mean.linear_out.bias", opm + "//output_b", _same)
        self.pair_stack(ours + ".pair_stack", theirs)


def _embedders(m: _Map, templates: bool) -> None:
    e = "evoformer"
    m.linear("input_embedder.linear_tf_z_i", e + "/left_single")
    m.linear("input_embedder.linear_tf_z_j", e + "/right_single")
    m.linear("input_embedder.linear_tf_m", e + "/preprocess_1d")
    m.linear("input_embedder.linear_msa_m", e + "/preprocess_msa")
    m.linear("input_embedder.linear_relpos", e + "/pair_activiations")
    m.linear("recycling_embedder.linear", e + "/prev_pos_linear")
    m.norm("recycling_embedder.layer_norm_m", e + "/prev_msa_first_row_norm")
    m.norm("recycling_embedder.layer_norm_z", e + "/prev_pair_norm")
    m.linear("extra_msa_embedder.linear", e + "/extra_msa_activations")
    m.linear("evoformer.linear", e + "/single_activations")
    if templates:
        t = e + "/template_embedding"
        m.linear("template_embedder.template_single_embedder.linear_1", e + "/template_single_embedding")
        m.linear("template_embedder.template_single_embedder.linear_2", e + "/template_projection")
        m.linear("template_embedder.template_pair_embedder.linear", t + "/single_template_embedding/embedding2d")
        m.norm("template_embedder.template_pair_stack.layer_norm", t + "/single_template_embedding/output_layer_norm")
        m.heads = "template_pointwise_heads"
        m.attention("template_embedder.template_pointwise_att.mha", t + "/attention", gating=False)


def _structure_and_heads(m: _Map, ptm: bool) -> None:
    s, f = "structure_module", "structure_module/fold_iteration"
    ipa = f + "/invariant_point_attention"
    m.norm("structure_module.layer_norm_s", s + "/single_layer_norm")
    m.norm("structure_module.layer_norm_z", s + "/pair_layer_norm")
    m.linear("structure_module.linear_in", s + "/initial_projection")
    m.linear("structure_module.ipa.linear_q", ipa + "/q_scalar")
    m.linear("structure_module.ipa.linear_kv", ipa + "/kv_scalar")
    m.linear("structure_module.ipa.linear_q_points.linear", ipa + "/q_point_local")
    m.linear("structure_module.ipa.linear_kv_points.linear", ipa + "/kv_point_local")
    m.linear("structure_module.ipa.linear_b", ipa + "/attention_2d")
    m.add("structure_module.ipa.head_weights", ipa + "//trainable_point_weights", _same)
    m.linear("structure_module.ipa.linear_out", ipa + "/output_projection")
    m.norm("structure_module.layer_norm_ipa", f + "/attention_layer_norm")
    for i, name in enumerate(("transition", "transition_1", "transition_2")):
        m.linear(f"structure_module.transition.layers.0.linear_{i + 1}", f"{f}/{name}")
    m.norm("structure_module.transition.layer_norm", f + "/transition_layer_norm")
    m.linear("structure_module.bb_update.linear", f + "/affine_update")
    sc = f + "/rigid_sidechain"
    m.linear("structure_module.angle_resnet.linear_in", sc + "/input_projection")
    m.linear("structure_module.angle_resnet.linear_initial", sc + "/input_projection_1")
    for i, suffix in enumerate(("", "_1")):
        m.linear(f"structure_module.angle_resnet.layers.{i}.linear_1", f"{sc}/resblock1{suffix}")
        m.linear(f"structure_module.angle_resnet.layers.{i}.linear_2", f"{sc}/resblock2{suffix}")
    m.linear("structure_module.angle_resnet.linear_out", sc + "/unnormalized_angles")
    m.norm("aux_heads.plddt.layer_norm", "predicted_lddt_head/input_layer_norm")
    m.linear("aux_heads.plddt.linear_1", "predicted_lddt_head/act_0")
    m.linear("aux_heads.plddt.linear_2", "predicted_lddt_head/act_1")
    m.linear("aux_heads.plddt.linear_3", "predicted_lddt_head/logits")
    m.linear("aux_heads.distogram.linear", "distogram_head/half_logits")
    m.linear("aux_heads.masked_msa.linear", "masked_msa_head/logits")
    m.linear("aux_heads.experimentally_resolved.linear", "experimentally_resolved_head/logits")
    if ptm:
        m.linear("aux_heads.tm.linear", "predicted_aligned_error_head/logits")


def key_map(num_evoformer: int, num_extra: int, num_template: int, templates: bool, ptm: bool) -> dict[str, Entry]:
    """Our key → (DeepMind key, stacked-block index or None, array transform) for one model layout."""
    m = _Map()
    _embedders(m, templates)
    _structure_and_heads(m, ptm)
    for i in range(num_evoformer):
        m.block = i
        m.evoformer_block(f"evoformer.blocks.{i}", "evoformer/evoformer_iteration", extra=False)
    for i in range(num_extra):
        m.block = i
        m.evoformer_block(f"extra_msa_stack.blocks.{i}", "evoformer/extra_msa_stack", extra=True)
    if templates:
        stack = "evoformer/template_embedding/single_template_embedding/template_pair_stack/__layer_stack_no_state"
        for i in range(num_template):
            m.block = i
            m.pair_stack(f"template_embedder.template_pair_stack.blocks.{i}", stack)
    return m.entries


def layout_from_params(params: dict[str, np.ndarray]) -> dict[str, int | bool]:
    """Block counts and optional parts read from a DeepMind parameter dict (the stacked axis sizes)."""
    def stacked(key: str) -> int:
        return int(params[PREFIX + key].shape[0]) if PREFIX + key in params else 0
    evo = stacked("evoformer/evoformer_iteration/msa_transition/input_layer_norm//scale")
    extra = stacked("evoformer/extra_msa_stack/msa_transition/input_layer_norm//scale")
    tmpl = stacked("evoformer/template_embedding/single_template_embedding/template_pair_stack/"
                   "__layer_stack_no_state/pair_transition/input_layer_norm//scale")
    return {"num_evoformer": evo, "num_extra": extra, "num_template": tmpl,
            "templates": PREFIX + "evoformer/template_single_embedding//weights" in params,
            "ptm": PREFIX + "predicted_aligned_error_head/logits//weights" in params}


def convert(params: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """DeepMind parameter dict → our state dict (float32 tensors, contiguous).

    Every DeepMind key must be used: a key the layout does not map is a ``KeyError`` naming it, and
    so is a key the layout needs but the file lacks; an array that cannot take its layout (too few
    dimensions, not numeric) is a ``ValueError`` naming it.
    """
    entries = key_map(**layout_from_params(params))
    used: set[str] = set()
    out: dict[str, torch.Tensor] = {}
    for ours, (theirs, block, fn, _) in entries.items():
        if theirs not in params:
            raise KeyError(f"DeepMind parameters lack {theirs!r} (needed for {ours!r})")
        arr = np.asarray(params[theirs])
        try:
            if block is not None:
                arr = arr[block]
            out[ours] = torch.from_numpy(np.ascontiguousarray(fn(arr), dtype=np.float32))
        except (IndexError, ValueError, TypeError) as exc:
            raise ValueError(f"DeepMind parameter {theirs!r} (shape {list(np.shape(params[theirs]))}, "
                             f"dtype {np.asarray(params[theirs]).dtype}) cannot be converted: {exc}") from None
        used.add(theirs)
    unused = sorted(set(params) - used)
    if unused:
        raise KeyError(f"unexpected DeepMind parameter {unused[0]!r} ({len(unused)} unmapped)")
    return out


def _inverse(fn: Transform, a: np.ndarray, heads: int | None) -> np.ndarray:
    """Undo one array transform (``heads``: the head count of multi-head arrays)."""
    if fn is _t:
        return a.T
    if fn is _same:
        return a
    assert heads is not None
    if fn is _flat:
        return a.reshape(heads, -1)
    if fn is _heads_in:
        return a.T.reshape(a.shape[1], heads, -1)
    return a.T.reshape(heads, -1, a.shape[0])  # _heads_out


def export(state: dict[str, torch.Tensor], cfg: "AF2Config") -> dict[str, np.ndarray]:
    """Our state dict → DeepMind parameters (flat ``scope//name`` keys, stacked blocks), float32.

    ``cfg`` (an ``AF2Config``) supplies the head counts that the flat layouts do not record.
    :func:`convert` of the result gives ``state`` back bit for bit.
    """
    entries = key_map(cfg.num_evoformer_blocks, cfg.num_extra_blocks, cfg.num_template_blocks,
                      cfg.templates, cfg.ptm)
    blocks: dict[str, dict[int, np.ndarray]] = {}
    out: dict[str, np.ndarray] = {}
    for ours, (theirs, block, fn, heads) in entries.items():
        if ours not in state:
            raise KeyError(f"state dict lacks {ours!r}")
        arr = _inverse(fn, state[ours].detach().cpu().numpy(), getattr(cfg, heads) if heads else None)
        if block is None:
            out[theirs] = np.ascontiguousarray(arr, dtype=np.float32)
        else:
            blocks.setdefault(theirs, {})[block] = arr
    for theirs, parts in blocks.items():
        out[theirs] = np.ascontiguousarray(np.stack([parts[i] for i in range(len(parts))]), dtype=np.float32)
    return out
