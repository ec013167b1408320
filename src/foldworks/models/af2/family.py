"""The ``evoformer`` family: the AlphaFold2 monomer model (:class:`~foldworks.models.af2.model.AlphaFold2`)
behind the shared trainer and predictor.

Input: AF2 batches of :class:`foldworks.train.data.Af2FeatureDataModule` (every per-recycle array
``[B, R, ...]``, ``R = num_recycle + 1``; ground truth ``all_atom_positions`` / ``all_atom_mask``
per recycle; optional ``resolution [B]`` in Å). The class attribute ``input_pipeline = "af2"`` tells
training and prediction to build that batch.

Recycling (supp. 1.10): in training the number of recycles is drawn uniformly from ``0 .. R - 1``
per batch (torch RNG; every rank draws its own) and only the last cycle back-propagates; in eval
all ``R`` cycles run. The loss (:func:`foldworks.models.af2.loss.alphafold_loss`) scores the last
cycle run, with the masked-MSA targets of that cycle and the supervision derived from the chain's
atom37 truth (:func:`foldworks.models.af2.loss.make_supervision`); the backbone FAPE is clamped in
90 % of training samples (supp. 1.11.5), always at eval.

Outputs: AF2's (OpenFold names; ``af2_plddt`` is AF2's pLDDT in 0–100) plus the registry contract:
``ca_coords [B, N, 3]`` (Å), ``plddt [B, N]`` (0–1), ``atom37_coords [B, N, 37, 3]``,
``atom37_mask [B, N, 37]`` and, with the PAE head, ``pae_logits [B, N, N, bins]`` and
``pae_bin_centers [bins]`` (Å).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from foldworks.constants import CA_INDEX
from foldworks.features.af2 import Af2DataConfig
from foldworks.models.af2 import heads as H
from foldworks.models.af2.config import PRESETS as AF2_PRESETS, config_from_json
from foldworks.models.af2.loss import LossConfig, LossWeights, alphafold_loss, make_supervision
from foldworks.models.af2.model import AlphaFold2
from foldworks.models.common import consecutive_ca_error, lddt_ca, smooth_lddt_loss
from foldworks.models.registry import register_model

#: Batch keys without a recycle dimension (``[B]``).
PER_CHAIN_KEYS = ("resolution",)
#: Input-pipeline sizes per preset (AF2 ``config.data`` names); other presets get AF2's training sizes.
DATA_DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu_small": {"max_msa_clusters": 18, "max_extra_msa": 32, "max_templates": 2},
}
AF2_TRAINING_DATA: dict[str, Any] = {"max_msa_clusters": 128, "max_extra_msa": 1024, "max_templates": 4}
#: Probability that a training sample's backbone FAPE is clamped (supp. 1.11.5).
CLAMPED_FAPE_PROB = 0.9


def _preset_values(name: str) -> dict[str, Any]:
    values = {**AF2_PRESETS[name].to_dict(), "loss_weights": "initial_training", "chunk_size": None,
              "w_ca_lddt": 0.0, "w_ca_bond": 0.0,
              "data": dict(DATA_DEFAULTS.get(name, AF2_TRAINING_DATA))}
    if name == "finetuning":
        values["loss_weights"] = "fine_tuning"
    return values


#: ``model_config`` values of the documented presets (any AF2 preset name is accepted).
PRESETS: dict[str, dict[str, Any]] = {name: _preset_values(name)
                                      for name in ("cpu_small", "initial_training", "finetuning", "model_1_ptm")}


@register_model("evoformer")
class EvoformerFamily(AlphaFold2):
    """AF2 monomer as a registered family. ``preset`` names an AF2 preset (see
    :data:`foldworks.models.af2.PRESETS`); any :class:`~foldworks.models.af2.AF2Config` field may be
    overridden. ``loss_weights``: ``initial_training`` or ``fine_tuning`` (AF2 supp. 1.9 / 1.11;
    default: ``fine_tuning`` for the ``finetuning`` preset, else ``initial_training``).
    ``chunk_size``: attention rows per chunk (None = automatic cache-sized chunks on CPU, none on
    GPU). ``data``: input-pipeline settings (:class:`foldworks.features.af2.Af2DataConfig` names,
    e.g. ``max_msa_clusters``).
    ``w_ca_lddt`` / ``w_ca_bond``: optional Cα terms not in AF2 (0 = off = AF2): AF3's smooth
    lDDT-Cα (AF3 supp. 4.3.2) and the error of consecutive Cα–Cα distances (Å / 10), both on the
    final structure and added to the scaled AF2 loss."""

    task = "structure"
    input_pipeline = "af2"

    def __init__(self, preset: str = "cpu_small", loss_weights: str | None = None,
                 chunk_size: int | None = None, data: dict[str, Any] | None = None, w_ca_lddt: float = 0.0,
                 w_ca_bond: float = 0.0, **fields: Any) -> None:
        cfg = config_from_json({"preset": preset, **fields})
        super().__init__(cfg)
        loss_weights = loss_weights or ("fine_tuning" if preset == "finetuning" else "initial_training")
        if loss_weights not in ("initial_training", "fine_tuning"):
            raise ValueError(f"evoformer: loss_weights {loss_weights!r}; choose initial_training or fine_tuning")
        self.loss_config = LossConfig(weights=getattr(LossWeights, loss_weights)(ptm=cfg.ptm),
                                      report_zero_weighted=False)
        data_values = {**DATA_DEFAULTS.get(preset, AF2_TRAINING_DATA), **(data or {})}
        self.data_config = Af2DataConfig.from_mapping(
            {**data_values, "num_recycle": cfg.num_recycle, "use_templates": cfg.templates})
        self.chunk_size = chunk_size
        self.set_chunk_size(chunk_size)
        self.ca_weights = {"ca_lddt": float(w_ca_lddt), "ca_bond": float(w_ca_bond)}

    def af2_data_config(self, train: bool, crop_size: int | None = None,
                        spatial_crop_prob: float = 0.0) -> Af2DataConfig:
        """The input pipeline's settings: crops only in training; no block deletion at eval."""
        return dataclasses.replace(self.data_config, crop_size=crop_size if train else None,
                                   spatial_crop_prob=spatial_crop_prob if train else 0.0,
                                   block_delete_msa=self.data_config.block_delete_msa and train)

    def estimate_inference_bytes(self, length: int, msa_rows: int = 1) -> int:
        """Estimated peak activation bytes (fp32, no gradients) of one eval forward on ``length`` residues.

        Dominant terms: the pair representation and its triangle-update temporaries
        (12 × ``L² c_z``), the MSA stack (8 × ``S L c_m`` with ``S`` cluster rows + templates), the extra
        MSA (8 × ``S_e L c_e``) and the largest attention logits of one block: triangle attention
        ``H_pair × rows × L²`` and MSA row attention ``H_msa × rows × L²`` (``rows`` capped by the chunk
        size). A bound for refusing chains, not a measurement.
        """
        cfg, d = self.cfg, self.data_config
        chunk = self.chunk_size or 0
        rows_s = d.num_clusters + (d.max_templates if cfg.templates else 0)
        cap = (lambda n: min(n, chunk)) if chunk > 0 else (lambda n: n)  # noqa: E731
        pair = 12 * cfg.c_z * length * length
        msa = 8 * (cfg.c_m * rows_s + cfg.c_e * d.max_extra_msa) * length
        logits = max(cfg.pair_heads * cap(length), cfg.msa_heads * cap(rows_s),
                     cfg.extra_msa_heads * cap(d.max_extra_msa)) * length * length
        return 4 * (pair + msa + 2 * logits)

    # ---------------------------------------------------------------------------------- forward
    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:  # type: ignore[override]
        """AF2 batch ``[B, R, ...]`` → AF2 outputs of the last cycle + the family contract."""
        num_sets = batch["aatype"].shape[1]
        cycles = int(torch.randint(1, num_sets + 1, ())) if self.training else num_sets
        feats = {k: v if k in PER_CHAIN_KEYS else v[:, :cycles] for k, v in batch.items()}
        out = super().forward(feats, batch_dims=1)
        seq_mask = batch["seq_mask"][:, cycles - 1]
        exists = out["final_atom_mask"] * seq_mask[..., None]
        atom37 = out["final_atom_positions"] * seq_mask[..., None, None]
        out.update(num_cycles=torch.tensor(cycles), af2_plddt=out["plddt"],
                   plddt=out["plddt"] / 100.0 * seq_mask, ca_coords=atom37[..., CA_INDEX, :],
                   atom37_coords=atom37, atom37_mask=exists > 0)
        if "tm_logits" in out:
            breaks = H.pae_breaks(self.cfg.pae_max_error_bin, self.cfg.pae_bins, out["tm_logits"].float())
            out.update(pae_logits=out["tm_logits"], pae_bin_centers=H.aligned_error_bin_centers(breaks))
        return out

    # ---------------------------------------------------------------------------------- loss
    def loss_batch(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The loss's batch: the scored cycle's features, the supervision of its atom37 truth,
        ``resolution`` (Å; 0 when unknown, which gates the resolution-dependent terms off),
        ``seq_length`` and ``use_clamped_fape``."""
        last = int(outputs["num_cycles"]) - 1
        feats = {k: v[:, last] for k, v in batch.items() if k not in PER_CHAIN_KEYS}
        seq_mask = feats["seq_mask"]
        sup = make_supervision(feats["aatype"].long(), feats["all_atom_positions"], feats["all_atom_mask"])
        for key in ("atom14_atom_exists", "atom37_atom_exists"):
            sup[key] = sup[key] * seq_mask[..., None]
        size = seq_mask.shape[0]
        resolution = batch.get("resolution", seq_mask.new_zeros(size)).float()
        clamped = ((torch.rand(size) < CLAMPED_FAPE_PROB).float() if self.training else torch.ones(size))
        return {**feats, **sup, "resolution": torch.nan_to_num(resolution, nan=0.0),
                "seq_length": seq_mask.sum(-1), "use_clamped_fape": clamped.to(seq_mask.device)}

    def loss(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """AF2's total loss (:func:`~foldworks.models.af2.loss.alphafold_loss`, fp32)."""
        lb = self.loss_batch(batch, outputs)
        loss, terms = alphafold_loss(outputs, lb, self.loss_config)
        if any(self.ca_weights.values()):
            with torch.autocast(device_type=loss.device.type, enabled=False):
                pred = outputs["ca_coords"].float()
                true, mask = lb["all_atom_positions"][..., CA_INDEX, :], lb["all_atom_mask"][..., CA_INDEX] > 0
                extra = {"ca_lddt": smooth_lddt_loss(pred, true, mask),
                         "ca_bond": consecutive_ca_error(pred, true, mask, lb["residue_index"].long()) / 10.0}
            for name, value in extra.items():
                terms[name] = value.detach()
                loss = loss + self.ca_weights[name] * value
        return loss, {k: float(v) for k, v in terms.items()}

    def validation_metrics(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Per-chain lDDT-Cα of the prediction against the resolved Cα of the truth ``{lddt_ca: [B]}``."""
        last = int(outputs["num_cycles"]) - 1
        truth = batch["all_atom_positions"][:, last, :, CA_INDEX].float()
        mask = (batch["all_atom_mask"][:, last, :, CA_INDEX] * batch["seq_mask"][:, last]) > 0
        score, _ = lddt_ca(outputs["ca_coords"].float(), truth, mask)
        return {"lddt_ca": score}


__all__ = ["EvoformerFamily", "DATA_DEFAULTS", "PRESETS"]
