"""Frame-aligned point error (AF2 Alg 28) and the side-chain symmetric renaming (Alg 26).

Normalisation follows OpenFold's ``compute_fape``: the masked sum over positions is divided by
``eps + Σ frames_mask`` and then by ``eps + Σ positions_mask`` (eps 1e-4, also under the root).
"""

from __future__ import annotations

import torch
from torch import Tensor

from foldworks.models.af2.loss.geometry import Frames, from_tensor_4x4, from_tensor_7, invert_apply


def compute_fape(pred_frames: Frames, true_frames: Frames, frames_mask: Tensor, pred_pos: Tensor,
                 true_pos: Tensor, pos_mask: Tensor, length_scale: float, clamp: float | None = 10.0,
                 eps: float = 1e-4) -> Tensor:
    """FAPE over all (frame, point) pairs (AF2 Alg 28).

    Args: frames ``(rot [..., F, 3, 3], trans [..., F, 3])``, ``frames_mask [..., F]``; points
    ``[..., P, 3]`` (Å) and ``pos_mask [..., P]``; ``length_scale`` Å (Z in Alg 28); ``clamp`` Å or
    None for unclamped.
    Returns: ``[...]`` dimensionless loss.
    """
    def local(frames: Frames, pos: Tensor) -> Tensor:
        rot, trans = frames
        return invert_apply((rot[..., :, None, :, :], trans[..., :, None, :]), pos[..., None, :, :])

    diff = local(pred_frames, pred_pos) - local(true_frames, true_pos)  # [..., F, P, 3]
    err = torch.sqrt((diff * diff).sum(-1) + eps)
    if clamp is not None:
        err = err.clamp(0.0, clamp)
    err = err / length_scale * frames_mask[..., :, None] * pos_mask[..., None, :]
    err = err.sum(-1) / (eps + frames_mask.sum(-1))[..., None]
    return err.sum(-1) / (eps + pos_mask.sum(-1))


def backbone_fape_per_layer(traj: Tensor, backbone_rigid_tensor: Tensor, backbone_rigid_mask: Tensor,
                            clamp: float | None, loss_unit_distance: float = 10.0, eps: float = 1e-4) -> Tensor:
    """Backbone FAPE of every structure-module layer (AF2 supp. 1.9.2, Alg 20).

    Args: ``traj [L, ..., N, 7]`` (quaternion + translation, Å), ``backbone_rigid_tensor [..., N, 4, 4]``,
    ``backbone_rigid_mask [..., N]``. Points are the frames' origins (Cα).
    Returns: ``[L, ...]``.
    """
    pred = from_tensor_7(traj)
    true = from_tensor_4x4(backbone_rigid_tensor)
    return compute_fape(pred, true, backbone_rigid_mask, pred[1], true[1], backbone_rigid_mask,
                        loss_unit_distance, clamp, eps)


def backbone_fape(traj: Tensor, backbone_rigid_tensor: Tensor, backbone_rigid_mask: Tensor,
                  use_clamped_fape: Tensor | float | None, clamp_distance: float = 10.0,
                  loss_unit_distance: float = 10.0, eps: float = 1e-4) -> Tensor:
    """Backbone FAPE averaged over layers (and batch): ``u · clamped + (1 − u) · unclamped``.

    ``use_clamped_fape`` is the per-sample draw (1 clamped / 0 unclamped, ``[...]`` or scalar; AF2
    trains with p = 0.9 clamped); None means clamped only. Returns a scalar.
    """
    clamped = backbone_fape_per_layer(traj, backbone_rigid_tensor, backbone_rigid_mask, clamp_distance,
                                      loss_unit_distance, eps)
    if use_clamped_fape is not None:
        unclamped = backbone_fape_per_layer(traj, backbone_rigid_tensor, backbone_rigid_mask, None,
                                            loss_unit_distance, eps)
        clamped = clamped * use_clamped_fape + unclamped * (1 - use_clamped_fape)
    return clamped.mean()


def sample_use_clamped_fape(shape: tuple[int, ...] = (), p_clamped: float = 0.9,
                            generator: torch.Generator | None = None) -> Tensor:
    """Per-sample draw of the backbone FAPE variant (AF2 supp. 1.11.5): 1.0 clamped with
    probability ``p_clamped``, else 0.0 unclamped; float32 of ``shape``."""
    return (torch.rand(shape, generator=generator) < p_clamped).float()


