"""AlphaFold2 model sizes: one dataclass, the published presets and the mappings from DeepMind's
nested model config and from OpenFold's config overrides.

Presets: DeepMind's ``model_1`` … ``model_5`` and their ``_ptm`` variants (``model_1``/``model_2``
use templates, ``model_3``–``model_5`` do not; ``_ptm`` adds the predicted-aligned-error head),
OpenFold's ``initial_training`` and ``finetuning`` (the ``model_1`` architecture), and
``cpu_small`` (same architecture, tiny sizes, for CPU demos).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class AF2Config:
    """Every size of the AF2 monomer model (defaults: ``model_1_ptm``). Channel counts per head are
    ``c_hidden_*``; bins are ``(min Å, max Å, count)``."""

    c_m: int = 256
    c_z: int = 128
    c_s: int = 384
    c_e: int = 64
    c_t: int = 64
    relpos_k: int = 32
    recycle_bins: tuple[float, float, int] = (3.25, 20.75, 15)
    num_recycle: int = 3
    # Evoformer
    num_evoformer_blocks: int = 48
    msa_heads: int = 8
    c_hidden_msa: int = 32
    pair_heads: int = 4
    c_hidden_pair: int = 32
    c_hidden_mul: int = 128
    c_hidden_opm: int = 32
    transition_factor: int = 4
    msa_dropout: float = 0.15
    pair_dropout: float = 0.25
    # Extra MSA stack
    num_extra_blocks: int = 4
    extra_msa_heads: int = 8
    extra_c_hidden_msa: int = 8
    extra_c_hidden_mul: int = 128
    extra_c_hidden_opm: int = 32
    # Templates
    templates: bool = True
    num_template_blocks: int = 2
    template_att_heads: int = 4
    template_c_hidden_att: int = 16
    template_c_hidden_mul: int = 64
    template_transition_factor: int = 2
    template_pointwise_heads: int = 4
    template_pointwise_c_hidden: int = 16
    template_dgram_bins: tuple[float, float, int] = (3.25, 50.75, 39)
    template_unit_vector: bool = False
    # Structure module
    num_structure_layers: int = 8
    c_ipa: int = 16
    ipa_heads: int = 12
    ipa_qk_points: int = 4
    ipa_v_points: int = 8
    structure_transition_layers: int = 1
    structure_dropout: float = 0.1
    c_resnet: int = 128
    num_resnet_blocks: int = 2
    position_scale: float = 10.0
    # Heads
    distogram_bins: int = 64
    distogram_range: tuple[float, float] = (2.3125, 21.6875)
    masked_msa_classes: int = 23
    plddt_bins: int = 50
    c_plddt: int = 128
    ptm: bool = True
    pae_bins: int = 64
    pae_max_error_bin: float = 31.0
    checkpointing: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable; tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "AF2Config":
        """Inverse of :meth:`to_dict`; unknown keys are an error naming the key."""
        names = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, val in values.items():
            if key not in names:
                raise KeyError(f"unknown AF2 config key {key!r}")
            kwargs[key] = tuple(val) if isinstance(val, list) else val
        return cls(**kwargs)


def _get(cfg: dict[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"DeepMind model config lacks {path!r}")
        node = node[part]
    return node


def from_deepmind(model_cfg: dict[str, Any]) -> AF2Config:
    """Map DeepMind's ``config.model`` dict (``embeddings_and_evoformer``, ``heads``, ...) to an
    :class:`AF2Config`. Attention widths are DeepMind's total ``key_dim`` (or the input channels)
    divided by the head count. DeepMind's three-layer structure transition is one residual block
    of three layers here (``structure_transition_layers = 1``)."""
    g = lambda p: _get(model_cfg, p)  # noqa: E731
    e = "embeddings_and_evoformer."
    evo, tp, sm = e + "evoformer.", e + "template.", "heads.structure_module."
    if g(sm + "num_layer_in_transition") != 3:
        raise ValueError("only num_layer_in_transition = 3 (one residual block of three layers) is supported, "
                         f"got {g(sm + 'num_layer_in_transition')}")
    c_m, c_z, c_e = g(e + "msa_channel"), g(e + "pair_channel"), g(e + "extra_msa_channel")
    c_t = g(tp + "template_pair_stack.triangle_attention_ending_node.value_dim")
    msa_heads = g(evo + "msa_row_attention_with_pair_bias.num_head")
    pair_heads = g(evo + "triangle_attention_starting_node.num_head")
    t_heads = g(tp + "template_pair_stack.triangle_attention_starting_node.num_head")
    pw_heads = g(tp + "attention.num_head")
    return AF2Config(
        c_m=c_m, c_z=c_z, c_s=g(e + "seq_channel"), c_e=c_e, c_t=c_t,
        relpos_k=g(e + "max_relative_feature"),
        recycle_bins=(g(e + "prev_pos.min_bin"), g(e + "prev_pos.max_bin"), g(e + "prev_pos.num_bins")),
        num_recycle=g("num_recycle"),
        num_evoformer_blocks=g(e + "evoformer_num_block"),
        msa_heads=msa_heads, c_hidden_msa=c_m // msa_heads, pair_heads=pair_heads, c_hidden_pair=c_z // pair_heads,
        c_hidden_mul=g(evo + "triangle_multiplication_outgoing.num_intermediate_channel"),
        c_hidden_opm=g(evo + "outer_product_mean.num_outer_channel"),
        transition_factor=g(evo + "msa_transition.num_intermediate_factor"),
        msa_dropout=g(evo + "msa_row_attention_with_pair_bias.dropout_rate"),
        pair_dropout=g(evo + "triangle_attention_starting_node.dropout_rate"),
        num_extra_blocks=g(e + "extra_msa_stack_num_block"),
        extra_msa_heads=msa_heads, extra_c_hidden_msa=c_e // msa_heads,
        extra_c_hidden_mul=g(evo + "triangle_multiplication_outgoing.num_intermediate_channel"),
        extra_c_hidden_opm=g(evo + "outer_product_mean.num_outer_channel"),
        templates=bool(g(tp + "enabled")),
        num_template_blocks=g(tp + "template_pair_stack.num_block"),
        template_att_heads=t_heads,
        template_c_hidden_att=g(tp + "template_pair_stack.triangle_attention_starting_node.key_dim") // t_heads,
        template_c_hidden_mul=g(tp + "template_pair_stack.triangle_multiplication_outgoing.num_intermediate_channel"),
        template_transition_factor=g(tp + "template_pair_stack.pair_transition.num_intermediate_factor"),
        template_pointwise_heads=pw_heads, template_pointwise_c_hidden=g(tp + "attention.key_dim") // pw_heads,
        template_dgram_bins=(g(tp + "dgram_features.min_bin"), g(tp + "dgram_features.max_bin"),
                             g(tp + "dgram_features.num_bins")),
        template_unit_vector=bool(g(tp + "use_template_unit_vector")),
        num_structure_layers=g(sm + "num_layer"), c_ipa=g(sm + "num_scalar_qk"), ipa_heads=g(sm + "num_head"),
        ipa_qk_points=g(sm + "num_point_qk"), ipa_v_points=g(sm + "num_point_v"),
        structure_transition_layers=1,
        structure_dropout=g(sm + "dropout"), c_resnet=g(sm + "sidechain.num_channel"),
        num_resnet_blocks=g(sm + "sidechain.num_residual_block"), position_scale=g(sm + "position_scale"),
        distogram_bins=g("heads.distogram.num_bins"),
        distogram_range=(g("heads.distogram.first_break"), g("heads.distogram.last_break")),
        masked_msa_classes=g("heads.masked_msa.num_output"),
        plddt_bins=g("heads.predicted_lddt.num_bins"), c_plddt=g("heads.predicted_lddt.num_channels"),
        ptm=g("heads.predicted_aligned_error.weight") > 0, pae_bins=g("heads.predicted_aligned_error.num_bins"),
        pae_max_error_bin=g("heads.predicted_aligned_error.max_error_bin"),
    )


def from_reference_config(config_json: dict[str, Any]) -> AF2Config:
    """An :class:`AF2Config` from a reference case's ``config.json`` (its ``full_config.model``)."""
    return from_deepmind(config_json["full_config"]["model"])


