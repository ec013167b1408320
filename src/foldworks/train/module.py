"""The LightningModule shared by every registered model family.

* AdamW (no weight decay on biases/norms) + linear warmup and cosine decay per optimiser step;
  gradient clipping and accumulation are Lightning's (they hold under DDP).
* EMA of the weights (:class:`foldworks.train.state.EMA`), swapped in for validation and saved
  as ``checkpoint["ema_state_dict"]`` (what predict loads).
* Non-finite guard: an optimiser step whose loss or gradients are NaN/Inf (on any rank) is
  skipped (gradients dropped, no AdamW/EMA update) and counted; more than
  ``trainer.max_nonfinite_steps`` raise :class:`NonFiniteError`.
* Validation: each family's per-chain ``validation_metrics(batch, outputs)`` (structure families
  without one: pooled lDDT-Cα → ``val_lddt_ca``; the design family: ``val_recovery``) averaged over
  *all* validation chains (sums and counts are reduced over ranks); ``val_loss`` likewise per
  chain. The family's ``monitor`` (default ``lddt_ca``) names the metric that selects ``best.ckpt``
  (higher is better): :attr:`StructureModule.monitor` = ``"val_" + monitor``.
* Experiment chaining: ``freeze`` prefixes are applied here (frozen parameters are left out of the
  optimiser); weights from ``init_from`` are loaded by :meth:`StructureModule.initialise_from`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning as L
import torch

from foldworks.models import build_model, lddt_ca, model_task
from foldworks.train.state import EMA, collect_rng_states, plain, restore_rng_states

log = logging.getLogger(__name__)


class NonFiniteError(RuntimeError):
    """Too many optimiser steps had a non-finite loss or gradient."""


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


def openfold_lr(step: int, warmup: int, decay_start: int = 50_000, decay_every: int = 50_000,
                factor: float = 0.95) -> float:
    """LR multiplier of OpenFold's AlphaFold2 schedule: linear warm-up over ``warmup`` steps, constant
    until ``decay_start``, then ×``factor`` at ``decay_start`` and every ``decay_every`` steps after."""
    if step < warmup:
        return (step + 1) / max(1, warmup)
    if step < decay_start:
        return 1.0
    return factor ** ((step - decay_start) // decay_every + 1)


class StructureModule(L.LightningModule):
    """Wraps ``build_model(config["model"], config["model_config"])`` for training and validation."""

    def __init__(self, config: dict[str, Any], feature_set_hash: str = "", experiment: str = "",
                 run_hash: str = "", provenance: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.config, self.feature_set_hash, self.experiment = config, feature_set_hash, experiment
        self.run_hash, self.provenance = run_hash, provenance or {}
        self.save_hyperparameters({"config": config, "feature_set_hash": feature_set_hash})
        self.model = build_model(config["model"], config["model_config"])
        self.task = model_task(config["model"])
        if config.get("task", self.task) != self.task:
            raise ValueError(f"experiment {experiment}: task {config['task']!r} declared, but model "
                             f"{config['model']!r} is a {self.task} family")
        if config.get("freeze"):
            from foldworks.train.init_from import freeze_parameters

            freeze_parameters(self.model, config["freeze"], experiment)
        self.val_names: tuple[str, ...] = tuple(getattr(self.model, "val_metric_names", None)
                                                or (getattr(self.model, "monitor", "lddt_ca"),))
        self.monitor = "val_" + getattr(self.model, "monitor", "lddt_ca")
        decay = float(config["trainer"]["ema_decay"])
        self.ema = EMA(self.model, decay) if decay > 0 else None
        self.nonfinite_steps = 0
        self.train_loss_window = [0.0, 0]  # sum, count of finite micro-batch losses since the last validation
        self._window_nonfinite = False
        self._step_skipped = False
        self._backup: dict[str, torch.Tensor] | None = None
        self._pending_rng: dict[str, Any] | None = None
        self._val = torch.zeros(len(self.val_names) + 2, dtype=torch.float64)  # metric sums, loss sum, chains

    def initialise_from(self, checkpoint: Any, exclude: Any = ()) -> dict[str, Any]:
        """Load another run's weights (``init_from``, :mod:`foldworks.train.init_from`); the EMA restarts there."""
        from foldworks.train.init_from import initialise_from

        report = initialise_from(self.model, checkpoint, exclude, self.experiment)
        if self.ema is not None:
            self.ema = EMA(self.model, self.ema.decay)
        return report

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.model(batch)

    # ---- training ---------------------------------------------------------------------------
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._pending_rng is not None:  # resumed: continue the interrupted run's random stream
            restore_rng_states(self._pending_rng)
            self._pending_rng = None

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        outputs = self.model(batch)
        loss, logs = self.model.loss(batch, outputs)
        size = batch["aatype"].shape[0]
        value = float(loss.detach())
        if math.isfinite(value):
            self.train_loss_window[0] += value
            self.train_loss_window[1] += 1
        else:
            self._window_nonfinite = True
        self.log("train_loss", loss.detach(), batch_size=size, prog_bar=True)
        for key, item in logs.items():
            self.log(f"train/{key}", item, batch_size=size)
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Skip the step (drop all gradients) when the loss or any gradient is NaN/Inf on any rank."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        bad = torch.tensor(float(self._window_nonfinite), device=self.device)
        if grads:
            norm = torch.stack(torch._foreach_norm(grads)).float().sum()
            bad = bad + (~torch.isfinite(norm)).float()
        if self.trainer.world_size > 1:
            bad = self.trainer.strategy.reduce(bad, reduce_op="sum")
        self._window_nonfinite = False
        self._step_skipped = bool(bad.item() > 0)
        if not self._step_skipped:
            return
        for p in self.model.parameters():
            p.grad = None
        self.nonfinite_steps += 1
        limit = int(self.config["trainer"]["max_nonfinite_steps"])
        log.warning("experiment %s: non-finite loss/gradient at step %d, step skipped (%d so far, limit %d)",
                    self.experiment, self.global_step + 1, self.nonfinite_steps, limit)
        if self.nonfinite_steps > limit:
            raise NonFiniteError(
                f"experiment {self.experiment}: {self.nonfinite_steps} optimiser steps had a non-finite loss or "
                f"gradient (last at step {self.global_step + 1}), more than trainer.max_nonfinite_steps={limit}; "
                f"check the learning rate and the feature files")

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self._step_skipped = False
        optimizer.step(closure=optimizer_closure)
        if self.ema is not None and not self._step_skipped:
            self.ema.update(self.model)

    def pop_train_loss(self) -> float | None:
        """Mean finite training loss since the last call over all ranks (``None`` if there was none)."""
        window = torch.tensor(self.train_loss_window, dtype=torch.float64, device=self.device)
        if self.trainer is not None and self.trainer.world_size > 1:
            window = self.trainer.strategy.reduce(window, reduce_op="sum")
        self.train_loss_window = [0.0, 0]
        return float(window[0] / window[1]) if window[1] > 0 else None

    # ---- validation (EMA weights) -----------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val = torch.zeros(len(self.val_names) + 2, dtype=torch.float64, device=self.device)
        if self.ema is not None:
            self._backup = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.model.load_state_dict(self.ema.shadow)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        outputs = self.model(batch)
        loss, _ = self.model.loss(batch, outputs)
        metrics = self.validation_metrics(batch, outputs)
        scores = [metrics[name] for name in self.val_names]
        n = scores[0].shape[0]
        self._val += torch.stack([*(s.double().sum() for s in scores), loss.detach().double() * n,
                                  torch.tensor(float(n), dtype=torch.float64, device=scores[0].device)])

    def validation_metrics(self, batch: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]
                           ) -> dict[str, torch.Tensor]:
        """Per-chain validation scores ``{name: [B]}``: the family's, or pooled lDDT-Cα for a structure family."""
        own = getattr(self.model, "validation_metrics", None)
        if own is not None:
            return own(batch, outputs)
        score, _ = lddt_ca(outputs["ca_coords"].float(), batch["ca_coords"].float(), batch["residue_mask"])
        return {"lddt_ca": score}

    def on_validation_epoch_end(self) -> None:
        totals = self._val
        if self.trainer.world_size > 1:
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        if self._backup is not None:  # training weights back before any checkpoint is written
            self.model.load_state_dict(self._backup)
            self._backup = None
        count = totals[-1]
        if count > 0:
            for index, name in enumerate(self.val_names):
                self.log(f"val_{name}", (totals[index] / count).float(), sync_dist=False)
            self.log("val_loss", (totals[-2] / count).float(), sync_dist=False)
            self.log("val_chains", count.float(), sync_dist=False)

    # ---- optimiser --------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.config["trainer"]
        trained = [p for p in self.model.parameters() if p.requires_grad]  # minus frozen ones
        decay = [p for p in trained if p.ndim >= 2]
        no_decay = [p for p in trained if p.ndim < 2]
        total, warmup, min_ratio = int(cfg["max_steps"]), int(cfg["warmup_steps"]), float(cfg["min_lr_ratio"])
        if cfg.get("recipe") == "openfold":  # Adam as OpenFold trains AF2 (train/config.py RECIPES)
            optimizer = torch.optim.Adam(trained, lr=cfg["lr"], eps=1e-5, weight_decay=cfg["weight_decay"])
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: openfold_lr(step, warmup))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg["lr"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, warmup, total, min_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ---- checkpoints ------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add config, hashes, versions, provenance, EMA, RNG and counters (all weights_only-loadable)."""
        checkpoint["hyper_parameters"] = plain({"config": self.config, "feature_set_hash": self.feature_set_hash})
        checkpoint["foldworks"] = {"config": plain(self.config), "feature_set_hash": self.feature_set_hash,
                                   "run_hash": self.run_hash, "experiment": self.experiment,
                                   "versions": package_versions(), "seed": int(self.config["trainer"]["seed"])}
        metrics = self._trainer.callback_metrics if self._trainer is not None else {}
        checkpoint["foldworks"]["metrics"] = {k: float(metrics[k]) for k in (self.monitor, "val_loss") if k in metrics}
        checkpoint["provenance"] = plain(self.provenance)
        if self.ema is not None:
            checkpoint["ema_state_dict"] = self.ema.state_dict()
            checkpoint["ema_updates"] = self.ema.updates
        checkpoint["rng_states"] = collect_rng_states()
        checkpoint["train_state"] = {"nonfinite_steps": self.nonfinite_steps,
                                     "loss_window_sum": float(self.train_loss_window[0]),
                                     "loss_window_count": int(self.train_loss_window[1])}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.ema is not None and "ema_state_dict" in checkpoint:
            self.ema.load_state_dict(checkpoint["ema_state_dict"], checkpoint.get("ema_updates", 0))
        state = checkpoint.get("train_state", {})
        self.nonfinite_steps = int(state.get("nonfinite_steps", 0))
        self.train_loss_window = [float(state.get("loss_window_sum", 0.0)), int(state.get("loss_window_count", 0))]
        self._pending_rng = checkpoint.get("rng_states")
