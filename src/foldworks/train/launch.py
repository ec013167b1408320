"""The train job's launch line from its Snakemake resources (no torch import: the Snakefile uses it).

One process by default; DDP across Slurm tasks when resources ``mpi="srun"`` and ``tasks`` > 1
(README "Multi-GPU and multi-node training on Slurm").
"""

from __future__ import annotations

from typing import Any, Mapping


class LaunchError(ValueError):
    """Resources that cannot be turned into a launch line; the message says which and why."""


def train_launch(threads: int, resources: Mapping[str, Any]) -> tuple[str, int]:
    """(command prefix, devices per node) for the train job from its resources.

    Without `mpi` (or with tasks <= 1): ("", gpu), one process. With mpi="srun..." and tasks T > 1
    on N nodes: ("srun ... --ntasks=T --ntasks-per-node=T/N ... ", T/N). The step's geometry is
    spelled out because the jobstep plugin strips the job's SLURM_* variables before the shell
    runs (a bare `srun -n T` could pack every rank onto the first node). Each rank's log lines
    carry its rank ("0: ", "1: "), and a rank that fails takes the step down (--kill-on-bad-exit)
    instead of leaving the others blocked in a collective."""
    tasks, nodes = int(resources.get("tasks", 1) or 1), int(resources.get("nodes", 1) or 1)
    mpi = str(resources.get("mpi", "") or "").strip()
    if tasks <= 1 or not mpi:
        if tasks > 1 or nodes > 1:
            raise LaunchError(f"train: tasks={tasks}, nodes={nodes} need mpi='srun' (one rank per Slurm "
                              "task); on one machine set gpu=N instead (Lightning starts the processes)")
        return "", int(resources.get("gpu", 1) or 0)
    if mpi.split()[0] != "srun":
        raise LaunchError(f"train: mpi={mpi!r}: ranks must be started by srun (Lightning's SLURM environment)")
    if tasks % nodes:
        raise LaunchError(f"train: tasks={tasks} is not a multiple of nodes={nodes} (same ranks on every node)")
    per_node = tasks // nodes
    prefix = (f"{mpi} --label --kill-on-bad-exit=1 --nodes={nodes} --ntasks={tasks} --ntasks-per-node={per_node}"
              f" --cpus-per-task={max(1, int(threads))} ")
    return prefix, per_node
