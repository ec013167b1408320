"""OpenFold weights ↔ the foldworks AF2 state dict.

Our AF2 model uses OpenFold's parameter names, so a current OpenFold state dict loads by identity
and export is the identity. Accepted inputs: a plain state dict, a ``{"state_dict": ...}`` or
``{"model": ...}`` wrapper, and an OpenFold Lightning checkpoint (``state_dict`` keys prefixed
``model.``; its EMA weights ``ema.params`` are preferred when present). Keys of OpenFold releases
before the multimer refactor (v1) are renamed: ``core.*`` Evoformer submodules, top-level
``template_*`` modules, ``template_angle_embedder``, point projections without ``.linear`` and the
``extra_msa_stack.stack`` wrapper.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from foldworks.models.weights.errors import WeightsError, tensor_dict

_V1_RENAMES = [
    (re.compile(r"\.core\.(tri_\w+|pair_transition)\."), r".pair_stack.\1."),
    (re.compile(r"\.core\.(msa_transition|outer_product_mean)\."), r".\1."),
    (re.compile(r"^template_angle_embedder\."), "template_single_embedder."),
    (re.compile(r"^(template_(?!embedder\.)\w+\.)"), r"template_embedder.\1"),
    (re.compile(r"ipa\.linear_(q|kv)_points\.(weight|bias)$"), r"ipa.linear_\1_points.linear.\2"),
    (re.compile(r"^extra_msa_stack\.stack\."), "extra_msa_stack."),
]


def upgrade_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename OpenFold v1 keys to the current names (current keys pass unchanged)."""
    out = {}
    for key, val in state.items():
        for pattern, repl in _V1_RENAMES:
            key = pattern.sub(repl, key)
        out[key] = val
    return out


def _strip(state: dict[str, Any], prefix: str) -> dict[str, Any]:
    if state and all(k.startswith(prefix) for k in state):
        return {k[len(prefix):]: v for k, v in state.items()}
    return state


def unwrap(obj: Any, path: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The model weights inside an OpenFold file and where they were found (``"ema"``,
    ``"state_dict"`` or ``"plain"``)."""
    if isinstance(obj, dict) and isinstance(obj.get("ema"), dict) and isinstance(obj["ema"].get("params"), dict):
        state, where = obj["ema"]["params"], "ema"
    elif isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        state, where = obj["state_dict"], "state_dict"
    elif isinstance(obj, dict) and isinstance(obj.get("model"), dict):
        state, where = obj["model"], "model"
    else:
        state, where = obj, "plain"
    state = tensor_dict(state, path)
    for prefix in ("module.", "model."):
        state = _strip(state, prefix)
    return upgrade_keys(state), where


def looks_like_openfold(state: dict[str, torch.Tensor]) -> bool:
    """Whether a state dict has OpenFold's AF2 module names."""
    return any(k.startswith(("evoformer.blocks.", "structure_module.ipa.")) for k in state)


def export(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our AF2 state dict → an OpenFold ``AlphaFold`` state dict (same names; tensors cloned)."""
    if not looks_like_openfold(state):
        raise WeightsError("not an AF2 state dict (no 'evoformer.blocks.*' or 'structure_module.ipa.*' keys)")
    return {k: v.detach().clone() for k, v in state.items()}
