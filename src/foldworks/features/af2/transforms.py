"""Deterministic parts of AlphaFold2's input processing (AF2 supplement 1.2.5-1.2.9).

Every function here is a pure function of its arrays: the random choices (which MSA rows become
cluster centres, which positions are masked and with what token) are made in
:mod:`foldworks.features.af2.draws` and passed in. Token alphabet: ``foldworks.constants``
(20 amino acids in ``RESTYPES`` order, 20 = X, 21 = gap) plus 22 = the masked-MSA token.
Shapes: ``S`` cluster rows, ``E`` extra rows, ``L`` residues, ``T`` templates.
"""

from __future__ import annotations

import numpy as np

from foldworks.constants import ATOM_ORDER, GAP_INDEX, RESTYPES, UNK_INDEX
from foldworks.models.af2 import residue_constants as rc

#: Token of a masked MSA position (the 23rd class of the MSA one-hot).
MASK_TOKEN: int = 22
#: MSA one-hot width: 20 amino acids, X, gap, mask.
MSA_CLASSES: int = 23
#: HHblits alphabet (index = HHblits token; X = 20, gap = 21) as AF2's raw features encode it.
HHBLITS_ALPHABET: str = "ACDEFGHIKLMNPQRSTVWYX-"
#: ``HHBLITS_TO_AATYPE[hhblits_token]`` = foldworks/AF2 token.
HHBLITS_TO_AATYPE: np.ndarray = np.array(
    [RESTYPES.index(a) if a in RESTYPES else (UNK_INDEX if a == "X" else GAP_INDEX) for a in HHBLITS_ALPHABET],
    dtype=np.int64)


def _squash(deletions: np.ndarray) -> np.ndarray:
    """AF2's deletion squashing ``2/π · arctan(d / 3)`` in float32 (supp. Table 1)."""
    return (np.arctan(deletions.astype(np.float32) / np.float32(3.0)) * np.float32(2.0 / np.pi)).astype(np.float32)


def one_hot(tokens: np.ndarray, classes: int) -> np.ndarray:
    """float32 one-hot ``[..., classes]`` of integer ``tokens`` (out-of-range tokens → all zeros)."""
    tokens = np.asarray(tokens)
    return (tokens[..., None] == np.arange(classes)).astype(np.float32)


def msa_profile(msa: np.ndarray) -> np.ndarray:
    """Per-column token frequencies ``[L, 22]`` of ``msa [N, L]`` (AF2 ``hhblits_profile``)."""
    return one_hot(msa, 22).mean(axis=0, dtype=np.float32)


def apply_bert_mask(msa: np.ndarray, bert_mask: np.ndarray, replacement: np.ndarray) -> np.ndarray:
    """Masked MSA (supp. 1.2.7): ``replacement`` tokens where ``bert_mask``, ``msa`` elsewhere; ``[S, L]``."""
    return np.where(np.asarray(bert_mask, bool), replacement, msa).astype(np.int64)


def nearest_neighbour_clusters(cluster_msa: np.ndarray, cluster_mask: np.ndarray, extra_msa: np.ndarray,
                               extra_mask: np.ndarray, gap_weight: float = 0.0) -> np.ndarray:
    """Cluster centre ``[E]`` of every extra row: the centre agreeing on most positions (supp. 1.2.7).

    Agreement counts equal tokens over the 21 amino-acid/X classes; gaps count ``gap_weight``
    (AF2: 0), the mask token never. ``cluster_msa [S, L]`` is the *masked* centre MSA; ties go to
    the lowest centre index.
    """
    if len(extra_msa) == 0:
        return np.zeros(0, dtype=np.int64)
    weights = np.concatenate([np.ones(21), [gap_weight], [0.0]]).astype(np.float32)
    centres = (one_hot(cluster_msa, MSA_CLASSES) * cluster_mask[..., None] * weights).reshape(len(cluster_msa), -1)
    extra = (one_hot(extra_msa, MSA_CLASSES) * extra_mask[..., None]).reshape(len(extra_msa), -1)
    return np.argmax(extra @ centres.T, axis=1).astype(np.int64)


