"""Resume checkpoints: periodic step checkpoints, best-so-far, preemption (SIGTERM/SIGUSR1) and lookup.

Layout under ``results/checkpoints/{experiment}/resume/`` (not a Snakemake output, so it survives a
failed or killed job; Snakemake deletes a failed job's declared outputs, and a declared
``directory()`` output with everything inside it):

* ``step_000050.ckpt`` … full Lightning checkpoints (weights, optimiser, scheduler, loop counters,
  callback state, EMA, RNG states; the sampler position is ``global_step``) written after every
  validation and every ``checkpoint_every_n_steps``; the newest ``keep_resume_checkpoints`` stay;
* ``best_step_000100.ckpt``: weights-only checkpoint of the best validation score so far (the
  family's monitored metric: lDDT-Cα for structure, recovery for design)
  (copied to ``best.ckpt`` when training ends).

A stop signal (SIGTERM: Slurm preemption/requeue or ``scancel``; SIGUSR1: Slurm's
``--signal=USR1@…`` warning) finishes the current optimiser step, writes a step checkpoint and
raises :class:`Preempted` (exit status 128 + signal number).
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)
STEP_RE = re.compile(r"^step_(\d+)\.ckpt$")
BEST_RE = re.compile(r"^best_step_(\d+)\.ckpt$")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(Exception):
    """Training stopped on a signal after writing a resume checkpoint."""

    def __init__(self, signum: int, checkpoint: Path | None) -> None:
        super().__init__(f"stopped by signal {signal.Signals(signum).name}; resume checkpoint {checkpoint}")
        self.signum, self.checkpoint = signum, checkpoint


def step_path(resume_dir: Path, step: int) -> Path:
    return Path(resume_dir) / f"step_{step:06d}.ckpt"


def _numbered(resume_dir: Path, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
    if not Path(resume_dir).is_dir():
        return []
    found = [(int(m.group(1)), p) for p in Path(resume_dir).iterdir() if (m := pattern.match(p.name))]
    return sorted(found, reverse=True)


def find_resume_checkpoint(resume_dir: Path, run_hash: str) -> tuple[Path | None, list[Path]]:
    """Newest readable step checkpoint whose stored run hash equals ``run_hash``.

    Returns ``(path or None, mismatched)``: ``mismatched`` lists step checkpoints written for
    another config or feature set (or unreadable ones), newest first.
    """
    mismatched = []
    for step, path in _numbered(resume_dir, STEP_RE):
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # a file from another version or a damaged disk: skip it, say so
            log.warning("%s: unreadable resume checkpoint (%s), skipped", path, exc)
            mismatched.append(path)
            continue
        stored = checkpoint.get("foldworks", {}).get("run_hash")
        complete = all(k in checkpoint for k in ("state_dict", "optimizer_states", "loops", "lr_schedulers"))
        if stored == run_hash and complete and int(checkpoint.get("global_step", -1)) == step:
            return path, mismatched
        log.info("%s: written for run hash %s, current %s: not resumable", path, stored, run_hash)
        mismatched.append(path)
    return None, mismatched


def clear_resume_dir(resume_dir: Path, reason: str) -> None:
    """Delete every step/best checkpoint in ``resume_dir`` (starting fresh), logging ``reason``."""
    old = [p for _, p in _numbered(resume_dir, STEP_RE) + _numbered(resume_dir, BEST_RE)]
    for path in old:
        path.unlink(missing_ok=True)
    if old:
        log.info("removed %d resume checkpoints from %s: %s", len(old), resume_dir, reason)


class ResumeCheckpoints(Callback):
    """Writes step/best checkpoints into ``resume_dir`` and turns stop signals into a clean exit."""

    def __init__(self, resume_dir: Path, val_every: int, checkpoint_every: int, keep: int,
                 accumulate: int, max_steps: int, monitor: str = "val_lddt_ca") -> None:
        self.resume_dir = Path(resume_dir)
        self.monitor = monitor  # higher is better
        self.val_every, self.checkpoint_every, self.keep = val_every, checkpoint_every, keep
        self.accumulate, self.max_steps = accumulate, max_steps
        self.best_score, self.best_step = float("-inf"), -1
        self.stop_signal: int | None = None
        self._previous: dict[int, Any] = {}

    # ---- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"best_score": float(self.best_score), "best_step": int(self.best_step)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_score, self.best_step = float(state["best_score"]), int(state["best_step"])

    @property
    def best_path(self) -> Path | None:
        return self.resume_dir / f"best_step_{self.best_step:06d}.ckpt" if self.best_step >= 0 else None

    # ---- signals ----------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Install the stop handlers (after Lightning's own, which would exit with status 0)."""
        if trainer.is_global_zero:
            self._drop_orphans()
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stop_signal is None:
            log.warning("received %s: saving a resume checkpoint after the current step",
                        signal.Signals(signum).name)
        self.stop_signal = signum

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def teardown(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        self._restore_handlers()

    def _stop_requested(self, trainer: L.Trainer, module: L.LightningModule) -> int:
        """The stop signal seen on any rank (0 = none); all ranks agree (one all-reduce when W > 1)."""
        value = torch.tensor(float(self.stop_signal or 0), device=module.device)
        if trainer.world_size > 1:
            value = trainer.strategy.reduce(value, reduce_op="max")
        return int(value.item())

    # ---- saving -----------------------------------------------------------------------------
    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if (batch_idx + 1) % self.accumulate:  # mid-accumulation: the step is not finished
            return
        step = trainer.global_step
        if step % self.val_every == 0:  # validation follows: on_validation_end saves (loop state is clean there)
            return
        stop = self._stop_requested(trainer, module)
        if stop or step % self.checkpoint_every == 0:
            path = self._save_step(trainer, step)
            if stop:
                raise Preempted(stop, path)

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        step = trainer.global_step
        score = float(trainer.callback_metrics[self.monitor])
        old_best = self.best_path
        if score > self.best_score:
            self.best_score, self.best_step = score, step
            trainer.save_checkpoint(self.best_path, weights_only=True)
            if old_best is not None and trainer.is_global_zero:
                old_best.unlink(missing_ok=True)
        path = self._save_step(trainer, step)
        stop = self._stop_requested(trainer, module)
        if stop and step < self.max_steps:
            raise Preempted(stop, path)

    def _save_step(self, trainer: L.Trainer, step: int) -> Path:
        path = step_path(self.resume_dir, step)
        trainer.save_checkpoint(path)
        if trainer.is_global_zero:
            for _, old in _numbered(self.resume_dir, STEP_RE)[self.keep:]:
                old.unlink(missing_ok=True)
            log.info("resume checkpoint %s", path)
        return path

    def _drop_orphans(self) -> None:
        """Best files other than the restored best (left by a run killed between two writes)."""
        for _, path in _numbered(self.resume_dir, BEST_RE):
            if path != self.best_path:
                path.unlink(missing_ok=True)
