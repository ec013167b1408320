"""Shared model inputs and geometry in torch: input features, relative positions, lDDT-Cα, Kabsch.

Padded batch dict used by every model (``B`` chains, ``L`` residues, ``N`` MSA rows):

| key | dtype, shape | meaning |
|---|---|---|
| ``aatype`` | long ``[B, L]`` | 0..20 (``constants.RESTYPES``, 20 = X) |
| ``msa`` | long ``[B, N, L]`` | 0..21 (21 = gap), row 0 = query |
| ``msa_mask`` | bool ``[B, N]`` | row present (not padding) |
| ``deletion_matrix`` | float ``[B, N, L]`` | raw deletion counts |
| ``mask`` | bool ``[B, L]`` | residue present (not padding) |
| ``residue_mask`` | bool ``[B, L]`` | residue resolved in the reference (implies ``mask``) |
| ``residue_index`` | long ``[B, L]`` | 0-based position in the full chain (crops keep offsets) |
| ``ca_coords`` | float ``[B, L, 3]`` | reference Cα, Å (0 where unresolved) |
| ``all_atom_positions`` | float ``[B, L, 37, 3]`` | reference heavy atoms, atom37 layout (``constants.ATOM_TYPES``), Å |
| ``all_atom_mask`` | bool ``[B, L, 37]`` | reference atom resolved (all ``False`` on padding / unresolved residues) |

Output dict of a structure family (``forward(batch)``):

| key | required | dtype, shape | meaning |
|---|---|---|---|
| ``ca_coords`` | yes | float ``[B, L, 3]`` | predicted Cα, Å |
| ``plddt`` | yes | float ``[B, L]`` | predicted lDDT-Cα, 0..1 |
| ``atom37_coords`` | all-atom families | float ``[B, L, 37, 3]`` | predicted heavy atoms, Å |
| ``atom37_mask`` | with ``atom37_coords`` | bool ``[B, L, 37]`` | atoms that exist for the residue type |
| ``frames_rot`` / ``frames_trans`` | optional | ``[B, L, 3, 3]`` / ``[B, L, 3]`` | backbone frames (x_global = R x_local + t), Å |
| ``pae_logits`` | optional | float ``[B, L, L, n_bins]`` | PAE head; bin centres in ``pae_bin_centers [n_bins]`` (Å) |
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foldworks.constants import MSA_ALPHABET_SIZE, UNK_INDEX

#: Width of :func:`target_features` (one-hot 21 + profile 22 + 2 deletion features).
TARGET_FEAT_DIM = UNK_INDEX + 1 + MSA_ALPHABET_SIZE + 2
#: Width of :func:`msa_row_features` (one-hot 22 + has-deletion + deletion value).
MSA_FEAT_DIM = MSA_ALPHABET_SIZE + 2
LDDT_THRESHOLDS = (0.5, 1.0, 2.0, 4.0)


def _deletion_value(deletions: Tensor) -> Tensor:
    """AlphaFold's squashing of raw deletion counts into 0..1."""
    return torch.atan(deletions / 3.0) * (2.0 / math.pi)


def target_features(batch: dict[str, Tensor]) -> Tensor:
    """Per-residue features ``[B, L, TARGET_FEAT_DIM]``: one-hot, MSA profile, deletion mean/frequency."""
    onehot = F.one_hot(batch["aatype"].clamp(0, UNK_INDEX), UNK_INDEX + 1).float()
    rows = batch["msa_mask"].float()[:, :, None]  # [B, N, 1]
    count = rows.sum(1).clamp(min=1.0)  # [B, 1]
    msa_onehot = F.one_hot(batch["msa"].clamp(0, MSA_ALPHABET_SIZE - 1), MSA_ALPHABET_SIZE).float()
    profile = (msa_onehot * rows[..., None]).sum(1) / count[..., None]
    deletions = batch["deletion_matrix"].float()
    del_mean = _deletion_value((deletions * rows).sum(1) / count)
    has_del = ((deletions > 0).float() * rows).sum(1) / count
    feats = torch.cat([onehot, profile, del_mean[..., None], has_del[..., None]], dim=-1)
    return feats * batch["mask"].float()[..., None]


