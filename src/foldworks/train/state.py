"""Training state that Lightning does not keep by itself: EMA weights and RNG states.

Everything here goes into checkpoints as plain containers and tensors, so checkpoints load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn


class EMA:
    """Exponential moving average of a module's ``state_dict`` (float tensors in fp32).

    After ``n`` updates the decay is ``min(decay, (1 + n) / (10 + n))`` (short runs are not
    dominated by the initial weights). Integer buffers are copied, not averaged.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay, self.updates = float(decay), 0
        self.shadow = {k: v.detach().clone().float() if v.is_floating_point() else v.detach().clone()
                       for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """One EMA step towards ``model``'s current weights."""
        self.updates += 1
        decay = min(self.decay, (1.0 + self.updates) / (10.0 + self.updates))
        shadows, currents = [], []
        for key, value in model.state_dict().items():
            shadow = self.shadow[key]
            if shadow.device != value.device:
                shadow = self.shadow[key] = shadow.to(value.device)
            if value.is_floating_point():
                shadows.append(shadow)
                currents.append(value.detach().float())
            else:
                shadow.copy_(value)
        if shadows:
            torch._foreach_lerp_(shadows, currents, 1.0 - decay)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of the averaged weights (keys of the model's ``state_dict``)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.shadow.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor], updates: int) -> None:
        missing = set(self.shadow) ^ set(state)
        if missing:
            raise KeyError(f"EMA state does not match the model: keys {sorted(missing)[:5]}")
        self.shadow = {k: state[k].detach().clone().to(self.shadow[k].device, self.shadow[k].dtype) for k in state}
        self.updates = int(updates)


def collect_rng_states() -> dict[str, Any]:
    """torch (CPU and CUDA), numpy and Python RNG states as tensors/ints (weights_only-loadable)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "python": {"version": int(version), "internal": torch.tensor(internal, dtype=torch.int64),
                   "gauss": gauss},
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Inverse of :func:`collect_rng_states` (CUDA states only when the device count matches)."""
    torch.set_rng_state(states["torch"])
    numpy_state = states["numpy"]
    np.random.set_state((numpy_state["name"], numpy_state["keys"].numpy().astype(np.uint32), numpy_state["pos"],
                         numpy_state["has_gauss"], numpy_state["cached"]))
    python = states["python"]
    random.setstate((python["version"], tuple(int(v) for v in python["internal"].tolist()), python["gauss"]))
    cuda = states.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def plain(obj: Any) -> Any:
    """Deep copy into plain dict/list/str/number containers."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj
