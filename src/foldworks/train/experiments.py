"""Config-load checks of the ``experiments:`` section (run by the Snakefile before any job).

Each experiment's family decides its task (``structure`` or ``design``,
:func:`foldworks.models.model_task`); the checks refuse, naming the experiment, an unknown model,
an unknown or mismatched declared ``task``, settings of the other task (``predict`` sampling
settings on a structure family), and ``init_from`` that names neither an experiment nor a
``.ckpt`` path, or that forms a cycle. Torch-free: families and tasks come from
:mod:`foldworks.families`, which a test keeps equal to the registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Experiment keys that only apply to one task.
TASK_ONLY_KEYS: dict[str, str] = {"predict": "design"}


class ExperimentConfigError(ValueError):
    """An experiment's configuration does not fit its model family (message names the experiment)."""


def experiment_tasks(experiments: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``{experiment: task}`` after checking every experiment; raises :class:`ExperimentConfigError`."""
    from foldworks.families import FAMILY_TASKS, TASKS

    tasks = {}
    for name, spec in experiments.items():
        model = spec.get("model")
        if model not in FAMILY_TASKS:
            raise ExperimentConfigError(f"experiment {name}: unknown model {model!r}; registered: "
                                        f"{sorted(FAMILY_TASKS)}")
        task = FAMILY_TASKS[model]
        declared = spec.get("task", task)
        if declared not in TASKS:
            raise ExperimentConfigError(f"experiment {name}: unknown task {declared!r}; expected one of {list(TASKS)}")
        if declared != task:
            raise ExperimentConfigError(f"experiment {name}: task {declared!r} declared, but model {model!r} is a "
                                        f"{task} family")
        for key, only in TASK_ONLY_KEYS.items():
            if key in spec and only != task:
                raise ExperimentConfigError(f"experiment {name}: '{key}' settings apply to {only} families only; "
                                            f"model {model!r} is a {task} family")
        tasks[name] = task
    for name in experiments:
        init_parent(experiments, name)
    return tasks


#: File endings ``init_from`` accepts as a path (foldworks checkpoint, DeepMind npz, OpenFold/torch file).
WEIGHT_SUFFIXES: tuple[str, ...] = (".ckpt", ".npz", ".pt", ".pth")


def init_parent(experiments: dict[str, dict[str, Any]], name: str) -> str | None:
    """The checkpoint file an experiment starts from (``None`` without ``init_from``).

    An experiment name → ``results/checkpoints/<parent>/best.ckpt``; a path ending in one of
    :data:`WEIGHT_SUFFIXES` (a foldworks checkpoint, DeepMind ``.npz`` or OpenFold ``.pt``) → that path. Raises :class:`ExperimentConfigError` for an unknown parent or a cycle.
    """
    seen = [name]
    current = name
    while True:
        parent = experiments[current].get("init_from")
        if parent is None:
            break
        parent = str(parent)
        if parent not in experiments:
            if parent.endswith(WEIGHT_SUFFIXES):
                break
            raise ExperimentConfigError(f"experiment {current}: init_from {parent!r} is neither an experiment "
                                        f"({', '.join(sorted(experiments))}) nor a weights file "
                                        f"({', '.join(WEIGHT_SUFFIXES)})")
        if parent in seen:
            raise ExperimentConfigError(f"experiment {name}: init_from cycle {' -> '.join(seen + [parent])}")
        seen.append(parent)
        current = parent
    first = experiments[name].get("init_from")
    if first is None:
        return None
    first = str(first)
    return f"results/checkpoints/{first}/best.ckpt" if first in experiments else str(Path(first))


def init_inputs(experiments: dict[str, dict[str, Any]], name: str) -> list[str]:
    """Train-rule input: ``[parent checkpoint]`` of an ``init_from`` experiment, else ``[]``."""
    parent = init_parent(experiments, name)
    return [parent] if parent else []


def train_params(experiments: dict[str, dict[str, Any]], name: str) -> str:
    """The experiment's config as canonical JSON for ``foldworks.train`` (minus the predict-only ``predict``)."""
    return json.dumps({k: v for k, v in experiments[name].items() if k != "predict"}, sort_keys=True)


def design_params(config: dict[str, Any], tasks: dict[str, str], name: str) -> str:
    """``predict.design`` merged with the experiment's ``predict`` (design families; ``{}`` for structure)."""
    if tasks[name] != "design":
        return "{}"
    return json.dumps({**config["predict"].get("design", {}), **config["experiments"][name].get("predict", {})},
                      sort_keys=True)
