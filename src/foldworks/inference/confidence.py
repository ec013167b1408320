"""Confidence summaries of one prediction: pTM (from the aligned-error head) and the ranking
confidence, as AlphaFold/OpenFold report them for a monomer."""

from __future__ import annotations

import numpy as np


def bin_centers_from_breaks(breaks: np.ndarray) -> np.ndarray:
    """Centres ``[n + 1]`` (Å) of the aligned-error bins whose inner edges are ``breaks [n]``
    (evenly spaced): each edge plus half a step, and one more step for the open last bin, as
    AlphaFold computes them."""
    breaks = np.asarray(breaks, np.float64).reshape(-1)
    if breaks.size < 2:
        raise ValueError(f"need at least 2 bin edges, got {breaks.size}")
    step = breaks[1] - breaks[0]
    centers = breaks + step / 2.0
    return np.append(centers, centers[-1] + step)


def tm_d0(n_residues: int) -> float:
    """TM-score distance scale ``d0(N) = 1.24 (max(N, 19) - 15)^(1/3) - 1.8`` (Å), N clipped to
    at least 19 as AlphaFold does (AF2 supplement 1.9.7, eq. 39)."""
    n = max(int(n_residues), 19)
    return 1.24 * (n - 15) ** (1.0 / 3.0) - 1.8


def predicted_tm_score(pae_logits: np.ndarray, bin_centers: np.ndarray) -> float:
    """pTM of a whole chain (AF2 supplement 1.9.7, eqs. 38-40): for every aligned residue ``i``
    the mean over ``j`` of ``E_b[1 / (1 + (c_b / d0)^2)]`` under ``softmax(pae_logits[i, j])``,
    maximised over ``i``. ``pae_logits [L, L, n_bins]``, ``bin_centers [n_bins]`` (Å); 0..1."""
    logits = np.asarray(pae_logits, np.float64)
    centers = np.asarray(bin_centers, np.float64)
    if logits.ndim != 3 or logits.shape[0] != logits.shape[1] or logits.shape[2] != centers.shape[0]:
        raise ValueError(f"PAE logits {logits.shape} do not fit {centers.shape[0]} bin centres")
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    tm_per_bin = 1.0 / (1.0 + (centers / tm_d0(logits.shape[0])) ** 2)
    per_pair = probs @ tm_per_bin  # [L, L]
    return float(per_pair.mean(axis=1).max())


def ranking_confidence(mean_plddt: float, ptm: float | None = None) -> float:
    """The number predictions of one sequence are ranked by: for a monomer AlphaFold ranks by
    mean pLDDT (0..100) even when the model has a pTM head (pTM is reported, not ranked by;
    ``ptm`` is accepted so that a multimer rule can replace this in one place)."""
    del ptm
    return float(mean_plddt)
