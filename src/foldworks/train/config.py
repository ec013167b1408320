"""Experiment configuration: defaults, resolution and validation (no torch import).

Shape: ``{"model": str, "model_config": {...}, "data": {...}, "trainer": {...}}``; missing keys
take the defaults below and the resolved dict is stored with every checkpoint.
"""

from __future__ import annotations

import copy
from typing import Any

DEFAULT_DATA: dict[str, Any] = {"crop_size": 64, "batch_size": 8, "val_batch_size": 1, "max_msa_rows": 64}
DEFAULT_TRAINER: dict[str, Any] = {
    "max_steps": 300, "lr": 1e-3, "weight_decay": 0.01, "warmup_steps": 20, "grad_clip": 1.0,
    "val_every_n_steps": 50, "seed": 0, "min_lr_ratio": 0.0,
}


def resolve_config(params: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults into an experiment config and validate it; raises ``ValueError`` naming the key."""
    unknown = set(params) - {"model", "model_config", "data", "trainer"}
    if unknown:
        raise ValueError(f"experiment config: unknown top-level keys {sorted(unknown)}")
    if not isinstance(params.get("model"), str):
        raise ValueError("experiment config: 'model' (a registered model name) is required")
    resolved = {"model": params["model"], "model_config": copy.deepcopy(params.get("model_config") or {})}
    for section, defaults in (("data", DEFAULT_DATA), ("trainer", DEFAULT_TRAINER)):
        given = params.get(section) or {}
        extra = set(given) - set(defaults)
        if extra:
            raise ValueError(f"experiment config: unknown {section} keys {sorted(extra)}")
        resolved[section] = {**defaults, **given}
    trainer = resolved["trainer"]
    trainer["val_every_n_steps"] = min(int(trainer["val_every_n_steps"]), int(trainer["max_steps"]))
    if int(trainer["max_steps"]) < 1 or int(trainer["max_steps"]) % trainer["val_every_n_steps"]:
        raise ValueError(f"experiment config: trainer.max_steps ({trainer['max_steps']}) must be a positive "
                         f"multiple of val_every_n_steps ({trainer['val_every_n_steps']}) so the final "
                         f"weights are validated and checkpointed")
    for key in ("crop_size", "batch_size", "val_batch_size", "max_msa_rows"):
        if int(resolved["data"][key]) < 1:
            raise ValueError(f"experiment config: data.{key} must be >= 1")
    return resolved
