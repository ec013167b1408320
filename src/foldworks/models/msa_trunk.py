"""``msa_trunk``: small MSA transformer with pair bias → equivariant Cα structure head + pLDDT head.

* Embedding: the query and the next ``n_trunk_rows - 1`` MSA rows ``[B, N', L, 24]`` and target
  features ``[B, L, 45]`` (profile over all rows) → ``m [B, N', L, c_m]``;
  pair ``z [B, L, L, c_z]`` from outer sums of target features + relative positions.
* ``n_layers`` trunk blocks (row attention with pair bias, column attention, outer-product mean,
  triangle multiplication, transitions).
* Structure head: starting coordinates from the auxiliary distogram head (detached; classical MDS
  + weighted stress refinement, as in ``distogram``) or, with ``init="helix"``, an ideal α-helix
  along ``residue_index``; ``n_struct_layers`` E(3)-equivariant (EGNN) updates give
  ``ca_coords [B, L, 3]`` (Å).
* Loss (rotation-invariant): ``w_drmsd`` × dRMSD over resolved pairs with reference distance
  < ``pair_cutoff`` Å + ``w_coord`` × clamped Kabsch-aligned Cα deviation + ``w_disto`` × auxiliary
  distogram CE on the pair representation + ``w_lddt`` × (1 − smooth lDDT-Cα) + ``w_bond`` × mean |Δd| of
  consecutive Cα–Cα distances + ``w_plddt`` × CE of a 50-bin per-residue lDDT-Cα head whose
  targets are the lDDT-Cα of the (detached) predicted coordinates.
* Defaults: ``w_drmsd`` and ``w_coord`` 0, ``w_disto`` 3 (the distogram head's MDS embedding starts
  the structure head); the measurements behind them are in docs/notes/evoformer_demo_history.md.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foldworks.models.common import (
    MSA_FEAT_DIM, TARGET_FEAT_DIM, RelativePosition, bin_centers, consecutive_ca_error, distance_bins, ideal_helix_ca,
    kabsch_align, lddt_ca, masked_mean, smooth_lddt_loss, msa_row_features, pair_mask, pairwise_distances,
    target_features,
)
from foldworks.models.distogram import coords_from_distogram
from foldworks.models.registry import register_model
from foldworks.models.trunk_layers import EGNNLayer, TrunkBlock


@register_model("msa_trunk")
class MSATrunkModel(nn.Module):
    """MSA transformer + EGNN structure head; config keys are the constructor arguments."""

    task = "structure"

    def __init__(self, c_m: int = 32, c_z: int = 16, c_s: int = 32, n_layers: int = 2, n_heads: int = 4,
                 n_struct_layers: int = 4, n_plddt_bins: int = 50, n_disto_bins: int = 40,
                 pair_cutoff: float = 20.0, coord_clamp: float = 10.0, w_drmsd: float = 0.0,
                 w_coord: float = 0.0, w_disto: float = 3.0, w_plddt: float = 0.05, w_lddt: float = 10.0,
                 w_bond: float = 1.0, init: str = "distogram", init_refine_steps: int = 100,
                 n_trunk_rows: int = 16) -> None:
        super().__init__()
        self.n_plddt_bins, self.n_disto_bins = n_plddt_bins, n_disto_bins
        self.pair_cutoff, self.coord_clamp = pair_cutoff, coord_clamp
        self.w_coord, self.w_disto, self.w_plddt, self.w_lddt = w_coord, w_disto, w_plddt, w_lddt
        self.w_bond, self.w_drmsd = w_bond, w_drmsd
        if init not in ("distogram", "helix"):
            raise ValueError(f"msa_trunk: init must be 'distogram' or 'helix', not {init!r}")
        self.init, self.init_refine_steps = init, init_refine_steps
        self.n_trunk_rows = n_trunk_rows
        self.register_buffer("disto_centers", bin_centers(n_disto_bins, 2.0, 22.0), persistent=False)
        self.msa_embed = nn.Linear(MSA_FEAT_DIM, c_m)
        self.target_to_m = nn.Linear(TARGET_FEAT_DIM, c_m)
        self.left, self.right = nn.Linear(TARGET_FEAT_DIM, c_z), nn.Linear(TARGET_FEAT_DIM, c_z)
        self.relpos = RelativePosition(c_z)
        self.blocks = nn.ModuleList([TrunkBlock(c_m, c_z, n_heads) for _ in range(n_layers)])
        self.single = nn.Sequential(nn.LayerNorm(c_m), nn.Linear(c_m, c_s))
        self.pair_norm = nn.LayerNorm(c_z)
        self.struct = nn.ModuleList([EGNNLayer(c_s, c_z) for _ in range(n_struct_layers)])
        self.disto_head = nn.Linear(c_z, n_disto_bins)
        self.plddt_head = nn.Sequential(nn.LayerNorm(c_s), nn.Linear(c_s, c_s), nn.ReLU(),
                                        nn.Linear(c_s, n_plddt_bins))
        self.register_buffer("plddt_centers", (torch.arange(n_plddt_bins) + 0.5) / n_plddt_bins,
                             persistent=False)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Return ``ca_coords [B, L, 3]`` (Å), ``plddt [B, L]`` (0..1) and head logits."""
        mask, msa_mask = batch["mask"], batch["msa_mask"]
        tf = target_features(batch)  # profile over all MSA rows
        rows = slice(0, max(1, self.n_trunk_rows))  # query + first rows enter the trunk (cost ∝ rows)
        msa_mask = msa_mask[:, rows]
        m = self.msa_embed(msa_row_features(batch)[:, rows]) + self.target_to_m(tf)[:, None]
        z = self.left(tf)[:, :, None] + self.right(tf)[:, None] + self.relpos(batch["residue_index"])
        for block in self.blocks:
            m, z = block(m, z, mask, msa_mask)
        s = self.single(m[:, 0])
        z = self.pair_norm(z)
        disto = self.disto_head(0.5 * (z + z.transpose(1, 2)))
        if self.init == "distogram":
            probs = torch.softmax(disto.detach().float(), -1)
            x = coords_from_distogram(probs, mask, batch["residue_index"], self.disto_centers, 22.0,
                                      self.init_refine_steps).to(s.dtype)
        else:
            x = self._initial_coords(batch["residue_index"], mask)
        for layer in self.struct:
            s, x = layer(s, z, x, mask)
        x = x * mask.float()[..., None]
        plddt_logits = self.plddt_head(s)
        plddt = (torch.softmax(plddt_logits.float(), -1) @ self.plddt_centers) * mask.float()
        return {"ca_coords": x, "plddt": plddt, "plddt_logits": plddt_logits, "disto_logits": disto}

    @staticmethod
    def _initial_coords(residue_index: Tensor, mask: Tensor) -> Tensor:
        """Ideal helix ``[B, L, 3]`` centred on the valid residues (breaks the symmetry for the EGNN)."""
        x = ideal_helix_ca(residue_index - residue_index[:, :1])
        w = mask.float()[..., None]
        centre = (x * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp(min=1.0)
        return (x - centre) * w

    def loss(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Weighted sum of the dRMSD, aligned-coordinate, distogram, smooth-lDDT, bond and pLDDT terms (module doc)."""
        pred, true = outputs["ca_coords"].float(), batch["ca_coords"].float()
        resolved = batch["residue_mask"]
        d_pred, d_true = pairwise_distances(pred), pairwise_distances(true)
        pairs = pair_mask(resolved)
        near = pairs & (d_true < self.pair_cutoff)
        drmsd = torch.sqrt(masked_mean((d_pred - d_true) ** 2, near) + 1e-6)
        aligned = kabsch_align(pred, true, resolved)
        deviation = torch.sqrt(((aligned - true) ** 2).sum(-1) + 1e-6).clamp(max=self.coord_clamp)
        coord = masked_mean(deviation, resolved)
        disto_target = distance_bins(d_true, self.n_disto_bins, 2.0, 22.0)
        disto_logits = outputs["disto_logits"].float()
        disto = F.cross_entropy(disto_logits[pairs], disto_target[pairs]) if pairs.any() else drmsd * 0.0
        _, per_res = lddt_ca(pred.detach(), true, resolved)
        has_pairs = resolved & (near.sum(-1) > 0)
        plddt_target = (per_res * self.n_plddt_bins).long().clamp(max=self.n_plddt_bins - 1)
        plddt_logits = outputs["plddt_logits"].float()
        plddt = (F.cross_entropy(plddt_logits[has_pairs], plddt_target[has_pairs])
                 if has_pairs.any() else drmsd * 0.0)
        lddt_term = smooth_lddt_loss(pred, true, resolved)
        bond = consecutive_ca_error(pred, true, resolved, batch["residue_index"])
        total = (self.w_drmsd * drmsd + self.w_coord * coord + self.w_disto * disto + self.w_plddt * plddt
                 + self.w_lddt * lddt_term + self.w_bond * bond)
        logs = {"drmsd": float(drmsd.detach()), "coord_dev": float(coord.detach()),
                "smooth_lddt_loss": float(lddt_term.detach()), "bond_error": float(bond.detach()),
                "disto_ce": float(disto.detach()), "plddt_ce": float(plddt.detach())}
        return total, logs


__all__ = ["MSATrunkModel"]
