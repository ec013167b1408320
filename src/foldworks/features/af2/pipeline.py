"""AlphaFold2's processed feature batch (supp. 1.2.5-1.2.9) from one chain's cached features.

:class:`Af2Chain` holds one chain's inputs (from foldworks' feature cache, or from AF2's own raw
data-pipeline output); :func:`process_recycle` turns one recycle's :class:`MsaDraw` into AF2's
feature dict (the keys and layout AF2's model reads); :func:`make_af2_example` draws everything
(crop, block deletion, per-recycle clusters and masking) from ``(seed, sample)`` and stacks the
recycles on a leading axis ``R = num_recycle + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from foldworks.constants import CA_INDEX
from foldworks.features.af2 import transforms as tx
from foldworks.features.af2.config import Af2DataConfig
from foldworks.features.af2.draws import (
    STREAM_BLOCK_DELETION, STREAM_CROP, MsaDraw, block_deletion_keep, draw_msa, recycle_rng, sample_rng,
)

#: Template inputs, AF2 layout (``template_aatype`` as tokens ``[T, L]`` or HHblits one-hot ``[T, L, 22]``).
TEMPLATE_KEYS: tuple[str, ...] = ("template_aatype", "template_all_atom_positions", "template_all_atom_masks",
                                  "template_sum_probs")
#: Axis of the residue dimension of every per-recycle feature (for cropping).
RESIDUE_AXIS: dict[str, int] = {
    "aatype": 0, "residue_index": 0, "seq_mask": 0, "target_feat": 0, "atom14_atom_exists": 0,
    "residx_atom14_to_atom37": 0, "residx_atom37_to_atom14": 0, "atom37_atom_exists": 0,
    "all_atom_positions": 0, "all_atom_mask": 0,
    "msa_feat": 1, "msa_mask": 1, "bert_mask": 1, "true_msa": 1, "extra_msa": 1, "extra_msa_mask": 1,
    "extra_has_deletion": 1, "extra_deletion_value": 1, "template_aatype": 1, "template_all_atom_positions": 1,
    "template_all_atom_masks": 1, "template_pseudo_beta": 1, "template_pseudo_beta_mask": 1,
}


class Af2InputError(ValueError):
    """A chain's inputs are inconsistent; the message names the chain and the array."""


@dataclass(frozen=True)
class Af2Chain:
    """One chain's inputs: ``aatype [L]`` (0-20), ``msa [N, L]`` (0-21, row 0 the query),
    ``deletion_matrix [N, L]`` (counts), ``residue_index [L]``, ``between_segment_residues [L]``;
    optional ``templates`` (:data:`TEMPLATE_KEYS`, tokens ``[T, L]``), ground truth
    ``all_atom_positions [L, 37, 3]`` (Å) / ``all_atom_mask [L, 37]`` and ``residue_mask [L]``."""

    name: str
    aatype: np.ndarray
    msa: np.ndarray
    deletion_matrix: np.ndarray
    residue_index: np.ndarray
    between_segment_residues: np.ndarray
    templates: Mapping[str, np.ndarray] | None = None
    all_atom_positions: np.ndarray | None = None
    all_atom_mask: np.ndarray | None = None
    residue_mask: np.ndarray | None = None

    def __post_init__(self) -> None:
        length = self.aatype.shape[0]
        if self.msa.ndim != 2 or self.msa.shape[1] != length or self.msa.shape[0] < 1:
            raise Af2InputError(f"{self.name}: msa has shape {self.msa.shape}, expected [N >= 1, {length}]")
        if self.deletion_matrix.shape != self.msa.shape:
            raise Af2InputError(f"{self.name}: deletion_matrix has shape {self.deletion_matrix.shape}, "
                                f"msa {self.msa.shape}")
        if self.msa.size and (self.msa.min() < 0 or self.msa.max() > tx.MASK_TOKEN - 1):
            raise Af2InputError(f"{self.name}: msa tokens outside 0..21")
        if length and (self.aatype.min() < 0 or self.aatype.max() > 20):
            raise Af2InputError(f"{self.name}: aatype outside 0..20")
        for key, value in (("residue_index", self.residue_index),
                           ("between_segment_residues", self.between_segment_residues)):
            if value.shape != (length,):
                raise Af2InputError(f"{self.name}: {key} has shape {value.shape}, expected ({length},)")
        for key, value in (self.templates or {}).items():
            if key != "template_sum_probs" and (value.ndim < 2 or value.shape[1] != length):
                raise Af2InputError(f"{self.name}: {key} has shape {value.shape}, expected [T, {length}, ...]")


