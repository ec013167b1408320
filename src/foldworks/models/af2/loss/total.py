"""AlphaFold2's total training loss (AF2 supp. 1.9 and 1.11; term by term OpenFold's ``AlphaFoldLoss``).

Input contract — ``outputs`` (OpenFold's names; ``L`` structure-module layers, ``N`` residues,
``S`` MSA rows; an optional batch dim ``B`` goes after ``L`` for ``sm/*`` and first elsewhere):

* ``sm/frames [L, N, 7]`` backbone frames per layer, quaternion (w, x, y, z) + translation (Å);
* ``sm/sidechain_frames [L, N, 8, 4, 4]`` rigid-group frames (Å; only the last layer is read, so
  ``sm/group_frames_rot [N, 8, 3, 3]`` + ``sm/group_frames_trans [N, 8, 3]`` of the last layer also do);
* ``sm/positions [L, N, 14, 3]`` atom14 (Å);
* ``sm/angles``, ``sm/unnormalized_angles [L, N, 7, 2]`` torsion (sin, cos), normalised / raw;
* ``final_atom_positions [N, 37, 3]`` (Å, from the last layer); ``final_affine_tensor [N, 7]``
  (optional, default ``sm/frames[-1]``);
* ``distogram_logits [N, N, 64]``, ``masked_msa_logits [S, N, 23]``, ``lddt_logits [N, 50]``,
  ``experimentally_resolved_logits [N, 37]``, ``tm_logits [N, N, 64]`` (may be absent when the TM
  weight is 0).

A nested ``{"sm": {...}}`` dict is accepted as well (see :func:`flatten_outputs`).

``batch``: the supervision of :func:`supervision.make_supervision` plus ``seq_mask [N]``,
``residue_index [N]``, ``true_msa``/``bert_mask [S, N]`` (of the last recycling iteration, the one
whose outputs are scored), ``resolution []`` (Å), ``seq_length []``
and ``use_clamped_fape []`` (1 clamped / 0 unclamped; AF2 draws 1 with p 0.9 per sample).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from torch import Tensor

from foldworks.models.af2.loss import categorical, confidence, fape, torsion, violation
from foldworks.models.af2.loss.geometry import to_tensor_4x4


@dataclasses.dataclass(frozen=True)
class LossWeights:
    """Per-term weights of the total loss (AF2 supp. 1.9 and 1.11; OpenFold's ``model_*_ptm`` and
    ``finetuning_ptm`` presets)."""

    fape: float = 1.0
    supervised_chi: float = 1.0
    distogram: float = 0.3
    masked_msa: float = 2.0
    plddt_loss: float = 0.01
    experimentally_resolved: float = 0.0
    violation: float = 0.0
    tm: float = 0.0

    @classmethod
    def initial_training(cls, ptm: bool = True) -> LossWeights:
        """Initial training; the TM (PAE) head trained with weight 0.1 when ``ptm``."""
        return cls(tm=0.1 if ptm else 0.0)

    @classmethod
    def fine_tuning(cls, ptm: bool = True) -> LossWeights:
        """Fine-tuning: adds the violation (1.0) and experimentally-resolved (0.01) terms."""
        return cls(experimentally_resolved=0.01, violation=1.0, tm=0.1 if ptm else 0.0)


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Hyper-parameters of every term (distances in Å); defaults are AF2's."""

    weights: LossWeights = dataclasses.field(default_factory=LossWeights.initial_training)
    fape_clamp: float = 10.0
    fape_length_scale: float = 10.0
    backbone_fape_weight: float = 0.5
    sidechain_fape_weight: float = 0.5
    fape_eps: float = 1e-4
    chi_weight: float = 0.5
    angle_norm_weight: float = 0.01
    distogram_min_bin: float = 2.3125
    distogram_max_bin: float = 21.6875
    distogram_bins: int = 64
    msa_classes: int = 23
    lddt_cutoff: float = 15.0
    lddt_bins: int = 50
    tm_max_bin: float = 31.0
    tm_bins: int = 64
    min_resolution: float = 0.1
    max_resolution: float = 3.0
    violation_tolerance_factor: float = 12.0
    clash_overlap_tolerance: float = 1.5
    eps: float = 1e-8
    #: Compute and report terms of weight 0 too (False: skip them; the violation term is costly).
    report_zero_weighted: bool = True


def _fape_parts(out: dict[str, Tensor], batch: dict[str, Tensor], cfg: LossConfig) -> dict[str, Tensor]:
    pos = out["sm/positions"][-1]
    renamed = fape.renamed_ground_truth(batch, pos)
    bb = fape.backbone_fape(out["sm/frames"], batch["backbone_rigid_tensor"], batch["backbone_rigid_mask"],
                            batch.get("use_clamped_fape"), cfg.fape_clamp, cfg.fape_length_scale, cfg.fape_eps)
    sc = fape.sidechain_fape(out["sm/sidechain_frames"][-1], pos, batch, renamed, cfg.fape_clamp,
                             cfg.fape_length_scale, cfg.fape_eps).mean()
    total = cfg.backbone_fape_weight * bb + cfg.sidechain_fape_weight * sc
    return {"fape": total, "fape_backbone": bb, "fape_sidechain": sc}


