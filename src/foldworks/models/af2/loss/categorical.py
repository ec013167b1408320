"""Cross-entropy terms on binned targets: distogram (AF2 supp. 1.9.8) and masked MSA (1.9.9)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def softmax_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """``−Σ labels · log_softmax(logits)`` over the last dim; labels a distribution of the same shape."""
    return -(labels * F.log_softmax(logits, dim=-1)).sum(-1)


def bin_index(sq_values: Tensor, edges: Tensor) -> Tensor:
    """Number of (squared) edges strictly below each squared value: bin index, last bin open."""
    return (sq_values[..., None] > edges ** 2).sum(-1)


def distogram_true_bins(pseudo_beta: Tensor, min_bin: float = 2.3125, max_bin: float = 21.6875,
                        no_bins: int = 64) -> Tensor:
    """Distogram target bins ``[..., N, N]`` from pseudo-β positions ``[..., N, 3]`` (Å), compared squared."""
    edges = torch.linspace(min_bin, max_bin, no_bins - 1, device=pseudo_beta.device, dtype=pseudo_beta.dtype)
    d = pseudo_beta[..., :, None, :] - pseudo_beta[..., None, :, :]
    return bin_index((d * d).sum(-1), edges)


def distogram_loss(logits: Tensor, pseudo_beta: Tensor, pseudo_beta_mask: Tensor, min_bin: float = 2.3125,
                   max_bin: float = 21.6875, no_bins: int = 64, eps: float = 1e-8) -> Tensor:
    """Distogram cross-entropy (AF2 supp. 1.9.8), averaged over valid pairs then over the batch.

    Args: ``logits [..., N, N, no_bins]``, ``pseudo_beta [..., N, 3]`` (Å), ``pseudo_beta_mask [..., N]``.
    """
    bins = distogram_true_bins(pseudo_beta, min_bin, max_bin, no_bins)
    errors = softmax_cross_entropy(logits, F.one_hot(bins, no_bins).to(logits.dtype))
    square = pseudo_beta_mask[..., :, None] * pseudo_beta_mask[..., None, :]
    denom = eps + square.sum((-1, -2))
    loss = ((errors * square).sum(-1) / denom[..., None]).sum(-1)
    return loss.mean()


def masked_msa_loss(logits: Tensor, true_msa: Tensor, bert_mask: Tensor, num_classes: int = 23,
                    eps: float = 1e-8) -> Tensor:
    """BERT-style masked-MSA cross-entropy (AF2 supp. 1.9.9), averaged over masked positions then batch.

    Args: ``logits [..., S, N, num_classes]``, ``true_msa [..., S, N]`` int, ``bert_mask [..., S, N]``.
    """
    errors = softmax_cross_entropy(logits, F.one_hot(true_msa.long(), num_classes).to(logits.dtype))
    denom = eps + bert_mask.sum((-1, -2))
    loss = ((errors * bert_mask).sum(-1) / denom[..., None]).sum(-1)
    return loss.mean()
