"""Design or score one structure as ProteinMPNN's ``protein_mpnn_run.py`` does (one structure, batch of copies).

Per run: seed torch/numpy; score the native sequence with one random decoding order; then for
each temperature, ``num_batches`` × ``batch_size`` samples, each re-scored teacher-forced with its
own decoding order. Outputs (written atomically): ``seqs/<name>.fa`` (:mod:`foldworks.design.fasta`),
``probs/<name>.npz`` (``log_probs``/``probs [N, L, 21]``, ``S [N, L]``, ``mask [L]``,
``chain_order``) when asked, ``score_only/<name>.npz`` (``score``, ``global_score`` ``[N]``) in
score-only mode, ``conditional_probs_only/<name>.npz`` / ``unconditional_probs_only/<name>.npz``
(``log_p [1, L, 21]``, ``S``, ``mask``, ``design_mask``, ``chain_order``) in the probability modes.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from foldworks.design import fasta
from foldworks.design.structure import DesignOptions, featurize, read_chains
from foldworks.fsutil import atomic_open, write_npz_atomic
from foldworks.models.mpnn import (ALPHABET, MPNNModel, conditional_probs, sample, sequence_scores,
                                   unconditional_probs)

log = logging.getLogger("foldworks.design")


@dataclass
class SamplingSettings:
    """ProteinMPNN run-script settings (its defaults)."""

    temperatures: Sequence[float] = (0.1,)
    num_seq: int = 1
    batch_size: int = 1
    omit_aas: str = "X"
    bias_aa: dict[str, float] | None = None
    backbone_noise: float = 0.0
    seed: int = 0  # 0 = draw one
    score_only: bool = False
    probs_only: str = ""  # "conditional", "conditional_backbone" or "unconditional"
    save_probs: bool = False


def load_design_model(path: str | Path) -> tuple[MPNNModel, str]:
    """A released ProteinMPNN ``.pt`` or a foldworks ``mpnn`` checkpoint → ``(model in eval mode, name)``."""
    from foldworks.models.weights.proteinmpnn import read_proteinmpnn
    from foldworks.train.checkpoint import load_checkpoint, model_from_checkpoint

    raw = load_checkpoint(path)
    if isinstance(raw, dict) and "model_state_dict" in raw and "num_edges" in raw:
        state, config = read_proteinmpnn(path)
        model = MPNNModel(**config)
        model.load_state_dict(state)
    else:
        model, config = model_from_checkpoint(path)
        if not isinstance(model, MPNNModel):
            raise ValueError(f"{path}: model {config.get('model')!r} is not the mpnn family")
    return model.eval(), Path(path).stem


def _inputs_for(features: dict[str, Any], copies: int) -> dict[str, torch.Tensor]:
    keys = ("X", "S", "mask", "chain_M", "chain_M_pos", "residue_idx", "chain_encoding_all", "omit_AA_mask",
            "bias_by_res")
    return {k: features[k].expand(copies, *features[k].shape[1:]).contiguous() for k in keys}


def _prepare(checkpoint: Path, structure: Path, options: DesignOptions, settings: SamplingSettings, seed: int
             ) -> tuple[dict[str, Any], MPNNModel, str]:
    """Seed, featurise, build the model (in ProteinMPNN's order); warn about masked positions."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    features = featurize(read_chains(structure), options)
    model, model_name = load_design_model(checkpoint)
    model.features.augment_eps, model.features.noise_in_eval = settings.backbone_noise, settings.backbone_noise > 0
    missing = int((features["mask"] == 0).sum())
    if missing:
        log.warning("%s: %d of %d positions lack N, CA, C or O (or are numbering gaps): masked, not designed",
                    structure, missing, features["mask"].shape[1])
    return features, model, model_name


@torch.no_grad()
def design_structure(checkpoint: Path, structure: Path, options: DesignOptions, settings: SamplingSettings
                     ) -> dict[str, Any]:
    """Design (or score) ``structure``; returns the FASTA text, probability arrays and scores (nothing written).

    The random stream is ProteinMPNN's: seed, parse, build the model (its initialisation draws
    from torch's generator), then the scoring and sampling draws; with the same seed and weights
    the outputs equal ``protein_mpnn_run.py``'s.
    """
    seed, name = settings.seed or int(np.random.randint(0, 999)), structure.name.split(".")[0]
    features, model, model_name = _prepare(checkpoint, structure, options, settings, seed)
    x = _inputs_for(features, settings.batch_size)
    designed = x["mask"] * x["chain_M"] * x["chain_M_pos"]
    if settings.score_only:
        return {"name": name, "seed": seed, **_score_only(model, x, designed, settings)}
    if settings.probs_only:
        return {"name": name, "seed": seed, **_probs_only(model, x, designed, features, settings.probs_only)}
    randn_1 = torch.randn(x["chain_M"].shape)
    log_probs, _ = model.log_probs(x["X"], x["S"], x["mask"], x["chain_M"] * x["chain_M_pos"], x["residue_idx"],
                                   x["chain_encoding_all"], randn_1)
    native_score = float(sequence_scores(x["S"], log_probs, designed)[0])
    native_global = float(sequence_scores(x["S"], log_probs, x["mask"])[0])
    starts = [features["offsets"][c] for c in features["chain_order"]]
    chain_M0 = x["chain_M"][0].bool().tolist()
    fixed = [c for c in features["chain_order"] if c not in features["designed_chains"]]
    lines = [fasta.native_header(name, native_score, native_global, sorted(fixed), features["designed_chains"],
                                 model_name, seed), fasta.chain_sequence(x["S"][0].tolist(), chain_M0, starts, ALPHABET)]
    omit = torch.tensor([float(a in settings.omit_aas) for a in ALPHABET])
    bias = torch.tensor([float((settings.bias_aa or {}).get(a, 0.0)) for a in ALPHABET], dtype=torch.float64)
    arrays: dict[str, list[np.ndarray]] = {"log_probs": [], "probs": [], "S": []}
    index = 0
    for temperature in settings.temperatures:
        for _ in range(max(1, settings.num_seq // settings.batch_size)):
            randn_2 = torch.randn(x["chain_M"].shape)
            out = sample(model, x["X"], randn_2, x["S"], x["chain_M"], x["chain_encoding_all"], x["residue_idx"],
                         x["mask"], temperature, omit, bias, x["chain_M_pos"], x["omit_AA_mask"], x["bias_by_res"],
                         tied_positions=features["tied"] or None)
            lp, _ = model.log_probs(x["X"], out["S"], x["mask"], x["chain_M"] * x["chain_M_pos"], x["residue_idx"],
                                    x["chain_encoding_all"], randn_2, order=out["decoding_order"])
            scores = sequence_scores(out["S"], lp, designed)
            global_scores = sequence_scores(out["S"], lp, x["mask"])
            recovery = ((out["S"] == x["S"]).float() * designed).sum(-1) / designed.sum(-1)
            for row in range(settings.batch_size):
                index += 1
                lines.append(fasta.sample_header(temperature, index, float(scores[row]), float(global_scores[row]),
                                                 float(recovery[row])))
                lines.append(fasta.chain_sequence(out["S"][row].tolist(), chain_M0, starts, ALPHABET))
            arrays["log_probs"].append(lp.numpy())
            arrays["probs"].append(out["probs"].numpy())
            arrays["S"].append(out["S"].numpy())
    probs = {k: np.concatenate(v) for k, v in arrays.items()}
    probs.update(mask=designed[0].numpy(), chain_order=np.array(features["chain_order"]))
    return {"name": name, "seed": seed, "fasta": "\n".join(lines) + "\n", "probs": probs,
            "score": native_score, "global_score": native_global}


def _score_only(model: MPNNModel, x: dict[str, torch.Tensor], designed: torch.Tensor,
                settings: SamplingSettings) -> dict[str, Any]:
    scores, global_scores = [], []
    for _ in range(max(1, settings.num_seq // settings.batch_size)):
        randn_1 = torch.randn(x["chain_M"].shape)
        lp, _ = model.log_probs(x["X"], x["S"], x["mask"], x["chain_M"] * x["chain_M_pos"], x["residue_idx"],
                                x["chain_encoding_all"], randn_1)
        scores.append(sequence_scores(x["S"], lp, designed).numpy())
        global_scores.append(sequence_scores(x["S"], lp, x["mask"]).numpy())
    return {"score_only": {"score": np.concatenate(scores), "global_score": np.concatenate(global_scores),
                           "S": x["S"][0].numpy()}}


def _probs_only(model: MPNNModel, x: dict[str, torch.Tensor], designed: torch.Tensor, features: dict[str, Any],
                mode: str) -> dict[str, Any]:
    if mode == "unconditional":
        log_p = unconditional_probs(model, x["X"], x["mask"], x["residue_idx"], x["chain_encoding_all"])
    else:
        randn_1 = torch.randn(x["chain_M"].shape)
        log_p = conditional_probs(model, x["X"], x["S"], x["mask"], x["chain_M"] * x["chain_M_pos"], x["residue_idx"],
                                  x["chain_encoding_all"], randn_1, backbone_only=mode == "conditional_backbone")
    folder = "unconditional_probs_only" if mode == "unconditional" else "conditional_probs_only"
    return {folder: {"log_p": log_p[:1].numpy(), "S": x["S"][0].numpy(), "mask": x["mask"][0].numpy(),
                     "design_mask": designed[0].numpy(), "chain_order": np.array(features["chain_order"])}}


def write_outputs(result: dict[str, Any], out_dir: Path, save_probs: bool) -> list[Path]:
    """Write the run's files under ``out_dir`` (each atomically); returns their paths."""
    written = []
    for folder in ("score_only", "conditional_probs_only", "unconditional_probs_only"):
        if folder in result:
            path = out_dir / folder / f"{result['name']}.npz"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_npz_atomic(path, result[folder])
            return [path]
    path = out_dir / "seqs" / f"{result['name']}.fa"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(result["fasta"])
    written.append(path)
    if save_probs:
        path = out_dir / "probs" / f"{result['name']}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_npz_atomic(path, result["probs"])
        written.append(path)
    return written