def _terms(out: dict[str, Tensor], batch: dict[str, Tensor], cfg: LossConfig) -> dict[str, Callable[[], Tensor]]:
    res = batch["resolution"]
    gates = dict(min_resolution=cfg.min_resolution, max_resolution=cfg.max_resolution, eps=cfg.eps)
    return {
        "supervised_chi": lambda: torsion.supervised_chi_loss(
            out["sm/angles"], out["sm/unnormalized_angles"], batch["aatype"], batch["seq_mask"],
            batch["chi_mask"], batch["chi_angles_sin_cos"], cfg.chi_weight, cfg.angle_norm_weight, cfg.eps),
        "distogram": lambda: categorical.distogram_loss(
            out["distogram_logits"], batch["pseudo_beta"], batch["pseudo_beta_mask"], cfg.distogram_min_bin,
            cfg.distogram_max_bin, cfg.distogram_bins, cfg.eps),
        "masked_msa": lambda: categorical.masked_msa_loss(
            out["masked_msa_logits"], batch["true_msa"], batch["bert_mask"], cfg.msa_classes, cfg.eps),
        "plddt_loss": lambda: confidence.plddt_loss(
            out["lddt_logits"], out["final_atom_positions"], batch["all_atom_positions"], batch["all_atom_mask"],
            res, cfg.lddt_cutoff, cfg.lddt_bins, **gates),
        "experimentally_resolved": lambda: confidence.experimentally_resolved_loss(
            out["experimentally_resolved_logits"], batch["atom37_atom_exists"], batch["all_atom_mask"], res, **gates),
        "tm": lambda: confidence.tm_loss(
            out["tm_logits"], out.get("final_affine_tensor", out["sm/frames"][-1]), batch["backbone_rigid_tensor"],
            batch["backbone_rigid_mask"], res, cfg.tm_max_bin, cfg.tm_bins, **gates),
        "violation": lambda: violation.violation_loss(
            out["sm/positions"][-1], batch, cfg.violation_tolerance_factor, cfg.clash_overlap_tolerance, cfg.eps)[0],
    }


def flatten_outputs(outputs: dict) -> dict[str, Tensor]:
    """The contract's flat names from a model output that nests the structure module under ``"sm"``.

    Builds ``sm/sidechain_frames`` (with a leading layer dim of 1) from last-layer
    ``group_frames_rot``/``group_frames_trans`` when the 4×4 stack is absent.
    """
    flat = {k: v for k, v in outputs.items() if k != "sm"}
    flat.update({f"sm/{k}": v for k, v in outputs.get("sm", {}).items()})
    if "sm/sidechain_frames" not in flat and "sm/group_frames_rot" in flat:
        frames = (flat["sm/group_frames_rot"], flat["sm/group_frames_trans"])
        flat["sm/sidechain_frames"] = to_tensor_4x4(frames)[None]
    return flat


def _fp32(d: dict[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.float() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in d.items()}


def alphafold_loss(outputs: dict[str, Tensor], batch: dict[str, Tensor],
                   config: LossConfig | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Weighted sum of the AF2 loss terms, scaled by √min(N_res, crop) as OpenFold does.

    Every term is computed in float32 with autocast disabled and averaged over the batch (per
    chain). Terms with weight 0 are still computed and reported (unless
    ``config.report_zero_weighted`` is off), except TM when its logits are absent. A non-finite
    term is reported but contributes 0, as in OpenFold.
    Returns ``(loss, terms)``; ``terms`` also holds ``unscaled_loss``, ``fape_backbone`` and
    ``fape_sidechain`` (all detached).
    """
    cfg = config or LossConfig()
    flat = flatten_outputs(outputs)
    with torch.autocast(device_type=flat["sm/frames"].device.type, enabled=False):
        out, batch = _fp32(flat), _fp32(batch)
        parts = _fape_parts(out, batch, cfg)
        terms = {"fape": parts["fape"]}
        for name, fn in _terms(out, batch, cfg).items():
            if not cfg.report_zero_weighted and not getattr(cfg.weights, name):
                continue
            if name == "tm" and "tm_logits" not in out:
                if cfg.weights.tm:
                    raise KeyError(f"tm_logits: the TM loss has weight {cfg.weights.tm} but the outputs lack it")
                continue
            terms[name] = fn()
        total = parts["fape"].new_zeros(())
        for name, value in terms.items():
            weight = getattr(cfg.weights, name)
            if weight and torch.isfinite(value):
                total = total + weight * value
        seq_len = batch["seq_length"].float().mean()
        crop_len = batch["aatype"].shape[-1]
        report = {k: v.detach() for k, v in {**terms, **parts}.items()}
        report["unscaled_loss"] = total.detach()
        loss = total * torch.sqrt(torch.clamp(seq_len, max=crop_len))
    return loss, report
