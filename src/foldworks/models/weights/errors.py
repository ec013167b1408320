"""Reading weight files safely and checking a state dict against a model, with one-line errors."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


class WeightsError(Exception):
    """A weight file cannot be used; the message is one line naming the file or key."""


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` (loaded eagerly so a truncated member fails here)."""
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise WeightsError(f"{path}: not a weights file (a single array, not an .npz archive of named arrays)")
        with data:
            return {k: np.asarray(data[k]) for k in data.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise WeightsError(f"{path}: truncated or corrupt .npz weights file ({type(exc).__name__}: {exc})") from None


def read_torch(path: Path) -> Any:
    """A ``torch.save`` file read with ``weights_only=True`` (no arbitrary objects are unpickled)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WeightsError(f"{path}: not a weights file (holds objects other than tensors: {first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WeightsError(f"{path}: truncated or corrupt weights file ({first})") from None


def tensor_dict(obj: Any, path: Path, what: str = "state dict") -> dict[str, torch.Tensor]:
    """``obj`` as ``{str: Tensor}``, else a :class:`WeightsError` naming the first offending entry."""
    if not isinstance(obj, dict):
        raise WeightsError(f"{path}: not a weights file (expected a {what} of tensors, found {type(obj).__name__})")
    if not obj:
        raise WeightsError(f"{path}: not a weights file (empty {what})")
    for key, val in obj.items():
        if not isinstance(key, str) or not torch.is_tensor(val):
            raise WeightsError(
                f"{path}: not a weights file ({what} entry {key!r} is a {type(val).__name__}, not a tensor)")
    return obj


def check_strict(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]]) -> None:
    """Refuse any shape-mismatched, missing or unexpected key: the first one found (in the model's
    key order) is reported with both shapes, with a count of the other problems."""
    problems = []
    for key, shape in expected.items():
        if key in state and tuple(state[key].shape) != tuple(shape):
            problems.append(f"shape mismatch for {key!r}: file {list(state[key].shape)} vs model {list(shape)}")
    problems += [f"missing key {k!r} (model shape {list(s)})" for k, s in expected.items() if k not in state]
    problems += [f"unexpected key {k!r} (file shape {list(v.shape)})" for k, v in state.items() if k not in expected]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise WeightsError(problems[0] + more)