def summarize_clusters(cluster_msa: np.ndarray, cluster_mask: np.ndarray, cluster_deletions: np.ndarray,
                       extra_msa: np.ndarray, extra_mask: np.ndarray, extra_deletions: np.ndarray,
                       assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cluster_profile [S, L, 23], cluster_deletion_mean [S, L])`` over each centre + its extra rows.

    The centre contributes its (masked) token and its deletion count; each assigned extra row its
    token and deletions where ``extra_mask``; the count adds 1e-6 as AF2 does.
    """
    n_clusters, length = cluster_mask.shape
    mask = extra_mask.astype(np.float64)
    slot = assignment[:, None] * length + np.arange(length)  # [E, L] flat (centre, residue)
    extra_counts = np.bincount(slot.ravel(), mask.ravel(), n_clusters * length).reshape(n_clusters, length)
    extra_deletion_sum = np.bincount(slot.ravel(), (mask * extra_deletions).ravel(),
                                     n_clusters * length).reshape(n_clusters, length)
    token_slot = (slot * MSA_CLASSES + extra_msa).ravel()
    extra_tokens = np.bincount(token_slot, mask.ravel(), n_clusters * length * MSA_CLASSES)
    extra_tokens = extra_tokens.reshape(n_clusters, length, MSA_CLASSES).astype(np.float32)
    extra_counts, extra_deletion_sum = extra_counts.astype(np.float32), extra_deletion_sum.astype(np.float32)
    counts = np.float32(1e-6) + cluster_mask.astype(np.float32) + extra_counts
    profile = extra_tokens + one_hot(cluster_msa, MSA_CLASSES)
    deletions = extra_deletion_sum + cluster_deletions.astype(np.float32)
    return (profile / counts[..., None]).astype(np.float32), (deletions / counts).astype(np.float32)


def msa_features(msa: np.ndarray, deletions: np.ndarray, cluster_profile: np.ndarray,
                 cluster_deletion_mean: np.ndarray) -> np.ndarray:
    """``msa_feat [S, L, 49]`` (supp. Table 1): one-hot 23, has_deletion, deletion_value,
    cluster_profile 23, squashed cluster_deletion_mean."""
    deletions = deletions.astype(np.float32)
    return np.concatenate([
        one_hot(msa, MSA_CLASSES), np.clip(deletions, 0.0, 1.0)[..., None], _squash(deletions)[..., None],
        cluster_profile.astype(np.float32), _squash(cluster_deletion_mean)[..., None],
    ], axis=-1).astype(np.float32)


def extra_msa_features(deletions: np.ndarray) -> dict[str, np.ndarray]:
    """``extra_has_deletion`` and ``extra_deletion_value`` ``[E, L]`` of the extra rows' deletion counts."""
    deletions = deletions.astype(np.float32)
    return {"extra_has_deletion": np.clip(deletions, 0.0, 1.0), "extra_deletion_value": _squash(deletions)}


def target_features(aatype: np.ndarray, between_segment_residues: np.ndarray) -> np.ndarray:
    """``target_feat [L, 22]``: has_break (clipped ``between_segment_residues``) + aatype one-hot 21."""
    has_break = np.clip(np.asarray(between_segment_residues, np.float32), 0.0, 1.0)[..., None]
    return np.concatenate([has_break, one_hot(aatype, 21)], axis=-1).astype(np.float32)


def _atom_tables() -> dict[str, np.ndarray]:
    """AF2's per-restype atom maps ``[21, ...]``: as the residue constants, but X has no atoms."""
    tables = {"atom14_to_atom37": rc.ATOM14_TO_ATOM37.astype(np.int32).copy(),
              "atom37_to_atom14": rc.ATOM37_TO_ATOM14.astype(np.int32).copy(),
              "atom14_mask": rc.ATOM14_MASK.astype(np.float32).copy(),
              "atom37_mask": rc.ATOM37_MASK.astype(np.float32).copy()}
    for table in tables.values():
        table[UNK_INDEX] = 0
    return tables


_ATOM_TABLES = _atom_tables()


def atom_index_maps(aatype: np.ndarray) -> dict[str, np.ndarray]:
    """Per-residue atom14/atom37 maps and existence masks of ``aatype [L]`` (AF2 ``make_atom14_masks``)."""
    aatype = np.asarray(aatype, np.int64)
    return {"atom14_atom_exists": _ATOM_TABLES["atom14_mask"][aatype],
            "residx_atom14_to_atom37": _ATOM_TABLES["atom14_to_atom37"][aatype],
            "residx_atom37_to_atom14": _ATOM_TABLES["atom37_to_atom14"][aatype],
            "atom37_atom_exists": _ATOM_TABLES["atom37_mask"][aatype]}


def pseudo_beta(aatype: np.ndarray, positions: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pseudo-β (Cβ; Cα for glycine) positions ``[..., L, 3]`` (Å) and mask ``[..., L]`` (AF2 ``pseudo_beta_fn``)."""
    is_gly = np.asarray(aatype) == RESTYPES.index("G")
    ca, cb = ATOM_ORDER["CA"], ATOM_ORDER["CB"]
    pos = np.where(is_gly[..., None], positions[..., ca, :], positions[..., cb, :]).astype(np.float32)
    mask = np.where(is_gly, masks[..., ca], masks[..., cb]).astype(np.float32)
    return pos, mask


def pad_axis(array: np.ndarray, size: int, axis: int = 0) -> np.ndarray:
    """``array`` zero-padded (or truncated) to ``size`` along ``axis``."""
    array = np.asarray(array)
    if array.shape[axis] >= size:
        return np.take(array, np.arange(size), axis=axis)
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, size - array.shape[axis])
    return np.pad(array, widths)
