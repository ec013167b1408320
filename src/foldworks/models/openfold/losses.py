"""Losses of the ``evoformer`` family (AF2 supplement 1.9, Alg 26–28), all computed in fp32.

Every function takes fp32 tensors (the model's :meth:`loss` casts and disables autocast) and
returns per-batch scalars. Units: Å; FAPE length scale Z = 10 Å, clamp 10 Å (supp. 1.9.2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from foldworks.models.common import consecutive_ca_error, consecutive_pairs, distance_bins, lddt_ca
from foldworks.models.openfold import all_atom
from foldworks.models.openfold.heads import DISTOGRAM_BINS, PAE_BINS
from foldworks.models.openfold.rigid import Frames, rigid_from_3_points


def fape(pred_frames: Frames, true_frames: Frames, frames_mask: Tensor, pred_pos: Tensor, true_pos: Tensor,
         pos_mask: Tensor, clamp: float | None = 10.0, length_scale: float = 10.0, eps: float = 1e-4,
         pair_mask: Tensor | None = None) -> Tensor:
    """Alg 28 FAPE: mean over (frame i, atom j) of ``min(clamp, |T_i⁻¹ x_j − T_i^true⁻¹ x_j^true|) / Z``.

    Frames ``[B, F]`` (rot ``[B, F, 3, 3]``), positions ``[B, A, 3]`` (Å), masks ``[B, F]``/``[B, A]``;
    ``pair_mask [B, F, A]`` (optional) restricts the (frame, atom) pairs scored.
    Averaged per chain over its valid pairs, then over the batch. Invariant to a global rigid
    motion of either structure; not invariant to reflection (the frames are right-handed).
    """
    local_pred, local_true = _all_to_local(pred_frames, pred_pos), _all_to_local(true_frames, true_pos)
    err = torch.sqrt(((local_pred - local_true) ** 2).sum(-1) + eps)  # [B, F, A]
    if clamp is not None:
        err = err.clamp(max=clamp)
    w = frames_mask.float()[:, :, None] * pos_mask.float()[:, None, :]
    if pair_mask is not None:
        w = w * pair_mask.float()
    per_chain = (err * w).sum((1, 2)) / length_scale / (w.sum((1, 2)) + eps)
    return per_chain.mean()


#: Groups that can have a reference frame (pre-omega and phi never do, residue_constants.GROUP_EXISTS).
_FRAME_GROUPS = [0, 3, 4, 5, 6, 7]


def _all_to_local(frames: Frames, pos: Tensor) -> Tensor:
    """Every position ``[B, A, 3]`` in every frame ``[B, F]`` → ``[B, F, A, 3]`` (``Rᵀ(x − t)``, as batched matmuls)."""
    rot, trans = frames
    return torch.einsum("bfji,baj->bfai", rot, pos) - torch.einsum("bfji,bfj->bfi", rot, trans)[:, :, None]


def rename_symmetric(pred14: Tensor, true14: Tensor, alt14: Tensor, mask14: Tensor, ambiguous: Tensor) -> Tensor:
    """Alg 26: per residue, whether the renamed reference (``alt14``) fits the prediction better.

    Compares distance errors between each ambiguous atom and every non-ambiguous atom of the chain
    (``[B, L·14]`` pairs; Å) for the reference and its renamed alternative. Returns bool ``[B, L]``.
    """
    b, n = pred14.shape[:2]
    amb_slots = slice(6, 10)  # every ambiguous atom sits in atom14 slots 6..9 (residue_constants)
    flat = lambda x: x.reshape(b, -1, 3)  # noqa: E731
    rows = lambda x: flat(x[:, :, amb_slots])  # noqa: E731
    d_pred = torch.cdist(rows(pred14), flat(pred14))  # [B, L·4, L·14]
    d_true, d_alt = torch.cdist(rows(true14), flat(true14)), torch.cdist(rows(alt14), flat(alt14))
    amb, m = ambiguous.reshape(b, n * 14), mask14.reshape(b, n * 14)
    amb_rows = (ambiguous & mask14)[:, :, amb_slots].reshape(b, n * 4)
    pairs = amb_rows[:, :, None] & (~amb & m)[:, None, :]
    err_true = ((d_pred - d_true).abs() * pairs).sum(-1).view(b, n, 4).sum(-1)
    err_alt = ((d_pred - d_alt).abs() * pairs).sum(-1).view(b, n, 4).sum(-1)
    return err_alt < err_true


def sidechain_fape(out: dict[str, Tensor], batch: dict[str, Tensor], ref: dict[str, Tensor]) -> Tensor:
    """All-atom FAPE of the final layer (Alg 20 line 28): all rigid-group frames × all atom14 atoms,
    against the reference with symmetric atoms renamed where that fits better (Alg 26)."""
    aatype = batch["aatype"]
    pred14 = out["atom14"].float()
    use_alt = rename_symmetric(pred14.detach(), ref["atom14"], ref["alt14"], ref["mask14"] & ref["alt_mask14"],
                               ref["ambiguous14"])
    true14 = torch.where(use_alt[..., None, None], ref["alt14"], ref["atom14"])
    mask14 = torch.where(use_alt[..., None], ref["alt_mask14"], ref["mask14"])
    rot = torch.where(use_alt[..., None, None, None], ref["alt_group_rot"], ref["group_rot"])
    b, n = aatype.shape
    g = _FRAME_GROUPS
    nf = n * len(g)
    pred_frames = (out["group_rot"][:, :, g].float().reshape(b, nf, 3, 3),
                   out["group_trans"][:, :, g].float().reshape(b, nf, 3))
    true_frames = (rot[:, :, g].reshape(b, nf, 3, 3), ref["group_trans"][:, :, g].reshape(b, nf, 3))
    return fape(pred_frames, true_frames, ref["group_mask"][:, :, g].reshape(b, nf), pred14.reshape(b, n * 14, 3),
                true14.reshape(b, n * 14, 3), mask14.reshape(b, n * 14))


def backbone_fape(out: dict[str, Tensor], ref: dict[str, Tensor], clamp: float | None = 10.0) -> Tensor:
    """Backbone FAPE (frames × Cα, clamp 10 Å or ``None``) averaged over the structure-module layers
    (Alg 20 line 17)."""
    layers = out["sm_frames_rot"].shape[1]
    losses = [fape((out["sm_frames_rot"][:, i].float(), out["sm_frames_trans"][:, i].float()), ref["bb_frames"],
                   ref["bb_mask"], out["sm_frames_trans"][:, i].float(), ref["bb_frames"][1], ref["bb_mask"], clamp)
              for i in range(layers)]
    return torch.stack(losses).mean()


def torsion_loss(out: dict[str, Tensor], ref: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Alg 27: ``(L_torsion, L_anglenorm)`` averaged over layers.

    ``L_torsion``: squared chord distance of the normalised (sin, cos) to the reference or, for
    π-periodic chis, to the nearer of reference and reference + π. ``L_anglenorm``: mean
    ``|‖α_unnormalised‖ − 1|`` over all residues and angles.
    """
    pred = out["sm_angles"].float()  # [B, S, L, 7, 2]
    true, alt = ref["torsions"][:, None], ref["alt_torsions"][:, None]
    mask = ref["torsion_mask"][:, None].float().expand(pred.shape[:-1])
    d = torch.minimum(((pred - true) ** 2).sum(-1), ((pred - alt) ** 2).sum(-1))
    l_torsion = (d * mask).sum() / mask.sum().clamp(min=1.0)
    norm = torch.sqrt((out["sm_unnormalized_angles"].float() ** 2).sum(-1) + 1e-8)
    res = ref["mask"].float()[:, None, :, None].expand(norm.shape)
    l_norm = ((norm - 1.0).abs() * res).sum() / res.sum().clamp(min=1.0)
    return l_torsion, l_norm


