"""Fit one experiment: Lightning trainer set-up, atomic checkpoints and ``metrics.csv``.

Outputs in ``out_dir``: ``best.ckpt`` (best ``val_lddt_ca``), ``last.ckpt`` (final weights),
``metrics.csv`` (one row per validation: ``step, epoch, train_loss, val_loss, val_lddt_ca``; the first row is
step 0, the untrained model, with an empty ``train_loss``) and ``config.json``.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from foldworks.fsutil import atomic_path, write_json_atomic
from foldworks.train.config import resolve_config
from foldworks.train.data import FeatureDataModule
from foldworks.train.module import StructureModule

log = logging.getLogger(__name__)
METRICS_HEADER = ("step", "epoch", "train_loss", "val_loss", "val_lddt_ca")


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temp file beside the target, fsync, rename (no partial checkpoints)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)


class MetricsCSV(Callback):
    """Rewrites ``metrics.csv`` atomically after each validation; train_loss = mean since the last one.

    The validation run before training (step 0) has an empty ``train_loss`` cell.
    """

    def __init__(self, path: Path) -> None:
        self.path, self.rows, self._losses = Path(path), [], []

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self._losses.append(float(loss.detach()))

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        train_loss = f"{sum(self._losses) / len(self._losses):.6f}" if self._losses else ""
        self._losses = []
        row = (trainer.global_step, trainer.current_epoch, train_loss,
               f"{float(metrics['val_loss']):.6f}", f"{float(metrics['val_lddt_ca']):.6f}")
        self.rows.append(row)
        write_tsv_like_csv(self.path, METRICS_HEADER, self.rows)
        log.info("step %d epoch %d: train_loss %s val_loss %s val_lddt_ca %s", *row)


def write_tsv_like_csv(path: Path, header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Write a comma-separated table with a header row atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(",".join(header) + "\n")
            for row in rows:
                handle.write(",".join(str(v) for v in row) + "\n")


def _quiet_lightning() -> None:
    for name in ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*Checkpoint directory.*exists and is not empty.*")
    warnings.filterwarnings("ignore", ".*The `srun` command is available.*")
    warnings.filterwarnings("ignore", ".*isinstance\\(treespec, LeafSpec\\)` is deprecated.*")


def fit(experiment: str, params: dict[str, Any], chains: Path, features_dir: Path, out_dir: Path,
        threads: int = 1) -> dict[str, Any]:
    """Train one experiment and write its outputs to ``out_dir``; returns the resolved config."""
    config = resolve_config(params)
    seed = int(config["trainer"]["seed"])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, threads))
    _quiet_lightning()
    L.seed_everything(seed, workers=True, verbose=False)
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.use_deterministic_algorithms(True)
    data = FeatureDataModule(chains, features_dir, config["data"], seed, num_workers=max(0, threads - 1) if cuda else 0)
    module = StructureModule(config, data.feature_set_hash())
    write_json_atomic(out_dir / "config.json", {"experiment": experiment, **config,
                                                "feature_set_hash": module.feature_set_hash})
    log.info("%s: %s model, %d train / %d val chains, %d parameters", experiment, config["model"],
             len(data.train_targets), len(data.val_targets), sum(p.numel() for p in module.parameters()))
    trainer = _make_trainer(config, out_dir, cuda)
    trainer.validate(module, datamodule=data, verbose=False)  # step-0 row: the untrained model
    L.seed_everything(seed, workers=True, verbose=False)  # training RNG independent of validation
    trainer.fit(module, datamodule=data)
    # Lightning's save_last only copies whenever best.ckpt is written: save the final weights here
    trainer.save_checkpoint(out_dir / "last.ckpt")
    return config


def _make_trainer(config: dict[str, Any], out_dir: Path, cuda: bool) -> L.Trainer:
    cfg = config["trainer"]
    checkpoint = ModelCheckpoint(dirpath=out_dir, filename="best", monitor="val_lddt_ca", mode="max",
                                 save_top_k=1, save_last=False, enable_version_counter=False,
                                 auto_insert_metric_name=False)
    return L.Trainer(
        accelerator="gpu" if cuda else "cpu", devices=1, precision="bf16-mixed" if cuda else "32-true",
        max_steps=int(cfg["max_steps"]), max_epochs=-1, val_check_interval=int(cfg["val_every_n_steps"]),
        check_val_every_n_epoch=None, num_sanity_val_steps=0, gradient_clip_val=float(cfg["grad_clip"]),
        deterministic=not cuda, logger=False, callbacks=[checkpoint, MetricsCSV(out_dir / "metrics.csv")],
        plugins=[AtomicCheckpointIO()], enable_progress_bar=sys.stderr.isatty(), enable_model_summary=False,
        use_distributed_sampler=False, default_root_dir=str(out_dir), inference_mode=False,
    )


__all__ = ["fit", "AtomicCheckpointIO", "MetricsCSV"]