# OpenFold config keys (dotted, as in ``openfold.config.model_config`` overrides) → our fields.
# Extra-MSA and Evoformer pair-attention widths are one field here; runtime-only keys are ignored.
_OPENFOLD_KEYS: dict[str, tuple[str, ...]] = {
    "globals.c_m": ("c_m",), "globals.c_z": ("c_z",), "globals.c_s": ("c_s",), "globals.c_e": ("c_e",),
    "globals.c_t": ("c_t",), "data.common.max_recycling_iters": ("num_recycle",),
    "model.evoformer_stack.c_hidden_msa_att": ("c_hidden_msa",),
    "model.evoformer_stack.c_hidden_mul": ("c_hidden_mul",),
    "model.evoformer_stack.c_hidden_opm": ("c_hidden_opm",),
    "model.evoformer_stack.c_hidden_pair_att": ("c_hidden_pair",),
    "model.evoformer_stack.no_blocks": ("num_evoformer_blocks",),
    "model.extra_msa.extra_msa_stack.c_hidden_msa_att": ("extra_c_hidden_msa",),
    "model.extra_msa.extra_msa_stack.c_hidden_mul": ("extra_c_hidden_mul",),
    "model.extra_msa.extra_msa_stack.c_hidden_opm": ("extra_c_hidden_opm",),
    "model.extra_msa.extra_msa_stack.c_hidden_pair_att": ("c_hidden_pair",),
    "model.extra_msa.extra_msa_stack.no_blocks": ("num_extra_blocks",),
    "model.heads.lddt.c_hidden": ("c_plddt",),
    "model.structure_module.c_ipa": ("c_ipa",), "model.structure_module.c_resnet": ("c_resnet",),
    "model.structure_module.no_blocks": ("num_structure_layers",),
    "model.structure_module.no_heads_ipa": ("ipa_heads",),
    "model.template.template_pair_stack.c_hidden_tri_att": ("template_c_hidden_att",),
    "model.template.template_pair_stack.c_hidden_tri_mul": ("template_c_hidden_mul",),
    "model.template.template_pair_stack.no_blocks": ("num_template_blocks",),
    "model.template.template_pointwise_attention.c_hidden": ("template_pointwise_c_hidden",),
    "model.template.enabled": ("templates",),
}
_OPENFOLD_RUNTIME = ("chunk_size", "tune_chunk_size")