def distogram_loss(logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """Supp. 1.9.8: CE of the 64-bin distogram against reference pseudo-Cβ distances (resolved pairs)."""
    cb = all_atom.pseudo_beta(batch["all_atom_positions"].float(), batch["aatype"])
    cb_mask = all_atom.pseudo_beta_mask(batch["all_atom_mask"], batch["aatype"])
    d = torch.cdist(cb, cb)
    target = distance_bins(d, *DISTOGRAM_BINS)
    pairs = (cb_mask[:, :, None] & cb_mask[:, None, :]).float()
    ce = F.cross_entropy(logits.float().permute(0, 3, 1, 2), target, reduction="none")
    return (ce * pairs).sum() / pairs.sum().clamp(min=1.0)


def masked_msa_loss(logits: Tensor, true_msa: Tensor, bert_mask: Tensor) -> Tensor:
    """Supp. 1.9.9: CE of the 23-class MSA head at the BERT-masked positions (0 if none masked)."""
    ce = F.cross_entropy(logits.float().permute(0, 3, 1, 2), true_msa.long(), reduction="none")
    w = bert_mask.float()
    return (ce * w).sum() / w.sum().clamp(min=1.0)


def plddt_loss(logits: Tensor, pred_ca: Tensor, batch: dict[str, Tensor], n_bins: int) -> Tensor:
    """Alg 29 target: per-residue lDDT-Cα of the (stop-gradient) final Cα, binned; CE over resolved residues."""
    resolved = batch["residue_mask"]
    _, per_res = lddt_ca(pred_ca.detach().float(), batch["ca_coords"].float(), resolved)
    target = (per_res * n_bins).long().clamp(max=n_bins - 1)
    ce = F.cross_entropy(logits.float().permute(0, 2, 1), target, reduction="none")
    w = resolved.float()
    return (ce * w).sum() / w.sum().clamp(min=1.0)


def pae_loss(logits: Tensor, out: dict[str, Tensor], ref: dict[str, Tensor]) -> Tensor:
    """Supp. 1.9.7: CE of the aligned error ``|T_i⁻¹ x_j − T_i^true⁻¹ x_j^true|`` (Cα, final frames,
    stop-gradient) in 64 bins of 0.5 Å, over pairs of residues with reference backbone frames."""
    rot, trans = out["sm_frames_rot"][:, -1].detach().float(), out["sm_frames_trans"][:, -1].detach().float()
    local_pred = _all_to_local((rot, trans), trans)
    local_true = _all_to_local(ref["bb_frames"], ref["bb_frames"][1])
    err = torch.sqrt(((local_pred - local_true) ** 2).sum(-1) + 1e-8)
    n, first, last = PAE_BINS
    target = ((err - first) / ((last - first) / (n - 2))).long().clamp(0, n - 1)
    pairs = (ref["bb_mask"][:, :, None] & ref["bb_mask"][:, None, :]).float()
    ce = F.cross_entropy(logits.float().permute(0, 3, 1, 2), target, reduction="none")
    return (ce * pairs).sum() / pairs.sum().clamp(min=1.0)


def reference_geometry(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """All ground-truth quantities the losses need, derived from the batch's atom37 reference (fp32)."""
    x37, m37, aatype = batch["all_atom_positions"].float(), batch["all_atom_mask"], batch["aatype"]
    m37 = m37 & batch["mask"][..., None]
    bb_frames, bb_mask = all_atom.backbone_frames(x37, m37)
    groups, alt_groups, group_mask = all_atom.reference_group_frames(x37, m37, aatype)
    atom14, mask14 = all_atom.atom37_to_atom14(x37, m37, aatype)
    alt14, alt_mask14, ambiguous14 = all_atom.renamed_alternative(atom14, mask14, aatype)
    torsions, alt_torsions, torsion_mask = all_atom.torsion_angles(x37, m37, aatype, batch["residue_index"])
    return {"bb_frames": bb_frames, "bb_mask": bb_mask, "group_rot": groups[0], "group_trans": groups[1],
            "alt_group_rot": alt_groups[0], "group_mask": group_mask, "atom14": atom14, "mask14": mask14,
            "alt14": alt14, "alt_mask14": alt_mask14, "ambiguous14": ambiguous14, "torsions": torsions,
            "alt_torsions": alt_torsions, "torsion_mask": torsion_mask, "mask": batch["mask"]}


def ca_bond_loss(pred_ca: Tensor, batch: dict[str, Tensor], length_scale: float = 10.0) -> Tensor:
    """:func:`~foldworks.models.common.consecutive_ca_error` of ``pred_ca [B, L, 3]`` (Å) against the
    batch's Cα, divided by ``length_scale`` (Å / 10 like FAPE). 0 when a batch has no such pair."""
    return consecutive_ca_error(pred_ca, batch["ca_coords"].float(), batch["residue_mask"],
                                batch["residue_index"]) / length_scale


def ca_pseudo_frames(ca: Tensor, residue_mask: Tensor, residue_index: Tensor) -> tuple[Frames, Tensor]:
    """Frame of residue i from ``(Cα_{i−1}, Cα_i, Cα_{i+1})`` by Alg 21 ``rigidFrom3Points`` (origin Cα_i,
    e1 towards Cα_{i+1}, e2 in the plane towards Cα_{i−1}); right-handed, so it sees chirality.

    ``ca [B, L, 3]`` Å. Returns frames ``[B, L]`` and their mask ``[B, L]``: residue i needs resolved
    neighbours on both sides whose ``residue_index`` steps by 1 (no frame at chain ends, breaks or
    crop edges; first and last residue are padded with their own Cα and masked out).
    """
    prev_ca = torch.cat([ca[:, :1], ca[:, :-1]], 1)
    next_ca = torch.cat([ca[:, 1:], ca[:, -1:]], 1)
    bonded = consecutive_pairs(residue_mask, residue_index)  # [B, L−1]
    no = torch.zeros_like(bonded[:, :1])
    has_prev, has_next = torch.cat([no, bonded], 1), torch.cat([bonded, no], 1)
    return rigid_from_3_points(prev_ca, ca, next_ca), has_prev & has_next & residue_mask


def ca_fape_loss(out: dict[str, Tensor], batch: dict[str, Tensor], clamp: float = 10.0, window: int = 0) -> Tensor:
    """FAPE (Alg 28, clamp 10 Å, Z = 10 Å) of every resolved Cα in every Cα pseudo-frame
    (:func:`ca_pseudo_frames`, for prediction and reference alike), averaged over the structure-module
    layers like the backbone FAPE (Alg 20 line 17; each layer's frame translations are its Cα).
    ``window`` > 0 scores only the Cα within that many residues (``residue_index``) of the frame's
    residue: a local term (an α-helix's i → i+4 turn fits in a window of 4).

    Not in AF2. It needs Cα only, so it also trains chains without backbone frames; like FAPE it is
    not reflection-invariant. ``out["sm_frames_trans"] [B, S, L, 3]`` Å → scalar (per-chain mean over
    frames × atoms, then batch mean); chains without any pseudo-frame contribute 0.
    """
    true_ca, resolved, idx = batch["ca_coords"].float(), batch["residue_mask"], batch["residue_index"]
    true_frames, fmask = ca_pseudo_frames(true_ca, resolved, idx)
    near = (idx[:, :, None] - idx[:, None, :]).abs() <= window if window > 0 else None
    layers = out["sm_frames_trans"].shape[1]
    values = []
    for i in range(layers):
        pred_ca = out["sm_frames_trans"][:, i].float()
        pred_frames, _ = ca_pseudo_frames(pred_ca, resolved, idx)
        values.append(fape(pred_frames, true_frames, fmask, pred_ca, true_ca, resolved, clamp, pair_mask=near))
    return torch.stack(values).mean()