def template_inputs(templates: Mapping[str, np.ndarray], name: str = "chain") -> dict[str, np.ndarray]:
    """Templates in AF2's processed layout: ``template_aatype`` tokens ``[T, L]`` (an HHblits
    one-hot ``[T, L, 22]``, as AF2's raw features hold it, is converted), positions float32 (Å)."""
    missing = [key for key in TEMPLATE_KEYS if key not in templates]
    if missing:
        raise Af2InputError(f"{name}: templates lack {', '.join(missing)}")
    aatype = np.asarray(templates["template_aatype"])
    if aatype.ndim == 3:
        aatype = tx.HHBLITS_TO_AATYPE[aatype.argmax(-1)]
    return {"template_aatype": aatype.astype(np.int64),
            "template_all_atom_positions": np.asarray(templates["template_all_atom_positions"], np.float32),
            "template_all_atom_masks": np.asarray(templates["template_all_atom_masks"], np.float32),
            "template_sum_probs": np.asarray(templates["template_sum_probs"], np.float32).reshape(-1, 1)}


def chain_from_feature_cache(feats: Mapping[str, Any], templates: Mapping[str, np.ndarray] | None = None,
                             name: str | None = None) -> Af2Chain:
    """:class:`Af2Chain` of a foldworks features file (``build_features`` keys); residues numbered 0..L-1."""
    name = name or str(feats.get("target", "chain"))
    aatype = np.asarray(feats["aatype"], np.int64)
    length = aatype.shape[0]
    return Af2Chain(
        name=name, aatype=aatype, msa=np.asarray(feats["msa"], np.int64),
        deletion_matrix=np.asarray(feats["deletion_matrix"], np.float32),
        residue_index=np.arange(length, dtype=np.int64), between_segment_residues=np.zeros(length, np.int64),
        templates=None if templates is None else template_inputs(templates, name),
        all_atom_positions=np.asarray(feats["atom_positions"], np.float32),
        all_atom_mask=np.asarray(feats["atom_mask"], np.float32),
        residue_mask=np.asarray(feats["residue_mask"], bool))


def chain_from_af2_raw(raw: Mapping[str, np.ndarray], name: str = "chain") -> Af2Chain:
    """:class:`Af2Chain` of AF2's raw data-pipeline output (``aatype`` one-hot, HHblits-ordered ``msa``,
    ``deletion_matrix_int``, optional ``template_*``), as AF2's ``correct_msa_restypes`` and
    ``squeeze_features`` read it."""
    has_templates = "template_aatype" in raw
    return Af2Chain(
        name=name, aatype=np.asarray(raw["aatype"]).argmax(-1).astype(np.int64),
        msa=tx.HHBLITS_TO_AATYPE[np.asarray(raw["msa"], np.int64)],
        deletion_matrix=np.asarray(raw["deletion_matrix_int"], np.float32),
        residue_index=np.asarray(raw["residue_index"], np.int64),
        between_segment_residues=np.asarray(raw["between_segment_residues"], np.int64),
        templates=template_inputs({k: raw[k] for k in TEMPLATE_KEYS}, name) if has_templates else None)


def _msa_features(chain: Af2Chain, draw: MsaDraw, cfg: Af2DataConfig) -> dict[str, np.ndarray]:
    """Cluster, extra-MSA and masked-MSA features of one draw (supp. 1.2.7), padded to ``cfg`` sizes."""
    sel, extra = draw.cluster_rows, draw.extra_rows
    true_msa, deletions = chain.msa[sel], chain.deletion_matrix[sel]
    msa = tx.apply_bert_mask(true_msa, draw.bert_mask, draw.bert_tokens)
    msa_mask = np.ones(msa.shape, np.float32)
    extra_msa, extra_deletions = chain.msa[extra], chain.deletion_matrix[extra]
    extra_mask = np.ones(extra_msa.shape, np.float32)
    assignment = tx.nearest_neighbour_clusters(msa, msa_mask, extra_msa, extra_mask)
    profile, deletion_mean = tx.summarize_clusters(msa, msa_mask, deletions, extra_msa, extra_mask,
                                                   extra_deletions, assignment)
    kept = slice(0, cfg.max_extra_msa)  # the extra MSA is cropped after clustering
    out = {"msa_feat": tx.msa_features(msa, deletions, profile, deletion_mean), "msa_mask": msa_mask,
           "msa_row_mask": np.ones(len(sel), np.float32), "bert_mask": draw.bert_mask.astype(np.float32),
           "true_msa": true_msa.astype(np.int32), "extra_msa": extra_msa[kept].astype(np.int32),
           "extra_msa_mask": extra_mask[kept], "extra_msa_row_mask": np.ones(len(extra_msa[kept]), np.float32),
           **tx.extra_msa_features(extra_deletions[kept])}
    for key in list(out):
        out[key] = tx.pad_axis(out[key], cfg.max_extra_msa if key.startswith("extra_") else cfg.num_clusters)
    return out


