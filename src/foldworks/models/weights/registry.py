"""Weight formats and the foldworks checkpoint they are imported into.

``FORMATS`` maps a format name to a :class:`WeightFormat` (a ``detect(path) -> bool`` and a
``load(path, sizes) -> Imported``; ``sizes`` is a preset name, a model config or ``None``). Formats
are tried in insertion order; the built-in detectors look at the content (DeepMind array scopes,
OpenFold state-dict names), so other ``.npz``/``.pt`` files fall through. Adding a format is one line::

    FORMATS["proteinmpnn"] = WeightFormat(detect=my_detect, load=my_load)

A foldworks checkpoint is ``{"state_dict": {"model.<key>": tensor}, "model": <family>,
"model_config": {...}, "source": {"path", "sha256", "format"}, "hyper_parameters": {"config":
{"model", "model_config"}}}``: the ``model.`` prefix and ``hyper_parameters`` let the training and
prediction loaders read it like a trained checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from foldworks.models.af2.config import AF2Config, preset as af2_preset
from foldworks.models.af2.infer import config_from_state_dict
from foldworks.models.weights import deepmind, openfold
from foldworks.models.weights.errors import WeightsError, check_strict, read_npz, read_torch

AF2_FAMILY = "evoformer"
DEFAULT_PRESET = "model_1_ptm"


@dataclass
class Imported:
    """Converted weights: our state dict, the model family and its config dict."""

    state_dict: dict[str, torch.Tensor]
    model: str
    model_config: dict[str, Any]


@dataclass
class WeightFormat:
    detect: Callable[[Path], bool]
    load: Callable[[Path, Any], Imported]  # (path, preset name / model config / None)


def af2_expected_shapes(cfg: AF2Config) -> dict[str, tuple[int, ...]]:
    """Key → shape of the AF2 model for ``cfg`` (built on the ``meta`` device)."""
    from foldworks.models.af2.model import AlphaFold2

    with torch.device("meta"):
        model = AlphaFold2(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _af2_imported(state: dict[str, torch.Tensor], preset_name: "str | AF2Config | None") -> Imported:
    """Strict-check AF2 weights against the preset or config (sizes read from the weights when none)."""
    if isinstance(preset_name, AF2Config):
        cfg = preset_name
    elif preset_name is not None:
        cfg = af2_preset(preset_name)
    else:
        try:
            cfg = config_from_state_dict(state, af2_preset(DEFAULT_PRESET))
        except KeyError as exc:
            raise WeightsError(f"missing key {exc.args[0]!r} (needed to read the model sizes)") from None
    check_strict(state, af2_expected_shapes(cfg))
    return Imported(state, AF2_FAMILY, cfg.to_dict())


def _detect_deepmind(path: Path) -> bool:
    """An ``.npz`` whose array names are DeepMind AlphaFold scopes (or that cannot be read: the
    loader then reports why)."""
    if path.suffix != ".npz":
        return False
    try:
        with np.load(path, allow_pickle=False) as data:
            return any(name.startswith(deepmind.PREFIX) for name in data.files)
    except Exception:  # noqa: BLE001 - unreadable: let the loader give the one-line reason
        return True


def _load_deepmind(path: Path, preset_name: Any) -> Imported:
    params = read_npz(path)
    try:
        state = deepmind.convert(params)
    except (KeyError, ValueError) as exc:
        raise WeightsError(f"{path}: {exc.args[0]}") from None
    return _af2_imported(state, preset_name)


def _detect_openfold(path: Path) -> bool:
    """A torch file holding OpenFold AF2 weights (or one that cannot be read: the loader then
    reports why). Memory-mapped, so large files are not read twice."""
    if path.suffix not in (".pt", ".pth", ".ckpt"):
        return False
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        state, _ = openfold.unwrap(obj, path)
    except WeightsError:
        return True
    except Exception:  # noqa: BLE001 - unreadable: let the loader give the one-line reason
        return True
    return openfold.looks_like_openfold(state)


def _load_openfold(path: Path, preset_name: Any) -> Imported:
    state, _ = openfold.unwrap(read_torch(path), path)
    if not openfold.looks_like_openfold(state):
        raise WeightsError(f"{path}: not an OpenFold AF2 state dict (no 'evoformer.blocks.*' keys)")
    return _af2_imported({k: v.float() for k, v in state.items()}, preset_name)


def _load_proteinmpnn(path: Path, preset: Any) -> Imported:
    """A released ProteinMPNN ``v_48_0XX.pt`` (sizes read from the file; ``preset`` must match them)."""
    from foldworks.models.weights import proteinmpnn

    try:
        return Imported(*proteinmpnn.import_proteinmpnn(path, preset))
    except proteinmpnn.ProteinMPNNWeightsError as exc:
        raise WeightsError(str(exc)) from None


def _detect_proteinmpnn(path: Path) -> bool:
    from foldworks.models.weights import proteinmpnn

    return proteinmpnn.is_proteinmpnn(path)


FORMATS: dict[str, WeightFormat] = {
    "deepmind": WeightFormat(detect=_detect_deepmind, load=_load_deepmind),
    "proteinmpnn": WeightFormat(detect=_detect_proteinmpnn, load=_load_proteinmpnn),
    "openfold": WeightFormat(detect=_detect_openfold, load=_load_openfold),
}


def detect_format(path: Path) -> str:
    """The first registered format whose detector accepts ``path``."""
    for name, fmt in FORMATS.items():
        if fmt.detect(path):
            return name
    raise WeightsError(f"{path}: unknown weights format (known: {', '.join(FORMATS)}); pass --format")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def import_weights(src: str | Path, out: str | Path, fmt: str | None = None, preset: Any = None) -> dict[str, Any]:
    """Convert ``src`` and write a foldworks checkpoint to ``out`` atomically (nothing on error).

    ``preset``: a preset name or a model config to check the weights against; ``None`` reads the
    sizes from the weights."""
    src, out = Path(src), Path(out)
    if not src.is_file():
        raise WeightsError(f"{src}: no such file")
    name = fmt or detect_format(src)
    if name not in FORMATS:
        raise WeightsError(f"unknown format {name!r} (known: {', '.join(FORMATS)})")
    imported = FORMATS[name].load(src, preset)
    ckpt = {
        "state_dict": {f"model.{k}": v.contiguous() for k, v in imported.state_dict.items()},
        "model": imported.model, "model_config": imported.model_config,
        "source": {"path": str(src), "sha256": sha256(src), "format": name},
        "hyper_parameters": {"config": {"model": imported.model, "model_config": imported.model_config}},
    }
    _atomic_save(ckpt, out)
    return ckpt


def export_openfold(src: str | Path, out: str | Path) -> int:
    """Write the AF2 weights of a foldworks checkpoint ``src`` as an OpenFold state dict ``out``
    (atomically); returns the number of tensors."""
    src, out = Path(src), Path(out)
    ckpt = read_torch(src)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        raise WeightsError(f"{src}: not a foldworks checkpoint (no 'state_dict')")
    state, _ = openfold.unwrap({"state_dict": ckpt["state_dict"]}, src)
    _atomic_save(openfold.export(state), out)
    return len(state)


def export_deepmind(src: str | Path, out: str | Path) -> int:
    """Write the AF2 weights of a foldworks checkpoint ``src`` as DeepMind parameters ``out``
    (``.npz``, atomically); returns the number of arrays."""
    src, out = Path(src), Path(out)
    ckpt = read_torch(src)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict) or "model_config" not in ckpt:
        raise WeightsError(f"{src}: not a foldworks checkpoint (needs 'state_dict' and 'model_config')")
    state, _ = openfold.unwrap({"state_dict": ckpt["state_dict"]}, src)
    try:
        params = deepmind.export(state, AF2Config.from_dict(ckpt["model_config"]))
    except KeyError as exc:
        raise WeightsError(f"{src}: {exc.args[0]}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **params)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(params)


def _atomic_save(obj: Any, out: Path) -> None:
    """``torch.save`` to a temporary file beside ``out``, then rename (nothing left on error)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
