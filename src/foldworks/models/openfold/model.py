"""The ``evoformer`` family: AF2/OpenFold-class model (AF2 supplement Alg 2) behind the shared trainer.

Forward (Alg 2): input embedding (Alg 3, 4) → recycling embedding (Alg 32) → Evoformer stack
(Alg 6) → single projection of the first MSA row → structure module (Alg 20) with all-atom
output (Alg 24) → heads (distogram, masked MSA, pLDDT, optional PAE). Recycling: at eval
``max_recycles`` extra cycles; in training a uniform number 0..``max_recycles`` (torch RNG), all
but the last cycle under ``no_grad`` (supp. 1.10).

MSA handling (simplified vs AF2 1.2.7): the first ``max_msa_clusters`` rows (query first) are the
"cluster centres" fed to the Evoformer; there is no clustering of the remaining rows and no extra-MSA
stack — the full MSA enters only through the profile in the target features. BERT masking is done
here in training mode: 15 % of MSA positions are replaced by a token drawn from
0.7 mask / 0.1 uniform amino acid / 0.1 MSA profile / 0.1 unchanged, and the masked-MSA head
predicts the original tokens.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foldworks.constants import CA_INDEX, MSA_ALPHABET_SIZE
from foldworks.models.common import TARGET_FEAT_DIM, _deletion_value, smooth_lddt_loss, target_features
from foldworks.models.openfold import all_atom, losses
from foldworks.models.openfold.embedders import InputEmbedder, RecyclingEmbedder
from foldworks.models.openfold.evoformer import EvoformerStack
from foldworks.models.openfold.heads import (
    MSA_CLASSES, PLDDT_BINS, DistogramHead, MaskedMSAHead, PAEHead, PLDDTHead, pae_bin_centers,
)
from foldworks.models.openfold.structure import StructureModule
from foldworks.models.registry import register_model

log = logging.getLogger(__name__)

MSA_FEAT_DIM = MSA_CLASSES + 2  # one-hot incl. mask token, has-deletion, deletion value
MASK_TOKEN = MSA_CLASSES - 1

_BASE: dict[str, Any] = {
    "c_hidden_msa": 32, "n_heads_msa": 8, "c_hidden_opm": 32, "c_hidden_mul": 128, "c_hidden_tri": 32,
    "n_heads_tri": 4, "msa_dropout": 0.15, "pair_dropout": 0.25, "c_ipa": 16, "n_heads_ipa": 12,
    "n_qk_points": 4, "n_v_points": 8, "c_resnet": 128, "sm_dropout": 0.1, "c_plddt": 128,
    "max_recycles": 3, "max_msa_clusters": 128, "bert_fraction": 0.15, "use_pae_head": False,
    "unclamped_fape_fraction": 0.1,
    "activation_checkpointing": False, "chunk_size": None,
    # Loss weights, supp. 1.9 eq. 7 (initial training): 0.5 L_FAPE + 0.5 L_aux + 0.3 L_dist + 2 L_msa
    # + 0.01 L_conf; L_aux = backbone FAPE (layer mean) + L_torsion + 0.02 L_anglenorm (Alg 27).
    "w_fape": 0.5, "w_aux": 0.5, "w_distogram": 0.3, "w_msa": 2.0, "w_plddt": 0.01, "w_anglenorm": 0.02,
    "w_pae": 0.1,  # AF2 pTM fine-tuning weight of the aligned-error loss (supp. 1.9.7)
    # Cα terms not in AF2 (weight 0 = off; docs/models.md gives each one's measured reason).
    "w_ca_lddt": 0.0,  # AF3 smooth lDDT of the final Cα (AF3 supp. 4.3.2)
    "w_ca_bond": 0.0,  # |Δd| of consecutive Cα–Cα distances, Å / 10
    "w_ca_fape": 0.0,  # FAPE of Cα in Cα pseudo-frames (Alg 21, Alg 28), layer mean
    "ca_fape_window": 0,  # residues; > 0 scores only Cα within this sequence distance of the frame
}
PRESETS: dict[str, dict[str, Any]] = {
    # OpenFold initial training (AF2 supp. Table 4 model 1.1.1, without the extra-MSA stack).
    "openfold_initial": {**_BASE, "n_blocks": 48, "c_m": 256, "c_z": 128, "c_s": 384, "n_struct_layers": 8},
    # CPU demo size: 2 blocks, 4 structure layers, no dropout.
    "cpu_small": {**_BASE, "n_blocks": 2, "c_m": 32, "c_z": 32, "c_s": 64, "n_struct_layers": 4,
                  "c_hidden_msa": 16, "n_heads_msa": 4, "c_hidden_opm": 16, "c_hidden_mul": 32,
                  "c_hidden_tri": 16, "n_heads_tri": 2, "n_heads_ipa": 8, "n_v_points": 6, "c_resnet": 64,
                  "c_plddt": 64, "max_recycles": 1, "max_msa_clusters": 16, "msa_dropout": 0.0,
                  "pair_dropout": 0.0, "sm_dropout": 0.0},
}


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@register_model("evoformer")
class EvoformerModel(nn.Module):
    """OpenFold-class structure model; ``preset`` picks sizes, any preset key can be overridden."""

    task = "structure"

    def __init__(self, preset: str = "cpu_small", **overrides: Any) -> None:
        super().__init__()
        if preset not in PRESETS:
            raise ValueError(f"evoformer: unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        unknown = sorted(set(overrides) - set(PRESETS[preset]))
        if unknown:
            raise TypeError(f"evoformer: unknown option(s) {unknown}; options are {sorted(PRESETS[preset])}")
        cfg = {**PRESETS[preset], **overrides}
        self.preset, self.cfg = preset, cfg
        c_m, c_z, c_s = cfg["c_m"], cfg["c_z"], cfg["c_s"]
        self.input_embedder = InputEmbedder(TARGET_FEAT_DIM, MSA_FEAT_DIM, c_m, c_z)
        self.recycling_embedder = RecyclingEmbedder(c_m, c_z)
        self.evoformer = EvoformerStack(
            cfg["n_blocks"], c_m, c_z, cfg["activation_checkpointing"], c_hidden_msa=cfg["c_hidden_msa"],
            n_heads_msa=cfg["n_heads_msa"], c_hidden_opm=cfg["c_hidden_opm"], c_hidden_mul=cfg["c_hidden_mul"],
            c_hidden_tri=cfg["c_hidden_tri"], n_heads_tri=cfg["n_heads_tri"], msa_dropout=cfg["msa_dropout"],
            pair_dropout=cfg["pair_dropout"])
        self.single = nn.Linear(c_m, c_s)
        self.structure = StructureModule(c_s, c_z, cfg["n_struct_layers"], cfg["c_ipa"], cfg["n_heads_ipa"],
                                         cfg["n_qk_points"], cfg["n_v_points"], cfg["c_resnet"], cfg["sm_dropout"])
        self.distogram_head = DistogramHead(c_z)
        self.msa_head = MaskedMSAHead(c_m)
        self.plddt_head = PLDDTHead(c_s, cfg["c_plddt"])
        self.pae_head = PAEHead(c_z) if cfg["use_pae_head"] else None
        log.info("evoformer (%s): %d parameters", preset, count_parameters(self))

    @property
    def chunk_size(self) -> int | None:
        """Slice size (rows or residues) of the Evoformer's attention, triangle and OPM ops; None = unsliced."""
        return self.cfg["chunk_size"]

    @chunk_size.setter
    def chunk_size(self, value: int | None) -> None:
        self.cfg["chunk_size"] = value

    def estimate_inference_bytes(self, length: int, n_msa_rows: int = 1) -> int:
        """Rough peak activation memory (bytes, fp32) of an eval forward on one chain of ``length`` residues.

        Dominated by the attention logits: triangle attention ``[rows, H_tri, L, L]`` and MSA row
        attention ``[N, H_msa, L, L]``, where ``rows``/``N`` are capped by ``chunk_size``; about
        four such buffers are live at once (bias, logits, softmax, grad-free temporaries), plus the
        pair representation and its transition (``L² · c_z · 8``). Excludes the interpreter, torch and
        the weights. For a refusal message, not a guarantee.
        """
        chunk = self.cfg["chunk_size"] or max(length, n_msa_rows)
        n_rows = min(n_msa_rows, self.cfg["max_msa_clusters"])
        tri = min(length, chunk) * self.cfg["n_heads_tri"] * length * length
        row = min(n_rows, chunk) * self.cfg["n_heads_msa"] * length * length
        pair = length * length * self.cfg["c_z"] * 8
        return 4 * (4 * max(tri, row) + pair)

    # ----------------------------------------------------------------------------- features
    def _bert_mask(self, msa: Tensor, msa_mask: Tensor) -> tuple[Tensor, Tensor]:
        """AF2 1.2.7 masked-MSA corruption → ``(corrupted msa [B, N, L], bert_mask [B, N, L] bool)``."""
        onehot = F.one_hot(msa.clamp(0, MSA_CLASSES - 1), MSA_CLASSES).float()
        w = msa_mask.float()[..., None]
        profile = (onehot * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp(min=1.0)
        uniform = torch.zeros(MSA_CLASSES, device=msa.device)
        uniform[:20] = 1.0 / 20.0
        probs = 0.1 * uniform + 0.1 * profile + 0.1 * onehot
        probs[..., MASK_TOKEN] += 0.7
        sampled = torch.multinomial(probs.reshape(-1, MSA_CLASSES), 1).view(msa.shape)
        chosen = (torch.rand(msa.shape, device=msa.device) < self.cfg["bert_fraction"]) & msa_mask
        return torch.where(chosen, sampled, msa), chosen

    @staticmethod
    def _msa_features(msa: Tensor, deletions: Tensor, msa_mask: Tensor) -> Tensor:
        """``[B, N, L, 25]``: 23-class one-hot (incl. mask token), has-deletion, squashed deletion count."""
        feats = torch.cat([F.one_hot(msa.clamp(0, MSA_CLASSES - 1), MSA_CLASSES).float(),
                           (deletions > 0).float()[..., None], _deletion_value(deletions.float())[..., None]], -1)
        return feats * msa_mask.float()[..., None]

    # ----------------------------------------------------------------------------- forward
    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Padded batch (``common`` contract) → output dict (``common`` contract + loss inputs)."""
        mask, aatype = batch["mask"], batch["aatype"]
        rows = slice(0, max(1, self.cfg["max_msa_clusters"]))
        msa = batch["msa"][:, rows].long().clamp(0, MSA_ALPHABET_SIZE - 1)
        msa_mask = batch["msa_mask"][:, rows, None] & mask[:, None, :]
        true_msa = msa
        if self.training:
            msa, bert_mask = self._bert_mask(msa, msa_mask)
        else:
            bert_mask = torch.zeros_like(msa_mask)
        target_feat = target_features(batch)
        msa_feat = self._msa_features(msa, batch["deletion_matrix"][:, rows], msa_mask)
        pair_mask = mask[:, :, None] & mask[:, None, :]
        if self.training:
            n_recycles = int(torch.randint(0, self.cfg["max_recycles"] + 1, ()))
        else:
            n_recycles = self.cfg["max_recycles"]
        grad = torch.is_grad_enabled()
        prev = None
        for cycle in range(n_recycles + 1):
            last = cycle == n_recycles
            with torch.set_grad_enabled(grad and last):
                out = self._iteration(batch, target_feat, msa_feat, msa_mask, pair_mask, prev)
            if not last:
                prev = (out["m0"].detach(), out["z"].detach(), out["pseudo_beta"].detach())
        for key in ("m0", "z", "pseudo_beta"):
            out.pop(key)
        self.last_n_recycles = n_recycles
        out.update(true_msa=true_msa, bert_mask=bert_mask)
        return out

    def _iteration(self, batch: dict[str, Tensor], target_feat: Tensor, msa_feat: Tensor, msa_mask: Tensor,
                   pair_mask: Tensor, prev: tuple[Tensor, Tensor, Tensor] | None) -> dict[str, Tensor]:
        """One recycling iteration (Alg 2 lines 5–16)."""
        mask, aatype = batch["mask"], batch["aatype"]
        m, z = self.input_embedder(target_feat, msa_feat, batch["residue_index"])
        if prev is None:  # first cycle: zero previous outputs (Alg 2 line 3)
            b, l = aatype.shape
            prev = (m.new_zeros(b, l, m.shape[-1]), z.new_zeros(z.shape), m.new_zeros(b, l, 3))
        dm, dz = self.recycling_embedder(*prev)
        m = torch.cat([m[:, :1] + dm[:, None], m[:, 1:]], 1)
        z = z + dz
        m, z = self.evoformer(m, z, msa_mask, pair_mask, self.cfg["chunk_size"])
        s = self.single(m[:, 0])
        sm = self.structure(s, z, aatype, mask)
        atom37, exists = all_atom.atom14_to_atom37(sm["atom14"], aatype)
        fmask = mask.float()
        plddt_logits, plddt = self.plddt_head(sm["single"])
        out = {
            "ca_coords": atom37[:, :, CA_INDEX] * fmask[..., None],
            "plddt": plddt * fmask,
            "atom37_coords": atom37 * fmask[..., None, None],
            "atom37_mask": exists & mask[..., None],
            "frames_rot": sm["frames_rot"][:, -1], "frames_trans": sm["frames_trans"][:, -1],
            "sm_frames_rot": sm["frames_rot"], "sm_frames_trans": sm["frames_trans"],
            "sm_angles": sm["angles"], "sm_unnormalized_angles": sm["unnormalized_angles"],
            "atom14": sm["atom14"], "group_rot": sm["group_rot"], "group_trans": sm["group_trans"],
            "plddt_logits": plddt_logits, "disto_logits": self.distogram_head(z), "msa_logits": self.msa_head(m),
            "m0": m[:, 0], "z": z, "pseudo_beta": all_atom.pseudo_beta(atom37, aatype),
        }
        if self.pae_head is not None:
            out["pae_logits"] = self.pae_head(z)
            out["pae_bin_centers"] = self.pae_head.centers
        return out

    # ----------------------------------------------------------------------------- loss
    def loss(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Supp. 1.9 eq. 7 weighted sum (weights in the preset); every term in fp32 without autocast."""
        cfg = self.cfg
        with torch.autocast(device_type=batch["aatype"].device.type, enabled=False):
            ref = losses.reference_geometry(batch)
            sc_fape = losses.sidechain_fape(outputs, batch, ref)
            # AF2 1.11.5: backbone FAPE unclamped in a fraction (10 %) of training batches
            unclamped = self.training and float(torch.rand(())) < cfg["unclamped_fape_fraction"]
            bb_fape = losses.backbone_fape(outputs, ref, None if unclamped else 10.0)
            torsion, angle_norm = losses.torsion_loss(outputs, ref)
            aux = bb_fape + torsion + cfg["w_anglenorm"] * angle_norm
            disto = losses.distogram_loss(outputs["disto_logits"], batch)
            msa = losses.masked_msa_loss(outputs["msa_logits"], outputs["true_msa"], outputs["bert_mask"])
            plddt = losses.plddt_loss(outputs["plddt_logits"], outputs["ca_coords"], batch, PLDDT_BINS)
            ca_lddt = smooth_lddt_loss(outputs["ca_coords"].float(), batch["ca_coords"].float(),
                                       batch["residue_mask"])
            ca_bond = losses.ca_bond_loss(outputs["ca_coords"].float(), batch)
            ca_fape = (losses.ca_fape_loss(outputs, batch, window=cfg["ca_fape_window"])
                       if cfg["w_ca_fape"] else ca_bond.new_zeros(()))
            total = (cfg["w_fape"] * sc_fape + cfg["w_aux"] * aux + cfg["w_distogram"] * disto
                     + cfg["w_msa"] * msa + cfg["w_plddt"] * plddt
                     + cfg["w_ca_lddt"] * ca_lddt + cfg["w_ca_bond"] * ca_bond + cfg["w_ca_fape"] * ca_fape)
            logs = {"fape_sidechain": sc_fape, "fape_backbone": bb_fape, "torsion": torsion,
                    "angle_norm": angle_norm, "disto_ce": disto, "msa_ce": msa, "plddt_ce": plddt,
                    "ca_lddt_loss": ca_lddt, "ca_bond_loss": ca_bond, "ca_fape_loss": ca_fape}
            if "pae_logits" in outputs:
                pae = losses.pae_loss(outputs["pae_logits"], outputs, ref)
                total = total + cfg["w_pae"] * pae
                logs["pae_ce"] = pae
        return total, {k: float(v.detach()) for k, v in logs.items()}


__all__ = ["EvoformerModel", "PRESETS", "count_parameters", "pae_bin_centers"]
