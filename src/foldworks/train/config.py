"""Experiment configuration: defaults, resolution and validation (no torch import).

Shape: ``{"model": str, "model_config": {...}, "data": {...}, "trainer": {...}}``; missing keys
take the defaults below and the resolved dict is stored with every checkpoint.

Units: ``crop_size`` in residues, ``*_steps`` in optimiser steps (one step = ``batch_size`` ×
``accumulate_grad_batches`` chains per device), ``lr`` per step. The hardware keys
(:data:`HARDWARE_KEYS`: accelerator, devices, num_nodes, strategy, precision, progress_bar) say
where a run executes, not what it computes; the command line may override them and they are left
out of :func:`run_hash`, so a requeued job on other hardware still resumes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

DEFAULT_DATA: dict[str, Any] = {
    "crop_size": 64, "batch_size": 8, "val_batch_size": 1, "max_msa_rows": 64,
    # probability that a training crop is spatial (the crop_size residues nearest a random anchor
    # residue by Cα distance, as AF2-multimer/OpenFold) instead of a contiguous window
    "spatial_crop_prob": 0.0,
    # null: every training crop has crop_size residues; an int: each training crop's size is drawn
    # uniformly in [crop_size_min, crop_size] (per item, from default_rng([seed, epoch, slot, 1]); the crop
    # itself keeps its RNG), so the model sees pieces of several lengths (with one crop size the
    # structure module learns one size of fold)
    "crop_size_min": None,
    # "cluster_weighted": draw chains with replacement ∝ chains.parquet `sample_weight`;
    # "uniform": a permutation of the train chains per epoch
    "sampler": "cluster_weighted",
    # length bucketing: sort each window of bucket_window batches by cropped length, then batch
    "bucket_window": 8,
    # DataLoader worker processes; null = the job's threads - 1
    "num_workers": None,
}
DEFAULT_TRAINER: dict[str, Any] = {
    # null: AdamW, warm-up and cosine decay; a name of RECIPES: that recipe's optimiser and values
    "recipe": None,
    "max_steps": 300, "lr": 1e-3, "weight_decay": 0.01, "warmup_steps": 20, "grad_clip": 1.0,
    "val_every_n_steps": 50, "seed": 0, "min_lr_ratio": 0.0,
    "accumulate_grad_batches": 1,
    # EMA of the weights (validation, best.ckpt and predict use it); effective decay
    # min(ema_decay, (1 + n) / (10 + n)) after n updates; 0 disables
    "ema_decay": 0.999,
    # optimiser steps with a non-finite loss/gradient are skipped; more than this stops the run
    "max_nonfinite_steps": 10,
    # resume checkpoints (results/checkpoints/NAME/resume/step_*.ckpt): at every validation and
    # every checkpoint_every_n_steps (null = val_every_n_steps); the newest `keep` are kept
    "checkpoint_every_n_steps": None, "keep_resume_checkpoints": 2,
    "log_every_n_steps": 10,
    # hardware (see module doc): "auto" accelerator = GPU when present; precision "auto" =
    # bf16-mixed on GPU, 32-true on CPU; progress_bar "auto" = only when stderr is a terminal
    "accelerator": "auto", "devices": 1, "num_nodes": 1, "strategy": "auto", "precision": "auto",
    "progress_bar": "auto",
}
#: ``trainer.recipe: openfold``: OpenFold's AlphaFold2 training recipe (Adam with eps 1e-5 and no weight
#: decay, linear warm-up over 1,000 steps to lr 1e-3, then ×0.95 every 50,000 steps after step 50,000,
#: gradient-norm clip 0.1, EMA 0.999). Keys given beside it override it.
RECIPES: dict[str, dict[str, Any]] = {
    "openfold": {"lr": 1e-3, "weight_decay": 0.0, "warmup_steps": 1000, "grad_clip": 0.1, "ema_decay": 0.999},
}
HARDWARE_KEYS: tuple[str, ...] = ("accelerator", "devices", "num_nodes", "strategy", "precision", "progress_bar")
#: Keys that change neither the batches nor the weights (left out of :func:`run_hash` too).
_BOOKKEEPING_KEYS: tuple[str, ...] = ("checkpoint_every_n_steps", "keep_resume_checkpoints", "log_every_n_steps",
                                      "max_nonfinite_steps")
_SAMPLERS = ("cluster_weighted", "uniform")
#: Optional top-level keys: declared task (checked against the family), experiment chaining
#: (``foldworks.train.init_from``).
CHAINING_KEYS: tuple[str, ...] = ("task", "init_from", "init_exclude", "freeze")


def resolve_config(params: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults into an experiment config and validate it; raises ``ValueError`` naming the key."""
    unknown = set(params) - {"model", "model_config", "data", "trainer"} - set(CHAINING_KEYS)
    if unknown:
        raise ValueError(f"experiment config: unknown top-level keys {sorted(unknown)}")
    if not isinstance(params.get("model"), str):
        raise ValueError("experiment config: 'model' (a registered model name) is required")
    resolved = {"model": params["model"], "model_config": copy.deepcopy(params.get("model_config") or {})}
    for key in CHAINING_KEYS:  # only when given: configs without them keep their run hash
        if params.get(key) not in (None, []):
            resolved[key] = copy.deepcopy(params[key])
    for key in ("init_exclude", "freeze"):
        if key in resolved and not (isinstance(resolved[key], list) and all(isinstance(p, str) and p
                                                                            for p in resolved[key])):
            raise ValueError(f"experiment config: {key} must be a list of parameter-name prefixes")
    for section, defaults in (("data", DEFAULT_DATA), ("trainer", DEFAULT_TRAINER)):
        given = params.get(section) or {}
        extra = set(given) - set(defaults)
        if extra:
            raise ValueError(f"experiment config: unknown {section} keys {sorted(extra)}")
        recipe = given.get("recipe") if section == "trainer" else None
        if recipe is not None and recipe not in RECIPES:
            raise ValueError(f"experiment config: trainer.recipe must be one of {sorted(RECIPES)} or null, not {recipe!r}")
        resolved[section] = {**defaults, **(RECIPES[recipe] if recipe else {}), **copy.deepcopy(given)}
    _check_trainer(resolved["trainer"])
    _check_data(resolved["data"])
    return resolved