def msa_row_features(batch: dict[str, Tensor]) -> Tensor:
    """Per-row MSA features ``[B, N, L, MSA_FEAT_DIM]``: one-hot token, has-deletion, deletion value."""
    msa_onehot = F.one_hot(batch["msa"].clamp(0, MSA_ALPHABET_SIZE - 1), MSA_ALPHABET_SIZE).float()
    deletions = batch["deletion_matrix"].float()
    feats = torch.cat([msa_onehot, (deletions > 0).float()[..., None], _deletion_value(deletions)[..., None]], -1)
    valid = batch["msa_mask"][:, :, None] & batch["mask"][:, None, :]
    return feats * valid.float()[..., None]


class RelativePosition(nn.Module):
    """Embedding of clipped sequence separation ``j - i`` (± ``max_offset`` residues) → ``[B, L, L, dim]``."""

    def __init__(self, dim: int, max_offset: int = 32) -> None:
        super().__init__()
        self.max_offset = max_offset
        self.embed = nn.Embedding(2 * max_offset + 1, dim)

    def forward(self, residue_index: Tensor) -> Tensor:
        offset = residue_index[:, None, :] - residue_index[:, :, None]
        return self.embed(offset.clamp(-self.max_offset, self.max_offset) + self.max_offset)


def pairwise_distances(coords: Tensor) -> Tensor:
    """Euclidean distances ``[B, L, L]`` (Å) of ``coords [B, L, 3]``; differentiable at 0."""
    diff = coords[:, :, None, :] - coords[:, None, :, :]
    return torch.sqrt((diff ** 2).sum(-1) + 1e-8)


def pair_mask(residue_mask: Tensor) -> Tensor:
    """Pairs ``i != j`` with both residues set: bool ``[B, L, L]``."""
    both = residue_mask[:, :, None] & residue_mask[:, None, :]
    eye = torch.eye(residue_mask.shape[1], dtype=torch.bool, device=residue_mask.device)
    return both & ~eye


def lddt_ca(pred: Tensor, true: Tensor, residue_mask: Tensor, cutoff: float = 15.0) -> tuple[Tensor, Tensor]:
    """lDDT-Cα of ``pred [B, L, 3]`` against ``true [B, L, 3]`` (Å) over resolved residues.

    Pairs ``i != j`` of resolved reference residues with reference distance < ``cutoff``; a pair
    scores the fraction of the thresholds 0.5/1/2/4 Å its distance error is below. Returns
    ``(global [B], per_residue [B, L])``: global pools all pairs of a chain (0 if it has none),
    per-residue averages the pairs of each residue (0 where it has none).
    """
    d_true = pairwise_distances(true.float())
    d_pred = pairwise_distances(pred.float())
    pairs = (pair_mask(residue_mask) & (d_true < cutoff)).float()
    error = (d_true - d_pred).abs()
    score = sum((error < t).float() for t in LDDT_THRESHOLDS) / len(LDDT_THRESHOLDS)
    conserved = score * pairs
    global_score = conserved.sum((1, 2)) / pairs.sum((1, 2)).clamp(min=1.0)
    per_residue = conserved.sum(2) / pairs.sum(2).clamp(min=1.0)
    return global_score, per_residue


def smooth_lddt_loss(pred: Tensor, true: Tensor, residue_mask: Tensor, cutoff: float = 15.0) -> Tensor:
    """1 − differentiable lDDT-Cα (AF3 supplement 4.3.2): each threshold test ``|Δd| < t`` becomes
    ``sigmoid(t − |Δd|)``; pairs as in :func:`lddt_ca`, pooled over the batch. Scalar in 0..1."""
    d_true = pairwise_distances(true.float())
    d_pred = pairwise_distances(pred.float())
    pairs = pair_mask(residue_mask) & (d_true < cutoff)
    error = (d_true - d_pred).abs()
    score = sum(torch.sigmoid(t - error) for t in LDDT_THRESHOLDS) / len(LDDT_THRESHOLDS)
    return 1.0 - masked_mean(score, pairs)


