"""Predict for a design family: sample sequences for whole chains (no crop) and write FASTA + ``index.tsv``.

Outputs (DATA_FORMATS.md §7b): ``{out_dir}/{target}.fasta`` for every chain of the requested
splits (``{out_dir}/train/{target}.fasta`` for the deterministic train subset of
:func:`foldworks.predict.run.train_subset`), each with the native sequence first and then
``n_samples`` designs::

    >1ubq_A native length=76 designed=76 masked_backbone=0
    MQIFVKTLTG...
    >1ubq_A sample=0 T=0.1 score=-1.2345 recovery=0.4211 seed=123
    MKVEIRVNGE...

``score`` = mean log-probability (nats, temperature 1) of the sampled residues over the designed
positions; ``recovery`` = identity to the native over the designed positions (resolved, complete
N/CA/C/O backbone, standard amino acid). Positions that are not designed (backbone incomplete
or unresolved) carry the native residue in lower case. ``index.tsv``: :data:`INDEX_HEADER`.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from foldworks.constants import RESTYPES, UNK_INDEX
from foldworks.fsutil import atomic_open, write_tsv_atomic
from foldworks.train.data import collate, load_feature_file, make_example, select_targets

log = logging.getLogger(__name__)
INDEX_HEADER = ("target", "split", "length", "designed", "masked_backbone", "n_samples", "temperature",
                "mean_score", "mean_recovery")
DEFAULT_DESIGN: dict[str, Any] = {"n_samples": 8, "temperature": 0.1, "seed": 0}


def design_settings(params: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults filled into ``predict.design`` settings; refuses unknown keys and bad values."""
    settings = {**DEFAULT_DESIGN, **(params or {})}
    unknown = set(settings) - set(DEFAULT_DESIGN)
    if unknown:
        raise ValueError(f"predict.design: unknown keys {sorted(unknown)}")
    if int(settings["n_samples"]) < 1 or float(settings["temperature"]) <= 0:
        raise ValueError(f"predict.design: n_samples must be >= 1 and temperature > 0, not {settings}")
    return settings


def target_seed(seed: int, target: str) -> int:
    """Per-target sampling seed: independent of which other targets are predicted and in what order."""
    return (int(seed) * 1_000_003 + int(hashlib.sha256(target.encode()).hexdigest()[:12], 16)) % (2 ** 63)


def tokens_to_sequence(tokens: np.ndarray, native: np.ndarray, designed: np.ndarray) -> str:
    """One-letter sequence: designed positions from ``tokens``, others the native residue in lower case."""
    letters = RESTYPES + "X"
    return "".join(letters[t] if d else letters[n].lower() for t, n, d in zip(tokens, native, designed))


@torch.no_grad()
def design_chain(model: torch.nn.Module, feats: dict[str, np.ndarray], n_samples: int, temperature: float,
                 seed: int) -> dict[str, Any]:
    """Sample ``n_samples`` sequences for one whole chain.

    Returns ``native [L]``, ``designed [L]`` (bool), ``tokens [n, L]``, ``scores [n]`` (mean log-prob,
    nats), ``recovery [n]`` (0..1) and ``masked_backbone`` (resolved residues left out for an
    incomplete backbone).
    """
    batch = collate([make_example(feats, None, 1, None)])
    generator = torch.Generator().manual_seed(seed)
    tokens, logp = model.sample(batch, temperature=temperature, n_samples=n_samples, generator=generator)
    enc_mask = model.encode(batch)["node_mask"]
    designed = model.loss_mask(batch, {"node_mask": enc_mask})[0].numpy()
    native = batch["aatype"][0].numpy()
    tokens, logp = tokens[:, 0].numpy(), logp[:, 0].float().numpy()
    count = max(1, int(designed.sum()))
    scores = (logp * designed).sum(1) / count
    recovery = ((tokens == native[None]) & designed[None]).sum(1) / count
    masked = int((batch["residue_mask"][0] & ~enc_mask[0]).sum())
    return {"native": native, "designed": designed, "tokens": tokens, "scores": scores, "recovery": recovery,
            "masked_backbone": masked}


def fasta_text(target: str, result: dict[str, Any], temperature: float, seed: int) -> str:
    """The FASTA file of one target (native record first, then one record per sample)."""
    native, designed = result["native"], result["designed"]
    lines = [f">{target} native length={len(native)} designed={int(designed.sum())} "
             f"masked_backbone={result['masked_backbone']}",
             tokens_to_sequence(native.clip(max=UNK_INDEX), native, np.ones_like(designed))]
    for index, (tokens, score, recovery) in enumerate(zip(result["tokens"], result["scores"], result["recovery"])):
        lines.append(f">{target} sample={index} T={temperature:g} score={score:.4f} recovery={recovery:.4f} "
                     f"seed={seed}")
        lines.append(tokens_to_sequence(tokens, native, designed))
    return "\n".join(lines) + "\n"


def predict_design(model: torch.nn.Module, chains: Path, features_dir: Path, out_dir: Path, splits: Sequence[str],
                   train_jobs: list[tuple[str, Path]], settings: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Design every chain of ``splits`` plus ``train_jobs`` (under ``train/``); returns the ``index.tsv`` rows."""
    table = pd.read_parquet(chains)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(split, target, path, out_dir / f"{target}.fasta")
            for split in splits for target, path in select_targets(table, [split], features_dir)]
    jobs += [("train", target, path, out_dir / "train" / f"{target}.fasta") for target, path in train_jobs]
    n, temperature = int(settings["n_samples"]), float(settings["temperature"])
    rows = []
    for split, target, path, out_path in jobs:
        seed = target_seed(int(settings["seed"]), target)
        try:
            result = design_chain(model, load_feature_file(path), n, temperature, seed)
        except Exception as exc:
            raise RuntimeError(f"{target}: design failed: {exc}") from exc
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(out_path, "w", encoding="utf-8") as handle:
            handle.write(fasta_text(target, result, temperature, seed))
        if result["masked_backbone"]:
            log.warning("%s: %d resolved residues with incomplete N/CA/C/O backbone masked (not designed, "
                        "not neighbours)", target, result["masked_backbone"])
        rows.append((target, split, len(result["native"]), int(result["designed"].sum()), result["masked_backbone"],
                     n, temperature, round(float(result["scores"].mean()), 4),
                     round(float(result["recovery"].mean()), 4)))
        log.info("%s (%s): %d residues, %d designed, mean recovery %.3f, mean score %.3f", target, split,
                 rows[-1][2], rows[-1][3], rows[-1][8], rows[-1][7])
    write_tsv_atomic(out_dir / "index.tsv", INDEX_HEADER, rows)
    return rows
