"""The LightningModule shared by every registered model family."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch

from foldworks.models import build_model, lddt_ca


def package_versions() -> dict[str, str]:
    """Versions of the packages that determine a checkpoint's behaviour."""
    import lightning
    import numpy

    import foldworks

    return {"foldworks": str(foldworks.__version__), "torch": str(torch.__version__),
            "lightning": str(lightning.__version__), "numpy": str(numpy.__version__)}


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """LR multiplier: linear warmup over ``warmup`` steps, then cosine decay to ``min_ratio`` at ``total``."""
    if step < warmup:
        return (step + 1) / max(1, warmup)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class StructureModule(L.LightningModule):
    """Wraps ``build_model(config["model"], config["model_config"])`` with AdamW + warmup/cosine.

    Logs ``train_loss`` per step and ``val_loss`` / ``val_lddt_ca`` (mean over validation chains of
    the pooled lDDT-Cα of each chain) per validation.
    """

    def __init__(self, config: dict[str, Any], feature_set_hash: str = "") -> None:
        super().__init__()
        self.config = config
        self.feature_set_hash = feature_set_hash
        self.save_hyperparameters({"config": config, "feature_set_hash": feature_set_hash})
        self.model = build_model(config["model"], config["model_config"])
        self._val_scores: list[torch.Tensor] = []
        self._val_losses: list[torch.Tensor] = []

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.model(batch)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        outputs = self.model(batch)
        loss, logs = self.model.loss(batch, outputs)
        self.log("train_loss", loss.detach(), batch_size=batch["aatype"].shape[0])
        for key, value in logs.items():
            self.log(f"train/{key}", value, batch_size=batch["aatype"].shape[0])
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_scores, self._val_losses = [], []

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        outputs = self.model(batch)
        loss, _ = self.model.loss(batch, outputs)
        score, _ = lddt_ca(outputs["ca_coords"].float(), batch["ca_coords"].float(), batch["residue_mask"])
        self._val_scores.append(score.detach().cpu())
        self._val_losses.append(loss.detach().float().cpu().repeat(score.shape[0]))

    def on_validation_epoch_end(self) -> None:
        if not self._val_scores:
            return
        self.log("val_lddt_ca", torch.cat(self._val_scores).mean())
        self.log("val_loss", torch.cat(self._val_losses).mean())

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.config["trainer"]
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg["lr"])
        total, warmup, min_ratio = int(cfg["max_steps"]), int(cfg["warmup_steps"]), float(cfg["min_lr_ratio"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, warmup, total, min_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the checkpoint loadable with ``torch.load(weights_only=True)`` (plain containers only)."""
        checkpoint["hyper_parameters"] = _plain({"config": self.config, "feature_set_hash": self.feature_set_hash})
        checkpoint["foldworks"] = {"config": _plain(self.config), "feature_set_hash": self.feature_set_hash,
                                   "versions": package_versions()}


def _plain(obj: Any) -> Any:
    """Deep copy into plain dict/list/str/number containers."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj
