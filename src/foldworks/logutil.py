"""Logging set-up shared by every ``python -m foldworks.<stage>`` command line.

Each job's log (``logs/<rule>/...``) starts with where it ran — host, Slurm job and partition,
visible GPUs — so a cluster run can be audited from the logs alone.
"""

from __future__ import annotations

import logging
import os
import socket

_CONTEXT_VARS: tuple[str, ...] = ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_NTASKS", "CUDA_VISIBLE_DEVICES")


def setup_logging(stage: str, level: int = logging.INFO) -> logging.Logger:
    """Configure INFO logging to stderr and log the execution context; return the stage logger."""
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger().setLevel(level)
    logger = logging.getLogger(f"foldworks.{stage}")
    context = " ".join(f"{name}={os.environ.get(name, '-')}" for name in _CONTEXT_VARS)
    logger.info("start %s on %s %s", stage, socket.gethostname(), context)
    return logger
