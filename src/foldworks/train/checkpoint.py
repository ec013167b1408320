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


def model_from_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the registered model from the config stored in the checkpoint; returns ``(model, config)``.

    The model is in eval mode on CPU; ``state_dict`` keys are the LightningModule's minus ``model.``.
    """
    checkpoint = load_checkpoint(path)
    config = checkpoint["hyper_parameters"]["config"]
    model = build_model(config["model"], config["model_config"])
    prefix = "model."
    state = {k[len(prefix):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    model.load_state_dict(state)
    model.eval()
    return model, config
