"""Predict whole chains (no crop) with a trained checkpoint and write mmCIF + ``index.tsv``.

Outputs: ``{out_dir}/{target}.cif`` for every chain of the requested splits,
``{out_dir}/train/{target}.cif`` for a deterministic subset of train chains and
``{out_dir}/index.tsv`` (``target, split, length, mean_plddt``).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from foldworks.fsutil import write_tsv_atomic
from foldworks.predict.writer import write_ca_mmcif
from foldworks.train.checkpoint import model_from_checkpoint
from foldworks.train.data import collate, load_feature_file, make_example, select_targets

log = logging.getLogger(__name__)
INDEX_HEADER = ("target", "split", "length", "mean_plddt")


def train_subset(targets: list[tuple[str, Path]], size: int) -> list[tuple[str, Path]]:
    """At most ``size`` train targets: those with the smallest SHA-256 of the target name (stable)."""
    ranked = sorted(targets, key=lambda t: hashlib.sha256(t[0].encode()).hexdigest())
    return sorted(ranked[: max(0, size)])


@torch.no_grad()
def predict_chain(model: torch.nn.Module, feats: dict[str, np.ndarray], max_msa_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Whole-chain prediction → ``(ca_coords [L, 3] Å, plddt [L] 0..1)``."""
    batch = collate([make_example(feats, None, max_msa_rows, None)])
    outputs = model(batch)
    return outputs["ca_coords"][0].float().numpy(), outputs["plddt"][0].float().numpy()


def predict(checkpoint: Path, chains: Path, features_dir: Path, out_dir: Path, splits: Sequence[str],
            train_subset_size: int = 0) -> list[tuple[str, str, int, float]]:
    """Predict the chains of ``splits`` (+ a train subset); returns the ``index.tsv`` rows."""
    model, config = model_from_checkpoint(checkpoint)
    max_msa_rows = int(config["data"]["max_msa_rows"])
    table = pd.read_parquet(chains)
    jobs = [(split, target, path, out_dir / f"{target}.cif")
            for split in splits for target, path in select_targets(table, [split], features_dir)]
    if train_subset_size > 0:
        subset = train_subset(select_targets(table, ["train"], features_dir), train_subset_size)
        jobs += [("train", target, path, out_dir / "train" / f"{target}.cif") for target, path in subset]
    rows = []
    for split, target, path, out_path in jobs:
        feats = load_feature_file(path)
        sequence = str(feats["sequence"])
        try:
            coords, plddt = predict_chain(model, feats, max_msa_rows)
            write_ca_mmcif(out_path, sequence, coords, plddt, target)
        except Exception as exc:
            raise RuntimeError(f"{target}: prediction failed: {exc}") from exc
        rows.append((target, split, len(sequence), round(float(plddt.mean() * 100.0), 3)))
        log.info("%s (%s): %d residues, mean pLDDT %.1f", target, split, len(sequence), rows[-1][3])
    write_tsv_atomic(out_dir / "index.tsv", INDEX_HEADER, rows)
    return rows