def _template_features(chain: Af2Chain, cfg: Af2DataConfig) -> dict[str, np.ndarray]:
    """Template features padded/truncated to ``cfg.max_templates`` (+ AF2's pseudo-β and template mask)."""
    length = chain.aatype.shape[0]
    t = chain.templates or {"template_aatype": np.zeros((0, length), np.int64),
                            "template_all_atom_positions": np.zeros((0, length, 37, 3), np.float32),
                            "template_all_atom_masks": np.zeros((0, length, 37), np.float32),
                            "template_sum_probs": np.zeros((0, 1), np.float32)}
    pb, pb_mask = tx.pseudo_beta(t["template_aatype"], t["template_all_atom_positions"], t["template_all_atom_masks"])
    out = {"template_aatype": t["template_aatype"].astype(np.int32),
           "template_all_atom_positions": t["template_all_atom_positions"],
           "template_all_atom_masks": t["template_all_atom_masks"],
           "template_mask": np.ones(len(t["template_aatype"]), np.float32),
           "template_pseudo_beta": pb, "template_pseudo_beta_mask": pb_mask,
           "template_sum_probs": t["template_sum_probs"]}
    return {key: tx.pad_axis(value, cfg.max_templates) for key, value in out.items()}


def process_recycle(chain: Af2Chain, draw: MsaDraw, cfg: Af2DataConfig) -> dict[str, np.ndarray]:
    """AF2's feature dict of one recycle, given its draw (deterministic; whole chain, no crop).

    MSA arrays are padded to ``cfg.num_clusters`` / ``cfg.max_extra_msa`` rows, templates (when
    ``cfg.use_templates``) to ``cfg.max_templates``; dtypes as AF2's (int32 tokens, float32 rest).
    """
    length = chain.aatype.shape[0]
    out = {"aatype": chain.aatype.astype(np.int32), "residue_index": chain.residue_index.astype(np.int32),
           "seq_mask": np.ones(length, np.float32), "seq_length": np.asarray(length, np.int32),
           "target_feat": tx.target_features(chain.aatype, chain.between_segment_residues),
           **tx.atom_index_maps(chain.aatype), **_msa_features(chain, draw, cfg)}
    if cfg.use_templates:
        out.update(_template_features(chain, cfg))
    if chain.all_atom_positions is not None and chain.all_atom_mask is not None:
        out["all_atom_positions"] = chain.all_atom_positions.astype(np.float32)
        out["all_atom_mask"] = chain.all_atom_mask.astype(np.float32)
    return out


def crop_features(features: Mapping[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """Features of one recycle restricted to residues ``index`` (sorted); ``seq_length`` updated."""
    out = {key: (np.take(value, index, axis=RESIDUE_AXIS[key]) if key in RESIDUE_AXIS else value)
           for key, value in features.items()}
    out["seq_length"] = np.asarray(len(index), np.int32)
    return out


def sample_crop(chain: Af2Chain, cfg: Af2DataConfig, rng: np.random.Generator) -> np.ndarray:
    """Residue indices of the sample's crop (foldworks' :func:`crop_indices`: contiguous, or spatial
    with probability ``cfg.spatial_crop_prob`` when coordinates are known)."""
    from foldworks.train.data import crop_indices  # deferred: the training module imports torch

    length = chain.aatype.shape[0]
    if chain.all_atom_positions is None or chain.residue_mask is None:
        return crop_indices(np.zeros((length, 3)), np.zeros(length, bool), cfg.crop_size, rng, 0.0)
    return crop_indices(chain.all_atom_positions[:, CA_INDEX], chain.residue_mask, cfg.crop_size, rng,
                        cfg.spatial_crop_prob)


def make_af2_example(chain: Af2Chain, cfg: Af2DataConfig, seed: int, sample: int,
                     train: bool) -> dict[str, np.ndarray]:
    """AF2 features of one sample, every array ``[R = cfg.num_recycle + 1, ...]``.

    Training: MSA block deletion (if ``cfg.block_delete_msa``) and a ``cfg.crop_size`` crop, both
    once per sample. Always (as AF2 at inference too): per recycle, fresh cluster centres and
    masked-MSA draws (the same draw for every recycle when ``cfg.resample_msa_in_recycling`` is
    off). All draws come from ``(seed, sample)`` streams, so a sample is reproducible bit for bit.
    """
    if train and cfg.block_delete_msa:
        keep = block_deletion_keep(sample_rng(seed, sample, STREAM_BLOCK_DELETION), chain.msa.shape[0],
                                   cfg.block_delete_fraction, cfg.block_delete_num_blocks)
        chain = replace(chain, msa=chain.msa[keep], deletion_matrix=chain.deletion_matrix[keep])
    index = sample_crop(chain, cfg, sample_rng(seed, sample, STREAM_CROP)) if train else None
    profile = tx.msa_profile(chain.msa)
    recycles = []
    for r in range(cfg.num_recycle + 1):
        rng = recycle_rng(seed, sample, r if cfg.resample_msa_in_recycling else 0)
        draw = draw_msa(rng, chain.msa, profile, cfg.num_clusters, cfg.masked_msa_replace_fraction,
                        cfg.uniform_prob, cfg.profile_prob, cfg.same_prob)
        feats = process_recycle(chain, draw, cfg)
        recycles.append(feats if index is None else crop_features(feats, index))
    return {key: np.stack([f[key] for f in recycles]) for key in recycles[0]}
