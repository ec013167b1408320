"""ProteinMPNN's released checkpoint format ↔ the ``mpnn`` family.

A released file (``v_48_002.pt`` … ``v_48_030.pt``) is a ``torch.save`` dict
``{'num_edges': int, 'noise_level': float, 'model_state_dict': {name: tensor}}``; training
checkpoints also carry ``epoch``, ``step`` and ``optimizer_state_dict``, which are ignored.
Parameter names are identical to :class:`foldworks.models.mpnn.MPNNModel`'s, so the state dict
is used as is. Hidden width and layer counts are inferred from the state dict
(``W_e.weight`` rows, ``encoder_layers.N.`` / ``decoder_layers.N.`` prefixes); ``k`` is
``num_edges``; the training noise (Å) is ``noise_level``.

>>> state, config = read_proteinmpnn("v_48_020.pt")  # config: mpnn model_config

As a command (a foldworks checkpoint for predict/evaluate/init_from, and an empty training log)::

    python -m foldworks.models.weights.proteinmpnn --weights v_48_020.pt --out best.ckpt [--training-log metrics.csv]
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from foldworks.fsutil import atomic_open

REQUIRED_KEYS = ("num_edges", "noise_level", "model_state_dict")


class ProteinMPNNWeightsError(ValueError):
    """A file that is not a loadable ProteinMPNN checkpoint (message names the file and the key)."""


def _layer_count(state: dict[str, torch.Tensor], prefix: str) -> int:
    found = {int(m.group(1)) for key in state for m in [re.match(rf"{prefix}\.(\d+)\.", key)] if m}
    return max(found) + 1 if found else 0


def infer_config(state: dict[str, torch.Tensor], num_edges: int, noise_level: float) -> dict[str, Any]:
    """``mpnn`` model_config (hidden, layer counts, k, training noise) of a ProteinMPNN state dict."""
    if "W_e.weight" not in state:
        raise ProteinMPNNWeightsError("state dict has no 'W_e.weight' (not a full-backbone ProteinMPNN)")
    return {"hidden": int(state["W_e.weight"].shape[0]), "n_encoder": _layer_count(state, "encoder_layers"),
            "n_decoder": _layer_count(state, "decoder_layers"), "k_neighbors": int(num_edges),
            "backbone_noise": float(noise_level)}


def check_state(state: dict[str, torch.Tensor], config: dict[str, Any], source: str) -> None:
    """Raise naming the key (and both shapes) unless ``state`` has exactly the model's keys and shapes."""
    from foldworks.models.mpnn import MPNNModel

    with torch.device("meta"):  # shapes only: no memory, no draw from torch's random generator
        expected = MPNNModel(**config).state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing:
        raise ProteinMPNNWeightsError(f"{source}: missing key {missing[0]!r} (shape {tuple(expected[missing[0]].shape)})"
                                      f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}")
    if unexpected:
        raise ProteinMPNNWeightsError(f"{source}: unexpected key {unexpected[0]!r} (shape "
                                      f"{tuple(state[unexpected[0]].shape)})")
    for key, value in expected.items():
        if tuple(state[key].shape) != tuple(value.shape):
            raise ProteinMPNNWeightsError(f"{source}: key {key!r} has shape {tuple(state[key].shape)}, "
                                          f"expected {tuple(value.shape)} for {config}")