def kabsch_align(mobile: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Superpose ``mobile [B, L, 3]`` onto ``target`` using the ``mask [B, L]`` residues (proper rotation).

    The rotation is computed without gradient; gradients flow through ``mobile``. Returns the
    moved coordinates ``[B, L, 3]`` (Å).
    """
    w = mask.float()[..., None]
    count = w.sum(1, keepdim=True).clamp(min=1.0)
    mob_c = (mobile * w).sum(1, keepdim=True) / count
    tgt_c = (target * w).sum(1, keepdim=True) / count
    with torch.no_grad():
        h = ((mobile - mob_c) * w).transpose(1, 2).double() @ ((target - tgt_c) * w).double()
        u, _, vt = torch.linalg.svd(h)
        sign = torch.sign(torch.linalg.det(vt.transpose(1, 2) @ u.transpose(1, 2)))
        fix = torch.diag_embed(torch.stack([torch.ones_like(sign), torch.ones_like(sign), sign], -1))
        rot = (u @ fix @ vt).to(mobile.dtype)  # applied as x @ rot
    return (mobile - mob_c) @ rot + tgt_c


def ideal_helix_ca(residue_index: Tensor) -> Tensor:
    """Ideal α-helix Cα trace ``[..., 3]`` (Å) at ``residue_index``: radius 2.3, rise 1.5, 100°/residue."""
    idx = residue_index.float()
    angle = idx * (100.0 * math.pi / 180.0)
    return torch.stack([2.3 * torch.cos(angle), 2.3 * torch.sin(angle), 1.5 * idx], dim=-1)


def bin_centers(n_bins: int, first: float, last: float) -> Tensor:
    """Centres ``[n_bins]`` of ``n_bins - 1`` equal bins between ``first`` and ``last`` plus the
    two open end bins (below ``first``, above ``last``)."""
    edges = torch.linspace(first, last, n_bins - 1)
    step = float(edges[1] - edges[0])
    mids = (edges[:-1] + edges[1:]) / 2
    return torch.cat([torch.tensor([first - step / 2]), mids, torch.tensor([last + step / 2])])


def distance_bins(dist: Tensor, n_bins: int, first: float, last: float) -> Tensor:
    """Bin index (long, same shape as ``dist``) for the binning of :func:`bin_centers`."""
    edges = torch.linspace(first, last, n_bins - 1, device=dist.device)
    return torch.bucketize(dist.contiguous(), edges)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask`` (same shape, bool/float); 0 when the mask is empty."""
    m = mask.float()
    return (values * m).sum() / m.sum().clamp(min=1.0)


def consecutive_pairs(residue_mask: Tensor, residue_index: Tensor) -> Tensor:
    """``[B, L − 1]`` bool: residues i and i+1 are both resolved and ``residue_index`` steps by 1
    (no pair across a chain break or a crop edge). ``residue_mask``/``residue_index [B, L]``."""
    return residue_mask[:, 1:] & residue_mask[:, :-1] & (residue_index.diff(dim=1) == 1)


def consecutive_ca_error(pred: Tensor, true: Tensor, residue_mask: Tensor, residue_index: Tensor) -> Tensor:
    """Mean |d_pred − d_true| (Å) of Cα(i)–Cα(i+1) distances over :func:`consecutive_pairs`
    (chain breaks skipped). ``pred``/``true [B, L, 3]`` Å; 0 if no pair."""
    def step(coords: Tensor) -> Tensor:
        return torch.sqrt(((coords[:, 1:] - coords[:, :-1]) ** 2).sum(-1) + 1e-8)

    return masked_mean((step(pred) - step(true)).abs(), consecutive_pairs(residue_mask, residue_index))
