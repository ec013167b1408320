"""``distogram``: 2D residual CNN over pair features → Cα–Cα distance bins → coordinates by MDS.

Pipeline (shapes for ``B`` chains of ``L`` residues):

1. target features ``[B, L, 45]`` → 1D embedding (linear + residual 1D convolutions) ``[B, L, c1]``;
2. pair features: outer concatenation ``[B, L, L, 2·c1]`` projected to ``c2`` + relative position;
3. dilated residual 2D convolutions → symmetrised logits ``[B, L, L, n_bins]`` over Cα–Cα distance
   (bins ``min_dist..max_dist`` Å plus two open ends); cross-entropy on resolved pairs;
4. coordinates: expected distances → classical MDS (eigendecomposition) into 3D, weighted
   stress-majorisation steps (confident distances weigh more), and the mirror image chosen so that helices are right-handed;
5. confidence: 1 − normalised entropy of the distance distributions, weighted towards pairs
   likely within 15 Å, per residue (0..1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foldworks.models.common import (
    TARGET_FEAT_DIM, RelativePosition, bin_centers, distance_bins, pair_mask, target_features,
)
from foldworks.models.registry import register_model


class _ResBlock2d(nn.Module):
    """Pre-activation residual block: two dilated 3×3 convolutions with instance normalisation."""

    def __init__(self, channels: int, dilation: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.InstanceNorm2d(channels, affine=True)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation)
        self.norm2 = nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation)
        self.dropout = nn.Dropout2d(dropout)

    def forward(self, x: Tensor, mask2d: Tensor) -> Tensor:
        h = self.conv1(F.elu(self.norm1(x)))
        h = self.conv2(self.dropout(F.elu(self.norm2(h))))
        return (x + h) * mask2d


@register_model("distogram")
class DistogramModel(nn.Module):
    """Distogram CNN; config keys are the constructor arguments (all optional)."""

    task = "structure"

    def __init__(self, embed_dim: int = 32, channels: int = 32, n_blocks: int = 6, n_bins: int = 40,
                 min_dist: float = 2.0, max_dist: float = 22.0, dropout: float = 0.0,
                 refine_steps: int = 100) -> None:
        super().__init__()
        self.n_bins, self.min_dist, self.max_dist = n_bins, min_dist, max_dist
        self.refine_steps = refine_steps
        self.embed = nn.Linear(TARGET_FEAT_DIM, embed_dim)
        self.conv1d = nn.ModuleList([nn.Conv1d(embed_dim, embed_dim, 5, padding=2) for _ in range(2)])
        self.pair_proj = nn.Linear(2 * embed_dim, channels)
        self.relpos = RelativePosition(channels)
        dilations = [1, 2, 4, 8][: max(1, n_blocks)]
        self.blocks = nn.ModuleList(
            [_ResBlock2d(channels, dilations[i % len(dilations)], dropout) for i in range(n_blocks)])
        self.head = nn.Conv2d(channels, n_bins, 1)
        self.register_buffer("centers", bin_centers(n_bins, min_dist, max_dist), persistent=False)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Return ``logits [B, L, L, n_bins]``, ``ca_coords [B, L, 3]`` (Å), ``plddt [B, L]`` (0..1).

        In training mode coordinates and confidence are zeros (MDS is only run in eval mode).
        """
        mask = batch["mask"]
        h = self.embed(target_features(batch)).transpose(1, 2)  # [B, c1, L]
        for conv in self.conv1d:
            h = (h + F.elu(conv(h))) * mask[:, None, :].float()
        h = h.transpose(1, 2)
        length = h.shape[1]
        pair = torch.cat([h[:, :, None].expand(-1, -1, length, -1), h[:, None].expand(-1, length, -1, -1)], -1)
        z = self.pair_proj(pair) + self.relpos(batch["residue_index"])
        mask2d = (mask[:, :, None] & mask[:, None, :]).float()[:, None]
        z = z.permute(0, 3, 1, 2) * mask2d
        for block in self.blocks:
            z = block(z, mask2d)
        logits = self.head(z).permute(0, 2, 3, 1)
        logits = 0.5 * (logits + logits.transpose(1, 2))
        out = {"logits": logits}
        if self.training:  # coordinates are not part of the loss: skip MDS while training
            zeros = torch.zeros_like(mask, dtype=logits.dtype)
            return {**out, "ca_coords": zeros[..., None].expand(-1, -1, 3), "plddt": zeros}
        with torch.no_grad():
            probs = torch.softmax(logits.detach().float(), -1)
            out["ca_coords"] = self.coords_from_probs(probs, mask, batch["residue_index"])
            out["plddt"] = self.confidence(probs, mask)
        return out

    def loss(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Cross-entropy of distance bins over resolved pairs ``i != j``."""
        ca = batch["ca_coords"].float()
        dist = torch.sqrt(((ca[:, :, None] - ca[:, None]) ** 2).sum(-1) + 1e-8)
        target = distance_bins(dist, self.n_bins, self.min_dist, self.max_dist)
        pairs = pair_mask(batch["residue_mask"])
        logits = outputs["logits"].float()
        ce = F.cross_entropy(logits[pairs], target[pairs]) if pairs.any() else logits.sum() * 0.0
        return ce, {"distogram_ce": float(ce.detach())}

    def confidence(self, probs: Tensor, mask: Tensor) -> Tensor:
        """Per-residue confidence ``[B, L]`` in 0..1 from distogram entropies."""
        entropy = -(probs * torch.log(probs.clamp(min=1e-9))).sum(-1) / math.log(self.n_bins)
        near = probs[..., self.centers.to(probs.device) < 15.0].sum(-1)
        weight = (near + 1e-3) * pair_mask(mask).float()
        score = ((1.0 - entropy) * weight).sum(-1) / weight.sum(-1).clamp(min=1e-6)
        return score.clamp(0.0, 1.0) * mask.float()

    def coords_from_probs(self, probs: Tensor, mask: Tensor, residue_index: Tensor) -> Tensor:
        """Cα coordinates ``[B, L, 3]`` (Å) from distance distributions, chain by chain."""
        return coords_from_distogram(probs, mask, residue_index, self.centers, self.max_dist, self.refine_steps)


@torch.no_grad()
def coords_from_distogram(probs: Tensor, mask: Tensor, residue_index: Tensor, centers: Tensor,
                          far: float, refine_steps: int) -> Tensor:
    """Cα coordinates ``[B, L, 3]`` (Å) from distance distributions ``probs [B, L, L, n_bins]``
    (bin ``centers [n_bins]`` Å): classical MDS, :func:`refine_stress`, :func:`fix_handedness`."""
    coords = torch.zeros(probs.shape[0], probs.shape[1], 3, device=probs.device)
    centers = centers.to(probs.device).double()
    for b in range(probs.shape[0]):
        idx = torch.nonzero(mask[b]).squeeze(-1)
        if idx.numel() == 0:
            continue
        p = probs[b][idx][:, idx].double()
        x = classical_mds(p @ centers)
        x = refine_stress(x, p, centers, far, refine_steps)
        coords[b, idx] = fix_handedness(x, residue_index[b, idx]).float()
    return coords


def classical_mds(dist: Tensor, dim: int = 3) -> Tensor:
    """Classical (Torgerson) MDS: coordinates ``[L, dim]`` whose distances approximate ``dist [L, L]``."""
    n = dist.shape[0]
    if n < 2:
        return dist.new_zeros(n, dim)
    d2 = dist ** 2
    centering = torch.eye(n, dtype=dist.dtype, device=dist.device) - 1.0 / n
    gram = -0.5 * centering @ d2 @ centering
    evals, evecs = torch.linalg.eigh(0.5 * (gram + gram.T))
    top = evals.flip(0)[:dim].clamp(min=0.0)
    coords = evecs.flip(1)[:, :dim] * top.sqrt()
    if coords.shape[1] < dim:
        coords = F.pad(coords, (0, dim - coords.shape[1]))
    return coords


def refine_stress(x: Tensor, probs: Tensor, centers: Tensor, far: float, steps: int) -> Tensor:
    """Weighted stress-majorisation steps on ``x [L, 3]`` (Å) towards the distogram's distances.

    Target distance of a pair = Σ_b p_b·c_b with the open far bin's centre replaced by
    ``max(current distance, far)`` (it only pushes pairs apart); weight = 1 / (variance + 1 Å²)
    of the pair's distance distribution, so confident (mostly local) distances dominate.
    Half-step Jacobi update normalised by each residue's total weight.
    """
    n = x.shape[0]
    if n < 3:
        return x
    eye = torch.eye(n, dtype=torch.bool, device=x.device)
    near_part = probs[..., :-1] @ centers[:-1]
    p_far = probs[..., -1]
    mean = probs @ centers
    weight = (1.0 / (probs @ centers ** 2 - mean ** 2 + 1.0)).masked_fill(eye, 0.0)
    norm = weight.sum(1, keepdim=True).clamp(min=1e-6)
    for _ in range(steps):
        diff = x[:, None] - x[None]
        d = torch.sqrt((diff ** 2).sum(-1) + 1e-9)
        target = near_part + p_far * torch.clamp(d, min=far)
        coef = weight * (1.0 - target / d)
        x = x - 0.5 * (coef[..., None] * diff).sum(1) / norm
    return x


def fix_handedness(x: Tensor, residue_index: Tensor) -> Tensor:
    """Mirror ``x [L, 3]`` if left-handed Cα pseudo-torsions (−80°..−20°) outnumber right-handed ones.

    α-helices have Cα torsions near +50°, so this picks the correct enantiomer when the chain has
    helices; only consecutive residues (index step 1) are used.
    """
    if x.shape[0] < 4:
        return x
    consecutive = (residue_index[1:] - residue_index[:-1]) == 1
    ok = consecutive[:-2] & consecutive[1:-1] & consecutive[2:]
    b1, b2, b3 = x[1:-2] - x[:-3], x[2:-1] - x[1:-2], x[3:] - x[2:-1]
    n1, n2 = torch.cross(b1, b2, dim=-1), torch.cross(b2, b3, dim=-1)
    b2_unit = b2 / b2.norm(dim=-1, keepdim=True).clamp(min=1e-9)
    sine = (b2_unit * torch.cross(n1, n2, dim=-1)).sum(-1)  # IUPAC sign convention
    torsion = torch.rad2deg(torch.atan2(sine, (n1 * n2).sum(-1)))[ok]
    right = ((torsion > 20) & (torsion < 80)).sum()
    left = ((torsion < -20) & (torsion > -80)).sum()
    if left > right:
        x = x * torch.tensor([-1.0, 1.0, 1.0], dtype=x.dtype, device=x.device)
    return x
