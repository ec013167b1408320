"""Fit one experiment: Lightning trainer set-up, resume, atomic checkpoints and ``metrics.csv``.

Outputs in ``out_dir`` (DATA_FORMATS.md §6): ``best.ckpt`` (best validation score of the family's
monitored metric: lDDT-Cα for structure, sequence recovery for design; EMA weights validated),
``last.ckpt`` (final weights), ``metrics.csv`` (one row per validation: ``step, epoch, train_loss,
val_loss, val_lddt_ca`` — ``val_recovery`` for a design family; the first row is step 0, the
untrained model, with an empty ``train_loss``) and ``config.json`` (with ``init_report`` when the
experiment has ``init_from``). Beside them, not declared to Snakemake: ``resume/`` (see
:mod:`foldworks.train.resume`) and ``logs/`` (Lightning CSV logs, TensorBoard when installed).

A run first looks for the newest resume checkpoint with the same run hash (resolved config minus
hardware keys + feature set) and continues from it; otherwise it starts fresh and says why.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from foldworks.fsutil import atomic_open, atomic_path, write_json_atomic
from foldworks.provenance import provenance_record
from foldworks.train.config import apply_overrides, resolve_config, run_hash
from foldworks.train.data import Af2FeatureDataModule, FeatureDataModule, feature_manifest_lines
from foldworks.train.init_from import file_digest
from foldworks.train.module import StructureModule
from foldworks.train.resume import Preempted, ResumeCheckpoints, clear_resume_dir, find_resume_checkpoint

log = logging.getLogger(__name__)
METRICS_HEADER = ("step", "epoch", "train_loss", "val_loss", "val_lddt_ca")


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temp file beside the target, fsync, rename (no partial checkpoints)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)


class MetricsCSV(Callback):
    """Rewrites ``metrics.csv`` atomically after each validation and logs a one-line summary.

    ``train_loss`` = mean finite micro-batch loss since the previous validation over all ranks; the
    validation before training (step 0) has an empty ``train_loss``. Without a progress bar, a
    progress line is logged every ``log_every`` steps. Rows are part of the checkpoint state.
    """

    def __init__(self, path: Path, experiment: str, log_every: int, progress_lines: bool,
                 monitor: str = "val_lddt_ca") -> None:
        self.path, self.experiment, self.rows = Path(path), experiment, []
        self.monitor = monitor
        self.log_every, self.progress_lines = log_every, progress_lines
        self._clock = (time.monotonic(), 0)

    def state_dict(self) -> dict[str, Any]:
        return {"rows": [list(r) for r in self.rows]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows = [tuple(r) for r in state["rows"]]

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step
        if not self.progress_lines or (batch_idx + 1) % trainer.accumulate_grad_batches or step % self.log_every:
            return
        now, seconds = time.monotonic(), time.monotonic() - self._clock[0]
        rate = seconds / max(1, step - self._clock[1])
        self._clock = (now, step)
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        loss = float(trainer.callback_metrics.get("train_loss", float("nan")))
        log.info("%s: step %d/%d loss %.4f lr %.2e (%.2f s/step)", self.experiment, step, trainer.max_steps,
                 loss, lr, rate)

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        fitting = trainer.state.fn == "fit"
        train_loss = module.pop_train_loss() if fitting else None
        done = trainer.global_step * trainer.accumulate_grad_batches
        epoch = trainer.datamodule.data_epoch(done) if fitting else 0
        row = (trainer.global_step, epoch, "" if train_loss is None else f"{train_loss:.6f}",
               f"{float(metrics['val_loss']):.6f}", f"{float(metrics[self.monitor]):.6f}")
        self.rows.append(row)
        if trainer.is_global_zero:
            self.write()
        log.info("%s: step %d epoch %d: train_loss %s val_loss %s %s %s (%d chains)", self.experiment,
                 *row[:4], self.monitor, row[4], int(metrics.get("val_chains", 0)))

    def write(self) -> None:
        write_csv_atomic(self.path, (*METRICS_HEADER[:-1], self.monitor), self.rows)


def write_csv_atomic(path: Path, header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Write a comma-separated table with a header row atomically."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(",".join(header) + "\n")
        for row in rows:
            handle.write(",".join(str(v) for v in row) + "\n")


def _quiet_lightning() -> None:
    for name in ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern in (".*does not have many workers.*", ".*resuming from a checkpoint that ended before the epoch ended.*",
                    ".*Checkpoint directory.*exists and is not empty.*",
                    ".*The `srun` command is available.*", ".*isinstance\\(treespec, LeafSpec\\)` is deprecated.*",
                    ".*Experiment logs directory .* exists and is not empty.*",
                    ".*when logging on epoch level in distributed setting.*",
                    ".*The number of training batches .* is smaller than the logging interval.*"):
        warnings.filterwarnings("ignore", pattern)


def _hardware(cfg: dict[str, Any]) -> tuple[str, str]:
    """``(accelerator, precision)`` with ``auto`` resolved: GPU + bf16-mixed when CUDA is present, else CPU + fp32."""
    accelerator = cfg["accelerator"]
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    precision = cfg["precision"]
    if precision == "auto":
        precision = "bf16-mixed" if accelerator in ("gpu", "cuda") else "32-true"
    return accelerator, precision


def fit(experiment: str, params: dict[str, Any], chains: Path, features_dir: Path, out_dir: Path,
        threads: int = 1, overrides: dict[str, Any] | None = None, init_checkpoint: Path | None = None,
        templates_dir: Path | None = None) -> dict[str, Any]:
    """Train one experiment (resuming when possible) and write its outputs; returns the resolved config.

    ``init_checkpoint``: the parent checkpoint when the experiment has ``init_from`` (resolved by
    the workflow; its content hash enters the run hash, so a retrained parent restarts the child).
    ``templates_dir``: the template stage's per-chain features, read by families whose model config
    uses templates (ignored otherwise).

    Raises :class:`Preempted` after a stop signal (a resume checkpoint was written),
    :class:`foldworks.train.module.NonFiniteError`, or ``ValueError`` for a bad config/data set.
    """
    config = apply_overrides(resolve_config(params), overrides or {})
    cfg, seed = config["trainer"], int(config["trainer"]["seed"])
    out_dir, resume_dir = Path(out_dir), Path(out_dir) / "resume"
    out_dir.mkdir(parents=True, exist_ok=True)
    _quiet_lightning()
    accelerator, precision = _hardware(cfg)
    cpu = accelerator == "cpu"
    workers = config["data"]["num_workers"]
    workers = max(0, threads - 1) if workers is None else int(workers)
    torch.set_num_threads(max(1, threads - workers))
    if cpu:
        torch.use_deterministic_algorithms(True)
    L.seed_everything(seed, workers=True, verbose=False)
    accumulate = int(cfg["accumulate_grad_batches"])
    data = make_data_module(config, chains, features_dir, seed, workers, int(cfg["max_steps"]) * accumulate,
                            accumulate, templates_dir)
    features_hash = data.feature_set_hash()
    init_path = _init_checkpoint(experiment, config, init_checkpoint)
    rhash = run_hash(config, features_hash if init_path is None else f"{features_hash}+{file_digest(init_path)}")
    provenance = _provenance(params, chains, resume_dir, data) if rank_zero_only.rank == 0 else {}
    module = StructureModule(config, features_hash, experiment, rhash, provenance)
    init = {} if init_path is None else {
        "init_report": module.initialise_from(init_path, config.get("init_exclude", []))}
    resume_from, mismatched = find_resume_checkpoint(resume_dir, rhash)
    if rank_zero_only.rank == 0:
        write_json_atomic(out_dir / "config.json", {"experiment": experiment, **config,
                                                    "feature_set_hash": features_hash, "run_hash": rhash, **init})
        _prepare_dirs(out_dir, resume_dir, resume_from, mismatched, rhash)
    log.info("%s: %s model, %d train / %d val chains, %d parameters, seed %d, %s %s, %d loader workers, "
             "run hash %s", experiment, config["model"], len(data.train_rows), len(data.val_rows),
             sum(p.numel() for p in module.parameters()), seed, accelerator, precision, workers, rhash)
    metrics = MetricsCSV(out_dir / "metrics.csv", experiment, int(cfg["log_every_n_steps"]),
                         progress_lines=not _progress_bar(cfg), monitor=module.monitor)
    resume = ResumeCheckpoints(resume_dir, int(cfg["val_every_n_steps"]), int(cfg["checkpoint_every_n_steps"]),
                               int(cfg["keep_resume_checkpoints"]), accumulate, int(cfg["max_steps"]),
                               monitor=module.monitor)
    trainer = _make_trainer(config, out_dir, accelerator, precision, [metrics, resume])
    if trainer.world_size > len(data.val_rows):
        raise ValueError(f"experiment {experiment}: {len(data.val_rows)} validation chains for {trainer.world_size} "
                         "ranks; every rank needs at least one (more val chains, or fewer devices/tasks)")
    try:
        if resume_from is None:
            trainer.validate(module, datamodule=data, verbose=False)  # step-0 row: the untrained model
            L.seed_everything(seed, workers=True, verbose=False)  # training RNG independent of validation
            trainer.fit(module, datamodule=data)
        else:
            trainer.fit(module, datamodule=data, ckpt_path=resume_from, weights_only=True)
    except SIGTERMException as exc:  # Lightning's own handler (outside fit): no checkpoint needed
        raise Preempted(signal.SIGTERM, None) from exc
    _finish(trainer, resume, metrics, out_dir)
    return config


def make_data_module(config: dict[str, Any], chains: Path, features_dir: Path, seed: int, workers: int,
                     total_micro_batches: int, accumulate: int, templates_dir: Path | None = None
                     ) -> FeatureDataModule:
    """The family's data path: :class:`Af2FeatureDataModule` for a family with
    ``input_pipeline = "af2"`` (its input-pipeline settings, the experiment's crop, template
    features from ``templates_dir`` when its config uses templates), else the shared padded-batch
    pipeline."""
    from foldworks.models import MODEL_REGISTRY

    family = MODEL_REGISTRY.get(config["model"])
    if getattr(family, "input_pipeline", None) != "af2":
        return FeatureDataModule(chains, features_dir, config["data"], seed, workers, total_micro_batches, accumulate)
    with torch.device("meta"):  # sizes only: no weights allocated
        model = family(**config["model_config"])
    af2 = model.af2_data_config(True, int(config["data"]["crop_size"]), float(config["data"]["spatial_crop_prob"]))
    return Af2FeatureDataModule(chains, features_dir, config["data"], seed, workers, total_micro_batches, accumulate,
                                af2_config=af2, templates_dir=templates_dir)


def uses_templates(spec: dict[str, Any]) -> bool:
    """Whether an experiment's model reads template features (an ``af2`` input pipeline whose
    resolved model config has templates on); sizes only, no weights allocated."""
    from foldworks.models import MODEL_REGISTRY

    family = MODEL_REGISTRY.get(spec.get("model"))
    if family is None or getattr(family, "input_pipeline", None) != "af2":
        return False
    with torch.device("meta"):
        model = family(**spec.get("model_config", {}))
    return bool(model.data_config.use_templates)


def _init_checkpoint(experiment: str, config: dict[str, Any], given: Path | None) -> Path | None:
    """The parent checkpoint of an ``init_from`` experiment (``given``, else ``init_from`` itself as a path)."""
    if "init_from" not in config:
        if given is not None:
            raise ValueError(f"experiment {experiment}: --init-from given but the experiment has no init_from")
        return None
    path = Path(given) if given is not None else Path(str(config["init_from"]))
    if not path.is_file():
        raise ValueError(f"experiment {experiment}: init_from checkpoint {path} not found "
                         f"(init_from: {config['init_from']!r})")
    return path


def _provenance(params: dict[str, Any], chains: Path, resume_dir: Path, data: FeatureDataModule) -> dict[str, Any]:
    """``provenance_record`` over the chains table and a cheap feature manifest (name, size per file)."""
    manifest = resume_dir / "feature_manifest.tsv"
    with atomic_open(manifest, "w", encoding="utf-8") as handle:
        handle.writelines(feature_manifest_lines(data.feature_paths()))
    return provenance_record("train", params, ("train", "models"), inputs=[Path(chains), manifest])


def _prepare_dirs(out_dir: Path, resume_dir: Path, resume_from: Path | None, mismatched: list[Path],
                  rhash: str) -> None:
    """Remove non-matching resume checkpoints and temp files of killed writes; on a fresh start also old logs."""
    for path in [*mismatched, *out_dir.glob(".*.tmp*"), *resume_dir.glob(".*.tmp*")]:
        path.unlink(missing_ok=True)
    if resume_from is not None:
        log.info("resuming from %s (%d non-matching resume checkpoints removed)", resume_from, len(mismatched))
        return
    why = (f"{len(mismatched)} resume checkpoints were written for another config/feature set (run hash {rhash} "
           f"now)" if mismatched else "no resume checkpoint")
    log.info("starting fresh: %s", why)
    clear_resume_dir(resume_dir, "starting fresh")
    shutil.rmtree(out_dir / "logs", ignore_errors=True)


def _finish(trainer: L.Trainer, resume: ResumeCheckpoints, metrics: MetricsCSV, out_dir: Path) -> None:
    """Copy the best checkpoint to ``best.ckpt``, write ``last.ckpt`` and ``metrics.csv`` (declared outputs)."""
    trainer.save_checkpoint(out_dir / "last.ckpt")
    if not trainer.is_global_zero:
        return
    best = resume.best_path
    if best is None or not best.exists():
        raise RuntimeError(f"{out_dir}: best checkpoint {best} is missing from the resume directory")
    with atomic_path(out_dir / "best.ckpt") as tmp:
        shutil.copyfile(best, tmp)
    metrics.write()
    log.info("done: best %s %.4f at step %d; %s", resume.monitor, resume.best_score, resume.best_step, out_dir)


def _progress_bar(cfg: dict[str, Any]) -> bool:
    setting = cfg["progress_bar"]
    return sys.stderr.isatty() if setting == "auto" else bool(setting)


def _loggers(out_dir: Path) -> list[Any]:
    """CSV logs under ``out_dir/logs/csv``; TensorBoard under ``out_dir/logs/tensorboard`` when installed."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    loggers: list[Any] = [CSVLogger(save_dir=str(out_dir), name="logs", version="csv")]
    if importlib.util.find_spec("tensorboard") is not None or importlib.util.find_spec("tensorboardX") is not None:
        loggers.append(TensorBoardLogger(save_dir=str(out_dir), name="logs", version="tensorboard"))
    return loggers


