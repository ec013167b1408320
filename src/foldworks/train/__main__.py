"""CLI: ``python -m foldworks.train --experiment NAME --params JSON --chains P --features-dir D --out-dir D
[--init-from CKPT] [--templates-dir D] [--threads N] [--devices N] [--num-nodes N] [--strategy S] [--accelerator A] [--precision P]``.

Exit status: 0 done; 1 bad config/data or too many non-finite steps; 2 bad arguments;
128 + signal number (143 SIGTERM, 138 SIGUSR1) when stopped by a signal after writing a resume
checkpoint (rerunning the same command resumes). Multi-process runs: ``srun -n N python -m
foldworks.train ... --devices <tasks per node> --num-nodes <nodes>`` (Lightning's SLURM
environment), or ``--devices N --strategy ddp`` on one machine (Lightning starts the processes).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from foldworks.ids import InvalidIdentifier, validate_experiment
from foldworks.logutil import setup_logging


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", required=True, help="experiment name (letters, digits, _ and -)")
    parser.add_argument("--params", required=True, help="experiment config as JSON")
    parser.add_argument("--chains", required=True, help="data/chains.parquet")
    parser.add_argument("--features-dir", required=True, help="data/features")
    parser.add_argument("--out-dir", required=True, help="results/checkpoints/NAME")
    parser.add_argument("--init-from", default=None,
                        help="parent checkpoint for an experiment with init_from (the workflow passes it)")
    parser.add_argument("--templates-dir", default=None,
                        help="data/templates/features: template features for a model that uses templates")
    parser.add_argument("--threads", type=int, default=1, help="cores: loader workers = threads - 1")
    parser.add_argument("--devices", type=int, default=0,
                        help="devices (GPUs, or CPU processes) per node; 0 = the experiment's trainer.devices")
    parser.add_argument("--num-nodes", type=int, default=0, help="nodes; 0 = the experiment's trainer.num_nodes")
    parser.add_argument("--strategy", default=None, help="Lightning strategy (auto, ddp, ...)")
    parser.add_argument("--accelerator", default=None, help="auto, cpu or gpu")
    parser.add_argument("--precision", default=None, help="auto, 32-true, bf16-mixed, ...")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging("train")
    try:
        experiment = validate_experiment(args.experiment)
        params = json.loads(args.params)
    except (InvalidIdentifier, json.JSONDecodeError) as exc:
        logging.error("experiment %r: %s", args.experiment, exc)
        return 2
    overrides = {"devices": args.devices or None, "num_nodes": args.num_nodes or None, "strategy": args.strategy,
                 "accelerator": args.accelerator, "precision": args.precision}
    from foldworks.train.module import NonFiniteError  # torch import only after argument checks
    from foldworks.train.resume import Preempted
    from foldworks.train.run import fit

    try:
        fit(experiment, params, args.chains, args.features_dir, args.out_dir, args.threads, overrides,
            args.init_from or None, args.templates_dir or None)
    except Preempted as exc:
        logging.warning("experiment %s: %s; rerun the same command to resume", experiment, exc)
        return 128 + int(exc.signum)
    except (ValueError, NonFiniteError) as exc:
        logging.error("experiment %s: %s", experiment, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
