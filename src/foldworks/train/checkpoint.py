"""Loading trained checkpoints safely (``torch.load(weights_only=True)``) and rebuilding the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from foldworks.models import build_model


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` (no arbitrary unpickling)."""
    return torch.load(Path(path), map_location="cpu", weights_only=True)


def model_weights(checkpoint: dict[str, Any], ema: bool = True) -> dict[str, torch.Tensor]:
    """The model's ``state_dict`` from a checkpoint: the EMA weights when present and ``ema``, else the
    raw training weights (LightningModule keys minus ``model.``)."""
    if ema and checkpoint.get("ema_state_dict"):
        return dict(checkpoint["ema_state_dict"])
    prefix = "model."
    return {k[len(prefix):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}


def model_from_checkpoint(path: str | Path, ema: bool = True) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the registered model from the config stored in the checkpoint; returns ``(model, config)``.

    Loads the EMA weights (the ones validation scored) unless ``ema=False`` or the checkpoint has
    none. The model is in eval mode on CPU.
    """
    checkpoint = load_checkpoint(path)
    config = checkpoint["hyper_parameters"]["config"]
    model = build_model(config["model"], config["model_config"])
    model.load_state_dict(model_weights(checkpoint, ema))
    model.eval()
    return model, config
