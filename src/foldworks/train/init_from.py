"""Experiment chaining: initialise a model from another experiment's checkpoint, and freeze parts.

Experiment keys (``config/config.yaml``):

* ``init_from``: another experiment's name (its ``results/checkpoints/<name>/best.ckpt``; the
  Snakemake train rule gets that file as an input, so a changed parent retrains the child) or a
  path: a ``.ckpt`` (trained, or written by ``python -m foldworks.models.import_weights``), a
  DeepMind ``params_model_*.npz`` or an OpenFold ``.pt`` (converted through the weights registry).
  The EMA weights are used when the checkpoint has them.
* ``init_exclude``: parameter-name prefixes *not* taken from the parent (re-initialised, e.g. an
  output head of another size). Any other key present in both with a different shape is an
  error naming the key.
* ``freeze``: parameter-name prefixes (``model.state_dict()`` names, e.g. ``encoder.``,
  ``edge_in``) whose parameters get ``requires_grad = False`` and are left out of the optimiser.

The load report ``{matched, missing, unexpected, shape_mismatched, excluded}`` (key lists) is logged
and stored in the experiment's ``config.json`` under ``init_report``.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from foldworks.train.checkpoint import load_checkpoint, model_weights

log = logging.getLogger(__name__)


class InitError(ValueError):
    """The parent checkpoint does not fit the model (shape mismatch in a kept key, bad prefix)."""


def file_digest(path: str | Path) -> str:
    """SHA-256 (16 hex) of a file's bytes (the parent checkpoint enters the child's run hash)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _excluded(key: str, prefixes: Sequence[str]) -> bool:
    return any(key.startswith(prefix) for prefix in prefixes)


def init_report(model_state: dict[str, torch.Tensor], parent: dict[str, torch.Tensor],
                exclude: Sequence[str] = ()) -> dict[str, list[str]]:
    """Compare a model's ``state_dict`` with parent weights → key lists (sorted).

    ``matched``: same key and shape (loaded); ``missing``: in the model only; ``unexpected``: in the
    parent only; ``shape_mismatched``: both, different shape (``key: parent shape → model shape``);
    ``excluded``: parent keys under an ``exclude`` prefix (not loaded).
    """
    report: dict[str, list[str]] = {"matched": [], "missing": [], "unexpected": [], "shape_mismatched": [],
                                    "excluded": []}
    for key in sorted(set(model_state) | set(parent)):
        if key in parent and _excluded(key, exclude):
            report["excluded"].append(key)
        elif key not in parent:
            report["missing"].append(key)
        elif key not in model_state:
            report["unexpected"].append(key)
        elif tuple(parent[key].shape) != tuple(model_state[key].shape):
            report["shape_mismatched"].append(
                f"{key}: {tuple(parent[key].shape)} -> {tuple(model_state[key].shape)}")
        else:
            report["matched"].append(key)
    return report


def parent_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of an ``init_from`` file: a foldworks checkpoint (trained, EMA weights when
    present, or written by ``import_weights``), a released ProteinMPNN file, or any format of the
    weights registry (:mod:`foldworks.models.weights.registry`: DeepMind ``.npz``, OpenFold ``.pt``),
    converted on the fly with sizes read from the weights."""
    path = Path(path)
    if path.suffix != ".npz":
        raw = load_checkpoint(path)
        if "state_dict" in raw or "ema_state_dict" in raw:
            return model_weights(raw)
        if "model_state_dict" in raw and "num_edges" in raw:  # released ProteinMPNN: plain weights
            return dict(raw["model_state_dict"])
    from foldworks.models.weights.registry import FORMATS, WeightsError, detect_format

    try:
        return FORMATS[detect_format(path)].load(path, None).state_dict
    except WeightsError as exc:
        raise InitError(f"init_from {path}: {exc}") from None


def initialise_from(model: nn.Module, checkpoint: str | Path, exclude: Sequence[str] = (),
                    experiment: str = "") -> dict[str, Any]:
    """Load the matching weights of ``checkpoint`` (EMA when present) into ``model``; return the report.

    Raises :class:`InitError` naming the key on a shape mismatch outside ``exclude``, or when no
    key matches at all (wrong parent).
    """
    parent = parent_weights(checkpoint)
    state = model.state_dict()
    report = init_report(state, parent, exclude)
    if report["shape_mismatched"]:
        raise InitError(f"experiment {experiment}: init_from {checkpoint}: shape mismatch in kept key(s) "
                        f"{'; '.join(report['shape_mismatched'])} (add their prefix to init_exclude to "
                        f"re-initialise them)")
    if not report["matched"]:
        raise InitError(f"experiment {experiment}: init_from {checkpoint}: no parameter matches the model "
                        f"({len(report['unexpected'])} unexpected keys, e.g. {report['unexpected'][:3]})")
    model.load_state_dict({k: parent[k] for k in report["matched"]}, strict=False)
    log.info("experiment %s: initialised from %s: %d matched, %d missing, %d unexpected, %d excluded keys%s",
             experiment, checkpoint, len(report["matched"]), len(report["missing"]), len(report["unexpected"]),
             len(report["excluded"]), f"; missing: {', '.join(report['missing'][:20])}" if report["missing"] else "")
    return {"checkpoint": str(checkpoint), "sha256_16": file_digest(checkpoint), **report}


def freeze_parameters(model: nn.Module, prefixes: Sequence[str], experiment: str = "") -> list[str]:
    """Set ``requires_grad = False`` on parameters whose name starts with a prefix; returns their names.

    A prefix that matches no parameter is an :class:`InitError` (a typo would silently train everything).
    """
    frozen = []
    for prefix in prefixes:
        names = [name for name, _ in model.named_parameters() if name.startswith(prefix)]
        if not names:
            raise InitError(f"experiment {experiment}: freeze prefix {prefix!r} matches no parameter of the model")
        frozen.extend(names)
    for name, param in model.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    if frozen:
        total = sum(p.numel() for n, p in model.named_parameters() if n in frozen)
        log.info("experiment %s: froze %d parameter tensors (%d values) under %s", experiment, len(frozen), total,
                 list(prefixes))
    return sorted(set(frozen))