def from_openfold(model_name: str, overrides: dict[str, Any]) -> AF2Config:
    """OpenFold's ``model_config(model_name)`` with dotted-key ``overrides`` → :class:`AF2Config`.

    Runtime-only keys (chunking) are ignored; any other unknown key is a ``KeyError`` naming it.
    """
    values: dict[str, Any] = {}
    for key, val in overrides.items():
        if key.rsplit(".", 1)[-1] in _OPENFOLD_RUNTIME:
            continue
        if key not in _OPENFOLD_KEYS:
            raise KeyError(f"unsupported OpenFold config key {key!r}")
        for name in _OPENFOLD_KEYS[key]:
            if name in values and values[name] != val:
                raise ValueError(f"OpenFold key {key!r} = {val} conflicts with {name} = {values[name]}")
            values[name] = val
    return dataclasses.replace(preset(model_name), **values)


def config_from_json(values: dict[str, Any]) -> AF2Config:
    """An :class:`AF2Config` from a JSON dict in any of the accepted spellings: a reference case's
    ``config.json`` (``full_config``), DeepMind's ``config.model`` dict, ``{"preset": name,
    **overrides}`` or :meth:`AF2Config.to_dict` output."""
    if "full_config" in values:
        return from_reference_config(values)
    if "embeddings_and_evoformer" in values:
        return from_deepmind(values)
    values = dict(values)
    base = preset(values.pop("preset")).to_dict() if "preset" in values else {}
    return AF2Config.from_dict({**base, **values})


def _model(templates: bool, ptm: bool) -> AF2Config:
    return AF2Config(templates=templates, ptm=ptm)


PRESETS: dict[str, AF2Config] = {
    **{f"model_{i}": _model(i <= 2, False) for i in range(1, 6)},
    **{f"model_{i}_ptm": _model(i <= 2, True) for i in range(1, 6)},
    "initial_training": AF2Config(templates=True, ptm=False, checkpointing=True),
    "finetuning": AF2Config(templates=True, ptm=False, checkpointing=True),
    # The reference cases' sizes, with 2 instead of 4 triangle-attention heads (same widths):
    # triangle attention dominates CPU time at these sizes and scales with the head count.
    "cpu_small": AF2Config(
        c_m=32, c_z=16, c_s=32, c_e=16, c_t=16, num_recycle=1, num_evoformer_blocks=2,
        c_hidden_msa=4, pair_heads=2, c_hidden_pair=8, c_hidden_mul=16, c_hidden_opm=8, num_extra_blocks=1,
        extra_c_hidden_msa=2, extra_c_hidden_mul=16, extra_c_hidden_opm=8, num_template_blocks=1,
        template_att_heads=2, template_c_hidden_att=8, template_c_hidden_mul=16, template_pointwise_c_hidden=4,
        num_structure_layers=2, c_ipa=8, ipa_heads=4, c_resnet=16, c_plddt=16),
}


def preset(name: str) -> AF2Config:
    """A fresh copy of a named preset (``KeyError`` naming the preset and the known names)."""
    if name not in PRESETS:
        raise KeyError(f"unknown AF2 preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return dataclasses.replace(PRESETS[name])


__all__ = ["AF2Config", "PRESETS", "config_from_json", "preset", "from_deepmind", "from_reference_config",
           "from_openfold"]