def _slurm_tasks_per_node() -> None:
    """Set ``SLURM_NTASKS_PER_NODE`` for ``srun -n N`` steps (Lightning refuses ``--ntasks`` without it).

    Derived from ``SLURM_STEP_TASKS_PER_NODE`` (e.g. ``2(x3)``) when every node runs the same number
    of tasks; otherwise left unset, and Lightning's error asks for ``--ntasks-per-node``.
    """
    if int(os.environ.get("SLURM_NTASKS", "1")) <= 1 or "SLURM_NTASKS_PER_NODE" in os.environ:
        return
    spec = os.environ.get("SLURM_STEP_TASKS_PER_NODE") or os.environ.get("SLURM_TASKS_PER_NODE", "")
    counts = {m.group(1) for m in re.finditer(r"(\d+)(?:\(x\d+\))?", spec)}
    if len(counts) == 1:
        os.environ["SLURM_NTASKS_PER_NODE"] = counts.pop()
        log.info("srun step without --ntasks-per-node: SLURM_NTASKS_PER_NODE=%s from %r",
                 os.environ["SLURM_NTASKS_PER_NODE"], spec)


def _make_trainer(config: dict[str, Any], out_dir: Path, accelerator: str, precision: str,
                  callbacks: list[Callback]) -> L.Trainer:
    from lightning.fabric.plugins.environments import SLURMEnvironment
    from lightning.pytorch.callbacks import LearningRateMonitor

    cfg = config["trainer"]
    accumulate = int(cfg["accumulate_grad_batches"])
    plugins: list[Any] = [AtomicCheckpointIO()]
    if SLURMEnvironment.detect():  # srun-launched ranks; our handlers save and exit, no self-requeue
        _slurm_tasks_per_node()
        plugins.append(SLURMEnvironment(auto_requeue=False))
    return L.Trainer(
        accelerator=accelerator, devices=cfg["devices"], num_nodes=int(cfg["num_nodes"]), strategy=cfg["strategy"],
        precision=precision, max_steps=int(cfg["max_steps"]), max_epochs=-1,
        val_check_interval=int(cfg["val_every_n_steps"]) * accumulate, check_val_every_n_epoch=None,
        num_sanity_val_steps=0, gradient_clip_val=float(cfg["grad_clip"]), accumulate_grad_batches=accumulate,
        deterministic=accelerator == "cpu", logger=_loggers(out_dir),
        callbacks=[*callbacks, LearningRateMonitor(logging_interval="step")], plugins=plugins,
        enable_checkpointing=False, enable_progress_bar=_progress_bar(cfg), enable_model_summary=False,
        use_distributed_sampler=False, default_root_dir=str(out_dir), inference_mode=False,
        log_every_n_steps=int(cfg["log_every_n_steps"]),
    )


__all__ = ["fit", "AtomicCheckpointIO", "MetricsCSV", "Preempted"]