def renamed_ground_truth(batch: dict[str, Tensor], pred_atom14: Tensor, eps: float = 1e-10) -> dict[str, Tensor]:
    """Choose per residue the truth naming closer to the prediction (AF2 Alg 26).

    Compares, for each ambiguous atom of residue i and each non-ambiguous atom of every residue j,
    the predicted inter-atom distance with the true and the renamed-true one; the naming with the
    smaller summed |Δd| wins. ``pred_atom14 [..., N, 14, 3]`` (Å); ``batch`` holds the atom14 truth
    features of :func:`supervision.atom14_ground_truth`.
    Returns ``alt_naming_is_better [..., N]``, ``renamed_atom14_gt_positions [..., N, 14, 3]`` and
    ``renamed_atom14_gt_exists [..., N, 14]``.
    """
    gt_pos, alt_pos = batch["atom14_gt_positions"], batch["atom14_alt_gt_positions"]
    exists, amb = batch["atom14_gt_exists"], batch["atom14_atom_is_ambiguous"]
    # Only ambiguous atoms of residue i enter the sum (the mask is 0 elsewhere), so the [N, N, 14, 14]
    # comparison runs on the atom14 slots that are ambiguous in some residue: the same terms,
    # ~4/14 of the work. The choice is discrete: no gradient flows through it.
    slots = amb.reshape(-1, amb.shape[-1]).any(0).nonzero().flatten()
    with torch.no_grad():
        def dists(x: Tensor) -> Tensor:
            d = x[..., :, None, slots, None, :] - x[..., None, :, None, :, :]
            return torch.sqrt(eps + (d * d).sum(-1))  # [..., N, N, A, 14]

        pred_d = dists(pred_atom14.detach())
        mask = (exists[..., :, None, slots, None] * amb[..., :, None, slots, None]
                * exists[..., None, :, None, :] * (1.0 - amb[..., None, :, None, :]))
        err = (mask * torch.sqrt(eps + (pred_d - dists(gt_pos)) ** 2)).sum((-1, -2, -3))
        alt_err = (mask * torch.sqrt(eps + (pred_d - dists(alt_pos)) ** 2)).sum((-1, -2, -3))
    alt = (alt_err < err).to(pred_atom14.dtype)
    return {
        "alt_naming_is_better": alt,
        "renamed_atom14_gt_positions": (1 - alt[..., None, None]) * gt_pos + alt[..., None, None] * alt_pos,
        "renamed_atom14_gt_exists": (1 - alt[..., None]) * exists + alt[..., None] * batch["atom14_alt_gt_exists"],
    }


def sidechain_fape(sidechain_frames: Tensor, atom14_pos: Tensor, batch: dict[str, Tensor],
                   renamed: dict[str, Tensor], clamp_distance: float = 10.0, length_scale: float = 10.0,
                   eps: float = 1e-4) -> Tensor:
    """All-atom FAPE of the last layer against the renamed truth (AF2 supp. 1.9.2, Alg 20).

    Args: ``sidechain_frames [..., N, 8, 4, 4]`` and ``atom14_pos [..., N, 14, 3]`` (last layer, Å);
    ``batch`` holds ``rigidgroups_gt_frames``, ``rigidgroups_alt_gt_frames``, ``rigidgroups_gt_exists``;
    ``renamed`` is :func:`renamed_ground_truth`'s output. Always clamped. Returns ``[...]``.
    """
    alt = renamed["alt_naming_is_better"][..., None, None, None]
    gt_frames = (1 - alt) * batch["rigidgroups_gt_frames"] + alt * batch["rigidgroups_alt_gt_frames"]
    lead = sidechain_frames.shape[:-4]
    pred = from_tensor_4x4(sidechain_frames.reshape(lead + (-1, 4, 4)))
    true = from_tensor_4x4(gt_frames.reshape(lead + (-1, 4, 4)))
    return compute_fape(pred, true, batch["rigidgroups_gt_exists"].reshape(lead + (-1,)),
                        atom14_pos.reshape(lead + (-1, 3)),
                        renamed["renamed_atom14_gt_positions"].reshape(lead + (-1, 3)),
                        renamed["renamed_atom14_gt_exists"].reshape(lead + (-1,)),
                        length_scale, clamp_distance, eps)
