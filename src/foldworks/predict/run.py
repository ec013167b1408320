"""Predict whole chains (no crop) with a trained checkpoint and write mmCIF + ``index.tsv``.

Outputs: ``{out_dir}/{target}.cif`` for every chain of the requested splits,
``{out_dir}/train/{target}.cif`` for a deterministic subset of train chains and
``{out_dir}/index.tsv`` (``target, split, length, mean_plddt, n_atoms, mean_pae, ptm``; the
last two empty without a PAE head). A family
whose outputs have ``atom37_coords`` gets all-atom mmCIF, one with ``pae_logits`` also
``{target}_pae.json`` beside it (AlphaFold DB layout); Cα-only families get Cα traces
(:mod:`foldworks.predict.writer`). Before each chain runs, its memory estimate is checked
against ``max_memory_gb`` (:mod:`foldworks.predict.memory`).
"""

from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from foldworks.fsutil import write_tsv_atomic
from foldworks.inference.confidence import predicted_tm_score
from foldworks.predict.memory import check_memory
from foldworks.predict.writer import expected_pae, write_atom37_mmcif, write_ca_mmcif, write_pae_json
from foldworks.train.checkpoint import model_from_checkpoint
from foldworks.train.data import collate, load_feature_file, make_example, select_rows, select_targets
from foldworks.train.templates import load_templates, missing_template_files, pick_templates

log = logging.getLogger(__name__)
INDEX_HEADER = ("target", "split", "length", "mean_plddt", "n_atoms", "mean_pae", "ptm")
#: Output keys copied to numpy (first batch element) by :func:`predict_chain`.
OUTPUT_KEYS = ("ca_coords", "plddt", "atom37_coords", "atom37_mask", "pae_logits", "pae_bin_centers")


def train_subset(targets: list[tuple[str, Path]], size: int) -> list[tuple[str, Path]]:
    """At most ``size`` train targets: those with the smallest SHA-256 of the target name (stable)."""
    ranked = sorted(targets, key=lambda t: hashlib.sha256(t[0].encode()).hexdigest())
    return sorted(ranked[: max(0, size)])


PRECISIONS = ("fp32", "bf16")


def model_batch(model: torch.nn.Module, feats: dict[str, np.ndarray], max_msa_rows: int,
                templates: dict[str, np.ndarray] | None = None) -> dict[str, torch.Tensor]:
    """The whole-chain batch of one feature file for ``model``: AF2's processed features (all
    recycles, no crop, seed 0; ``templates``: the chain's template arrays, top hits kept) for a
    family with ``input_pipeline = "af2"``, else the padded batch with the first ``max_msa_rows``
    MSA rows."""
    if getattr(model, "input_pipeline", None) == "af2":
        from foldworks.features.af2 import Af2Chain, chain_from_feature_cache, make_af2_example
        from foldworks.features.af2.pipeline import template_inputs
        from foldworks.train.data import collate_af2

        if "atom_positions" in feats:
            chain = chain_from_feature_cache(feats, templates, name=str(feats.get("target", "chain")))
        else:  # a sequence without a structure (prediction from FASTA)
            chain = Af2Chain(name=str(feats.get("target", "chain")), aatype=np.asarray(feats["aatype"], np.int64),
                             msa=np.asarray(feats["msa"], np.int64),
                             deletion_matrix=np.asarray(feats["deletion_matrix"], np.float32),
                             residue_index=np.arange(len(feats["aatype"])),
                             between_segment_residues=np.zeros(len(feats["aatype"]), np.int64),
                             templates=None if templates is None else template_inputs(templates))
        return collate_af2([make_af2_example(chain, model.af2_data_config(False), 0, 0, False)])
    return collate([make_example(feats, None, max_msa_rows, None)])


