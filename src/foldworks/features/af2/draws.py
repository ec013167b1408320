"""Random parts of AlphaFold2's MSA processing, each drawn from an explicit ``numpy`` Generator.

A draw is plain data (:class:`MsaDraw`) that :func:`foldworks.features.af2.pipeline.process_recycle`
turns into features deterministically, so a draw can also be recovered from AF2's own output and
replayed. Seeds: :func:`recycle_rng` / :func:`sample_rng` derive independent streams from
``(seed, sample, ...)`` so any step of a resumed run redraws exactly the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from foldworks.features.af2.transforms import MASK_TOKEN

#: Stream tags of :func:`sample_rng` (one stream per kind of per-sample choice).
STREAM_CROP, STREAM_BLOCK_DELETION = 1, 2


@dataclass(frozen=True)
class MsaDraw:
    """One recycle's random choices over an MSA of ``N`` rows and ``L`` residues.

    ``cluster_rows [S]``: MSA rows that become cluster centres, in order (row 0, the query, first).
    ``extra_rows [N - S]``: every other row, in the order the extra MSA is cropped (first
    ``max_extra_msa`` kept). ``bert_mask [S, L]`` bool: masked positions of the centres;
    ``bert_tokens [S, L]``: their replacement tokens (0-21 or 22 = mask; read only where masked).
    """

    cluster_rows: np.ndarray
    extra_rows: np.ndarray
    bert_mask: np.ndarray
    bert_tokens: np.ndarray


def recycle_rng(seed: int, sample: int, recycle: int) -> np.random.Generator:
    """Generator of the MSA draw of recycle ``recycle`` of sample ``sample`` (all ints >= 0)."""
    return np.random.default_rng([int(seed), int(sample), 0, int(recycle)])


def sample_rng(seed: int, sample: int, stream: int) -> np.random.Generator:
    """Generator of a per-sample choice (``stream``: :data:`STREAM_CROP`, :data:`STREAM_BLOCK_DELETION`)."""
    return np.random.default_rng([int(seed), int(sample), int(stream)])


def block_deletion_keep(rng: np.random.Generator, n_rows: int, fraction: float = 0.3, num_blocks: int = 5,
                        randomize_num_blocks: bool = False) -> np.ndarray:
    """Rows kept by MSA block deletion (supp. 1.2.6, Alg 1), ascending; row 0 is always kept.

    ``num_blocks`` blocks of ``floor(n_rows · fraction)`` consecutive rows, each starting at a
    uniform row, are removed (blocks may overlap or run past the end).
    """
    block = int(np.floor(n_rows * fraction))
    count = int(rng.integers(0, num_blocks + 1)) if randomize_num_blocks else int(num_blocks)
    if block < 1 or n_rows < 2 or count < 1:
        return np.arange(n_rows)
    starts = rng.integers(0, n_rows, size=count)
    deleted = np.unique(np.clip(starts[:, None] + np.arange(block), 0, n_rows - 1))
    keep = np.setdiff1d(np.arange(1, n_rows), deleted)
    return np.concatenate([[0], keep]).astype(np.int64)


def draw_clusters(rng: np.random.Generator, n_rows: int, n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """``(cluster_rows, extra_rows)``: the query then a uniform random ``n_clusters - 1`` other rows
    as centres (AF2 ``sample_msa``); the remaining rows in a fresh random order (``crop_extra_msa``)."""
    order = np.concatenate([[0], 1 + rng.permutation(n_rows - 1)]).astype(np.int64)
    chosen = min(int(n_clusters), n_rows)
    return order[:chosen], rng.permutation(order[chosen:])


def bert_probabilities(tokens: np.ndarray, profile: np.ndarray, uniform_prob: float = 0.1,
                       profile_prob: float = 0.1, same_prob: float = 0.1) -> np.ndarray:
    """Replacement distribution ``[..., 23]`` of masked positions holding ``tokens [...]`` whose MSA
    column profiles are ``profile [..., 22]`` (supp. 1.2.7): uniform over the 20 amino acids, the
    profile, the unchanged token, and the remaining probability on the mask token."""
    uniform = np.concatenate([np.full(20, 0.05), [0.0, 0.0]])
    same = (np.asarray(tokens)[..., None] == np.arange(22)).astype(np.float64)
    probs = uniform_prob * uniform + profile_prob * profile.astype(np.float64) + same_prob * same
    mask_prob = np.full(probs.shape[:-1] + (1,), 1.0 - uniform_prob - profile_prob - same_prob)
    return np.concatenate([probs, mask_prob], axis=-1)


def draw_bert(rng: np.random.Generator, msa: np.ndarray, profile: np.ndarray, replace_fraction: float = 0.15,
              uniform_prob: float = 0.1, profile_prob: float = 0.1,
              same_prob: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``(bert_mask [S, L] bool, bert_tokens [S, L])`` for the centre rows ``msa [S, L]`` with column
    profile ``profile [L, 22]``: each position masked with probability ``replace_fraction``; its
    token drawn from :func:`bert_probabilities` (unmasked positions keep their token)."""
    mask = rng.random(msa.shape) < replace_fraction
    u = rng.random(msa.shape)  # drawn for every position so the stream does not depend on the mask
    rows, cols = np.nonzero(mask)
    cumulative = np.cumsum(bert_probabilities(msa[rows, cols], profile[cols], uniform_prob, profile_prob,
                                              same_prob), axis=-1)
    picked = ((u[rows, cols] * cumulative[:, -1])[:, None] >= cumulative).sum(axis=-1)
    tokens = np.asarray(msa, np.int64).copy()
    tokens[rows, cols] = np.minimum(picked, MASK_TOKEN)
    return mask, tokens


def draw_msa(rng: np.random.Generator, msa: np.ndarray, profile: np.ndarray, n_clusters: int,
             replace_fraction: float = 0.15, uniform_prob: float = 0.1, profile_prob: float = 0.1,
             same_prob: float = 0.1) -> MsaDraw:
    """One recycle's :class:`MsaDraw` of ``msa [N, L]`` (centres first, then masking of the centres)."""
    cluster_rows, extra_rows = draw_clusters(rng, msa.shape[0], n_clusters)
    mask, tokens = draw_bert(rng, msa[cluster_rows], profile, replace_fraction, uniform_prob, profile_prob,
                             same_prob)
    return MsaDraw(cluster_rows, extra_rows, mask, tokens)
