"""Model registry: one decorator per family, one factory used by training and prediction.

Adding a family = one module that defines an ``nn.Module`` decorated with
``@register_model("name")`` and one import line in :mod:`foldworks.models`.
Every model maps a padded batch dict (see :mod:`foldworks.models.common`) to an output dict and has
``loss(batch, outputs) -> (loss, logs)``. A structure family (``task = "structure"``, the default)
outputs at least ``ca_coords [B, L, 3]`` (Å) and ``plddt [B, L]`` (0..1); a design family
(``task = "design"``) outputs ``logits [B, L, 21]`` and has ``sample`` (see :mod:`foldworks.models.mpnn`).
Optional: ``validation_metrics(batch, outputs) -> {name: Tensor [B]}`` (per-chain validation
scores; structure default ``lddt_ca``) and ``monitor`` (the name among them that selects
``best.ckpt``, higher is better; default ``lddt_ca``).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from torch import nn

# TASKS: what a family computes: ``structure`` (coordinates; predict writes mmCIF, evaluate scores
# lDDT/RMSD/TM) or ``design`` (sequence from backbone; predict writes FASTA, evaluate scores
# recovery/perplexity). Defined in the torch-free catalogue that the config-load check reads.
from foldworks.families import FAMILY_TASKS, TASKS  # noqa: F401

MODEL_REGISTRY: dict[str, type[nn.Module]] = {}

_M = TypeVar("_M", bound=type[nn.Module])


def register_model(name: str) -> Callable[[_M], _M]:
    """Class decorator registering a model family under ``name`` (unique)."""

    def decorator(cls: _M) -> _M:
        if name in MODEL_REGISTRY and MODEL_REGISTRY[name] is not cls:
            raise ValueError(f"model {name!r} is already registered ({MODEL_REGISTRY[name].__name__})")
        MODEL_REGISTRY[name] = cls
        return cls

    return decorator


def build_model(name: str, config: dict[str, Any] | None = None) -> nn.Module:
    """Instantiate the registered family ``name`` with its ``config`` dict (unknown keys refused)."""
    if name not in MODEL_REGISTRY:
        raise KeyError(f"unknown model {name!r}; registered: {sorted(MODEL_REGISTRY)}")
    return MODEL_REGISTRY[name](**(config or {}))


def model_task(name: str) -> str:
    """Task of the registered family ``name``: its ``task`` class attribute, ``structure`` when absent."""
    if name not in MODEL_REGISTRY:
        raise KeyError(f"unknown model {name!r}; registered: {sorted(MODEL_REGISTRY)}")
    task = getattr(MODEL_REGISTRY[name], "task", "structure")
    if task not in TASKS:
        raise ValueError(f"model {name!r} declares unknown task {task!r}; expected one of {list(TASKS)}")
    return task