def _check_trainer(trainer: dict[str, Any]) -> None:
    trainer["val_every_n_steps"] = min(int(trainer["val_every_n_steps"]), int(trainer["max_steps"]))
    if int(trainer["max_steps"]) < 1 or int(trainer["max_steps"]) % trainer["val_every_n_steps"]:
        raise ValueError(f"experiment config: trainer.max_steps ({trainer['max_steps']}) must be a positive "
                         f"multiple of val_every_n_steps ({trainer['val_every_n_steps']}) so the final "
                         f"weights are validated and checkpointed")
    if trainer["checkpoint_every_n_steps"] is None:
        trainer["checkpoint_every_n_steps"] = trainer["val_every_n_steps"]
    for key in ("accumulate_grad_batches", "checkpoint_every_n_steps", "keep_resume_checkpoints",
                "log_every_n_steps", "num_nodes"):
        if int(trainer[key]) < 1:
            raise ValueError(f"experiment config: trainer.{key} must be >= 1")
    if int(trainer["max_nonfinite_steps"]) < 0:
        raise ValueError("experiment config: trainer.max_nonfinite_steps must be >= 0")
    if not 0.0 <= float(trainer["ema_decay"]) < 1.0:
        raise ValueError("experiment config: trainer.ema_decay must be in [0, 1)")


def _check_data(data: dict[str, Any]) -> None:
    for key in ("crop_size", "batch_size", "val_batch_size", "max_msa_rows", "bucket_window"):
        if int(data[key]) < 1:
            raise ValueError(f"experiment config: data.{key} must be >= 1")
    if data["crop_size_min"] is not None and not 1 <= int(data["crop_size_min"]) <= int(data["crop_size"]):
        raise ValueError("experiment config: data.crop_size_min must be null or in [1, crop_size]")
    if not 0.0 <= float(data["spatial_crop_prob"]) <= 1.0:
        raise ValueError("experiment config: data.spatial_crop_prob must be in [0, 1]")
    if data["sampler"] not in _SAMPLERS:
        raise ValueError(f"experiment config: data.sampler must be one of {list(_SAMPLERS)}, not {data['sampler']!r}")
    if data["num_workers"] is not None and int(data["num_workers"]) < 0:
        raise ValueError("experiment config: data.num_workers must be >= 0 or null")


def apply_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``config`` with command-line hardware overrides (keys of :data:`HARDWARE_KEYS`, ``None`` = keep)."""
    bad = set(overrides) - set(HARDWARE_KEYS)
    if bad:
        raise ValueError(f"only hardware keys can be overridden on the command line, not {sorted(bad)}")
    out = copy.deepcopy(config)
    out["trainer"].update({k: v for k, v in overrides.items() if v is not None})
    return out


def run_hash(config: dict[str, Any], feature_set_hash: str) -> str:
    """SHA-256 (16 hex) of the resolved config minus hardware/bookkeeping keys plus the feature-set hash.

    Two runs with equal run hashes compute the same thing: a resume checkpoint is only used
    when its stored run hash equals the current one.
    """
    computed = copy.deepcopy(config)
    for key in HARDWARE_KEYS + _BOOKKEEPING_KEYS:
        computed["trainer"].pop(key, None)
    computed["data"].pop("num_workers", None)  # workers change speed, not the batches
    text = json.dumps({"config": computed, "features": feature_set_hash}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
