"""Confidence summaries of one prediction: pTM (from the aligned-error head) and the ranking
confidence, as AlphaFold/OpenFold report them for a monomer."""

from __future__ import annotations

import numpy as np

from foldworks.models.af2.heads import tm_d0  # noqa: F401  (one definition of d0; imports torch)


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


def predicted_tm_score(pae_logits: np.ndarray, bin_centers: np.ndarray) -> float:
    """pTM of a whole chain (AF2 supplement 1.9.7, eqs. 38-40; computed by the AF2 model's
    :func:`foldworks.models.af2.heads.tm_score_from_centers` in float64). ``pae_logits [L, L,
    n_bins]``, ``bin_centers [n_bins]`` (Å); 0..1."""
    import torch

    from foldworks.models.af2.heads import tm_score_from_centers

    logits = np.asarray(pae_logits, np.float64)
    centers = np.asarray(bin_centers, np.float64)
    if logits.ndim != 3 or logits.shape[0] != logits.shape[1] or logits.shape[2] != centers.shape[0]:
        raise ValueError(f"PAE logits {logits.shape} do not fit {centers.shape[0]} bin centres")
    return float(tm_score_from_centers(torch.from_numpy(logits), torch.from_numpy(centers)))


def ranking_confidence(mean_plddt: float, ptm: float | None = None) -> float:
    """The number predictions of one sequence are ranked by: for a monomer AlphaFold ranks by
    mean pLDDT (0..100) even when the model has a pTM head (pTM is reported, not ranked by;
    ``ptm`` is accepted so that a multimer rule can replace this in one place)."""
    del ptm
    return float(mean_plddt)