def read_proteinmpnn(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Load a released ProteinMPNN ``.pt`` → ``(state_dict, mpnn model_config)``; strict, with one-line errors."""
    path = Path(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unreadable, truncated, or not a torch file
        raise ProteinMPNNWeightsError(f"{path}: not a readable torch checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(checkpoint, dict):
        raise ProteinMPNNWeightsError(f"{path}: expected a dict, found {type(checkpoint).__name__}")
    absent = [k for k in REQUIRED_KEYS if k not in checkpoint]
    if absent:
        raise ProteinMPNNWeightsError(f"{path}: missing checkpoint key {absent[0]!r} (has {sorted(checkpoint)})")
    state = checkpoint["model_state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ProteinMPNNWeightsError(f"{path}: 'model_state_dict' is not a dict of tensors")
    config = infer_config(state, checkpoint["num_edges"], checkpoint["noise_level"])
    check_state(state, config, str(path))
    return OrderedDict(state), config


def is_proteinmpnn(path: str | Path) -> bool:
    """Whether ``path`` is a torch file holding a ProteinMPNN checkpoint dict (format detection)."""
    try:
        raw = torch.load(Path(path), map_location="cpu", weights_only=True)
    except Exception:
        return False
    return isinstance(raw, dict) and all(key in raw for key in REQUIRED_KEYS)


def import_proteinmpnn(path: str | Path, preset: str | None = None) -> tuple[dict[str, torch.Tensor], str, dict[str, Any]]:
    """``(state_dict, "mpnn", model_config)`` of a released file; ``preset`` (e.g. ``v_48_020``) must then match its sizes."""
    state, config = read_proteinmpnn(path)
    if preset is not None:
        from foldworks.models.mpnn import PRESETS

        if preset not in PRESETS:
            raise ProteinMPNNWeightsError(f"{path}: unknown mpnn preset {preset!r}; known: {sorted(PRESETS)}")
        sizes = {k: v for k, v in PRESETS[preset].items() if k != "backbone_noise"}
        differ = {k: (config[k], v) for k, v in sizes.items() if config[k] != v}
        if differ:
            raise ProteinMPNNWeightsError(f"{path}: sizes {differ} (file, preset) do not match preset {preset!r}")
    return state, "mpnn", config


def write_proteinmpnn(path: str | Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """Write ``state`` in the released format (``num_edges`` = k, ``noise_level`` = training noise).

    The state is checked first (nothing is written on error) and written via a temporary file.
    """
    path = Path(path)
    check_state(state, {k: config[k] for k in ("hidden", "n_encoder", "n_decoder", "k_neighbors")}, str(path))
    payload = {"num_edges": int(config["k_neighbors"]), "noise_level": float(config.get("backbone_noise", 0.0)),
               "model_state_dict": OrderedDict((k, v.detach().cpu()) for k, v in state.items())}
    with atomic_open(path, "wb") as handle:
        torch.save(payload, handle)
    return path


def to_foldworks_checkpoint(source: str | Path, path: str | Path) -> Path:
    """Convert a released ProteinMPNN file into a foldworks ``mpnn`` checkpoint at ``path``.

    The result is what ``predict``, ``evaluate`` and ``init_from`` read (``hyper_parameters.config``
    with ``model: mpnn`` and the inferred ``model_config``; weights under ``state_dict`` as
    ``model.<name>``). Checked before writing; written via a temporary file.
    """
    state, config = read_proteinmpnn(source)
    checkpoint = {"state_dict": OrderedDict((f"model.{k}", v) for k, v in state.items()),
                  "hyper_parameters": {"config": {"model": "mpnn", "model_config": config}},
                  "foldworks": {"config": {"model": "mpnn", "model_config": config},
                                "imported_from": {"format": "proteinmpnn", "file": str(source)}}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as handle:
        torch.save(checkpoint, handle)
    return path


#: Columns of the trainer's ``metrics.csv`` for a design experiment (an imported one has no rows).
TRAINING_LOG_HEADER = "step,epoch,train_loss,val_loss,val_recovery\n"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import logging

    parser = argparse.ArgumentParser(prog="python -m foldworks.models.weights.proteinmpnn",
                                     description="Convert a released ProteinMPNN .pt into a foldworks mpnn checkpoint.")
    parser.add_argument("--weights", required=True, type=Path, help="released ProteinMPNN .pt")
    parser.add_argument("--out", required=True, type=Path, help="foldworks checkpoint to write")
    parser.add_argument("--training-log", type=Path, help="also write an empty trainer metrics.csv here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        to_foldworks_checkpoint(args.weights, args.out)
    except ProteinMPNNWeightsError as exc:
        logging.error("%s", exc)
        return 1
    if args.training_log is not None:
        with atomic_open(args.training_log, "w", encoding="utf-8") as handle:
            handle.write(TRAINING_LOG_HEADER)
    logging.info("wrote %s from %s", args.out, args.weights)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
