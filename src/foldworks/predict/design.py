"""Predict for a design family: sample sequences for whole chains (no crop) and write FASTA + ``index.tsv``.

Outputs (DATA_FORMATS.md §7b): ``{out_dir}/{target}.fasta`` for every chain of the requested
splits (``{out_dir}/train/{target}.fasta`` for the deterministic train subset of
:func:`foldworks.predict.run.train_subset`), in ProteinMPNN's FASTA layout
(:mod:`foldworks.design.fasta`): the native record, then ``n_samples`` designs::

    >1ubq_A, score=2.3012, global_score=2.3012, fixed_chains=[], designed_chains=['A'], model_name=mpnn, seed=123
    MQIFVKTLTG...
    >T=0.1, sample=1, score=1.2345, global_score=1.2345, seq_recovery=0.4211
    MKVEIRVNGE...

``score`` = mean NLL (nats, temperature 1) over the designed positions (present, complete
N/CA/C/O backbone), each sequence scored with its own decoding order; ``seq_recovery`` =
identity to the native there. Positions that are not designed keep the native residue.
Sampling is ProteinMPNN's (X omitted, float64 probabilities), from a per-target seed.
``index.tsv``: :data:`INDEX_HEADER`.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from foldworks.design import fasta
from foldworks.fsutil import atomic_open, write_tsv_atomic
from foldworks.models.mpnn import ALPHABET, batch_inputs, sample, sequence_scores
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


@torch.no_grad()
def design_chain(model: torch.nn.Module, feats: dict[str, np.ndarray], n_samples: int, temperature: float,
                 seed: int) -> dict[str, Any]:
    """Sample ``n_samples`` sequences for one whole chain (ProteinMPNN tokens ``ACDEFGHIKLMNPQRSTVWYX``).

    Returns ``native [L]``, ``designed [L]`` (bool), ``tokens [n, L]``, ``scores``/``global_scores [n]``
    (mean NLL, nats), ``recovery [n]`` (0..1), ``native_score``/``native_global_score`` and
    ``masked_backbone`` (resolved residues left out for an incomplete backbone). Uses its own
    seeded random stream; torch's global generator is left as it was.
    """
    batch = collate([make_example(feats, None, 1, None)])
    x = batch_inputs(batch)
    designed = x["mask"] * x["chain_M"]
    omit = torch.tensor([float(a == "X") for a in ALPHABET])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        randn_1 = torch.randn(x["mask"].shape)
        native_lp, _ = model.log_probs(x["X"], x["S"], x["mask"], x["chain_M"], x["residue_idx"],
                                       x["chain_encoding_all"], randn_1)
        tokens, scores, global_scores = [], [], []
        for _ in range(n_samples):
            randn_2 = torch.randn(x["mask"].shape)
            out = sample(model, x["X"], randn_2, x["S"], x["chain_M"], x["chain_encoding_all"], x["residue_idx"],
                         x["mask"], temperature, omit_AAs=omit)
            lp, _ = model.log_probs(x["X"], out["S"], x["mask"], x["chain_M"], x["residue_idx"],
                                    x["chain_encoding_all"], randn_2, order=out["decoding_order"])
            tokens.append(out["S"][0].numpy())
            scores.append(float(sequence_scores(out["S"], lp, designed)[0]))
            global_scores.append(float(sequence_scores(out["S"], lp, x["mask"])[0]))
    native, chosen = x["S"][0].numpy(), designed[0].numpy() > 0
    tokens_arr = np.stack(tokens)
    count = max(1, int(chosen.sum()))
    masked = int((batch["residue_mask"][0] & (x["mask"][0] == 0)).sum())
    return {"native": native, "designed": chosen, "tokens": tokens_arr, "scores": np.array(scores),
            "global_scores": np.array(global_scores),
            "recovery": ((tokens_arr == native[None]) & chosen[None]).sum(1) / count,
            "native_score": float(sequence_scores(x["S"], native_lp, designed)[0]),
            "native_global_score": float(sequence_scores(x["S"], native_lp, x["mask"])[0]), "masked_backbone": masked}


def fasta_text(target: str, result: dict[str, Any], temperature: float, seed: int, model_name: str = "mpnn") -> str:
    """The FASTA file of one target (ProteinMPNN's layout: native record first, then one record per sample)."""
    chain = target.rsplit("_", 1)[-1]
    lines = [fasta.native_header(target, result["native_score"], result["native_global_score"], [], [chain],
                                 model_name, seed),
             "".join(ALPHABET[t] for t in result["native"])]
    for index, tokens in enumerate(result["tokens"]):
        lines.append(fasta.sample_header(temperature, index + 1, result["scores"][index],
                                         result["global_scores"][index], result["recovery"][index]))
        lines.append("".join(ALPHABET[t] for t in tokens))
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
        log.info("%s (%s): %d residues, %d designed, mean recovery %.3f, mean score (NLL) %.3f", target, split,
                 rows[-1][2], rows[-1][3], rows[-1][8], rows[-1][7])
    write_tsv_atomic(out_dir / "index.tsv", INDEX_HEADER, rows)
    return rows