@torch.no_grad()
def predict_chain(model: torch.nn.Module, feats: dict[str, np.ndarray], max_msa_rows: int,
                  precision: str = "fp32", templates: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Whole-chain prediction on the model's device → numpy outputs of the first (only) chain:
    ``ca_coords [L, 3]`` Å, ``plddt [L]`` 0..1 and, where the family has them, ``atom37_coords
    [L, 37, 3]``, ``atom37_mask [L, 37]``, ``pae_logits [L, L, n_bins]``, ``pae_bin_centers
    [n_bins]`` (Å). ``precision``: ``fp32``, or ``bf16`` autocast (the AF2 family keeps its
    structure module and confidence heads in fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"predict precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in model_batch(model, feats, max_msa_rows, templates).items()}
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        outputs = model(batch)
    found = {}
    for key in OUTPUT_KEYS:
        if key in outputs:
            value = outputs[key].detach().cpu()
            value = value if key == "pae_bin_centers" else value[0]
            found[key] = value.numpy() if value.dtype == torch.bool else value.float().numpy()
    return found


def resolve_device(device: str = "auto") -> torch.device:
    """``auto``: CUDA when present, else CPU; or an explicit torch device name."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def write_prediction(out_path: Path, sequence: str, target: str, outputs: dict[str, np.ndarray]
                     ) -> tuple[int, float]:
    """Write the mmCIF (all-atom or Cα) and, with PAE logits, ``{target}_pae.json`` beside it.

    Returns ``(atoms written, mean PAE in Å or NaN)``.
    """
    plddt = outputs["plddt"]
    if "atom37_coords" in outputs:
        mask = outputs["atom37_mask"].astype(bool)
        write_atom37_mmcif(out_path, sequence, outputs["atom37_coords"], mask, plddt, target)
        n_atoms = int(mask.sum())
    else:
        write_ca_mmcif(out_path, sequence, outputs["ca_coords"], plddt, target)
        n_atoms = len(sequence)
    mean_pae = math.nan
    if "pae_logits" in outputs:
        centers = outputs["pae_bin_centers"]
        pae = expected_pae(outputs["pae_logits"], centers)
        write_pae_json(out_path.with_name(f"{target}_pae.json"), pae, float(np.max(centers)))
        mean_pae = float(pae.mean())
    return n_atoms, mean_pae


def predict(checkpoint: Path, chains: Path, features_dir: Path, out_dir: Path, splits: Sequence[str],
            train_subset_size: int = 0, max_memory_gb: float = 0.0, precision: str = "fp32",
            device: str = "auto", chunk_size: int | None = None, templates_dir: Path | None = None) -> list[tuple]:
    """Predict the chains of ``splits`` (+ a train subset); returns the ``index.tsv`` rows.

    ``max_memory_gb`` > 0: a chain whose estimated activation memory exceeds it is refused
    (:class:`foldworks.predict.memory.ChainTooLarge`, naming the chain and the memory needed)
    before anything runs. ``precision``: ``fp32`` or ``bf16``; ``device``: ``auto`` (CUDA when
    present) or a torch device; ``chunk_size``: attention rows per chunk for families that chunk
    (less memory for long chains, same results); ``templates_dir``: the template stage's
    per-chain features, read (top ``max_templates`` hits) when the model uses templates.
    """
    model, config = model_from_checkpoint(checkpoint)
    if chunk_size is not None and hasattr(model, "set_chunk_size"):
        model.set_chunk_size(chunk_size)
        model.chunk_size = chunk_size
    model.to(resolve_device(device))
    max_msa_rows = int(config.get("data", {}).get("max_msa_rows", 1))
    table = pd.read_parquet(chains)
    jobs = [(split, target, path, out_dir / f"{target}.cif")
            for split in splits for target, path in select_targets(table, [split], features_dir)]
    if train_subset_size > 0:
        subset = train_subset(select_targets(table, ["train"], features_dir), train_subset_size)
        jobs += [("train", target, path, out_dir / "train" / f"{target}.cif") for target, path in subset]
    known = select_rows(table, [*splits, "train"], features_dir)
    lengths = dict(zip(known["target"], known["length"]))
    for _, target, _, _ in jobs:  # refuse before any work, not after hours of it
        check_memory(model, target, int(lengths[target]), max_msa_rows, max_memory_gb)
    data_config = getattr(model, "data_config", None)
    if templates_dir is not None and not (data_config is not None and data_config.use_templates):
        templates_dir = None
    if templates_dir is not None and (missing := missing_template_files([t for _, t, _, _ in jobs], templates_dir)):
        raise ValueError(f"{len(missing)} chain(s) have no template features in {templates_dir}: "
                         f"{', '.join(missing[:10])}")
    rows = []
    for split, target, path, out_path in jobs:
        feats = load_feature_file(path)
        sequence = str(feats["sequence"])
        try:
            templates = (None if templates_dir is None else
                         pick_templates(load_templates(templates_dir, target), data_config.max_templates, None))
            outputs = predict_chain(model, feats, max_msa_rows, precision, templates)
            n_atoms, mean_pae = write_prediction(out_path, sequence, target, outputs)
        except Exception as exc:
            raise RuntimeError(f"{target}: prediction failed: {exc}") from exc
        mean_plddt = round(float(outputs["plddt"].mean() * 100.0), 3)
        ptm = ("" if "pae_logits" not in outputs
               else round(predicted_tm_score(outputs["pae_logits"], outputs["pae_bin_centers"]), 4))
        rows.append((target, split, len(sequence), mean_plddt, n_atoms,
                     "" if math.isnan(mean_pae) else round(mean_pae, 3), ptm))
        log.info("%s (%s): %d residues, %d atoms, mean pLDDT %.1f", target, split, len(sequence), n_atoms, mean_plddt)
    write_tsv_atomic(out_dir / "index.tsv", INDEX_HEADER, rows)
    return rows
