"""The AlphaFold2 structure module (Alg 20): invariant point attention (Alg 22), transition,
backbone update (Alg 23), angle ResNet and all-atom construction (Alg 24).

Backbone frames are quaternion + translation. Inside the module translations are in nm (AF2's
``position_scale`` = 10 converts to Å for the outputs and the side chains). Shapes: ``N`` residues,
single ``s [*, N, c_s]``, pair ``z [*, N, N, c_z]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

import torch
from torch import Tensor, nn

from foldworks.models.af2.primitives import Linear
from foldworks.models.af2.all_atom import frames_to_atom14, torsion_angles_to_frames
from foldworks.models.af2.rigid import quat_to_rot

if TYPE_CHECKING:
    from foldworks.models.af2.config import AF2Config



def _apply(rot: Tensor, trans: Tensor, x: Tensor) -> Tensor:
    """``R x + t``; ``rot [*, 3, 3]``, ``trans [*, 3]``, ``x [*, 3]``."""
    return (rot @ x[..., None])[..., 0] + trans


def _invert_apply(rot: Tensor, trans: Tensor, x: Tensor) -> Tensor:
    """``Rᵀ (x − t)``."""
    return (rot.transpose(-1, -2) @ (x - trans)[..., None])[..., 0]


def quat_update(quat: Tensor, trans: Tensor, update: Tensor) -> tuple[Tensor, Tensor]:
    """Alg 23: compose frames with the update ``(b, c, d, t_x, t_y, t_z) [*, 6]``.

    The new quaternion is ``q · (1, b, c, d)`` (normalised); the translation update is rotated by
    the old rotation. Returns ``(quat [*, 4], trans [*, 3])``.
    """
    a, b, c, d = quat.unbind(-1)
    x, y, z = update[..., 0], update[..., 1], update[..., 2]
    dq = torch.stack([-b * x - c * y - d * z, a * x + c * z - d * y,
                      a * y - b * z + d * x, a * z + b * y - c * x], -1)
    new_quat = quat + dq
    new_quat = new_quat / torch.linalg.vector_norm(new_quat, dim=-1, keepdim=True)
    return new_quat, trans + _apply(quat_to_rot(quat), torch.zeros_like(trans), update[..., 3:])


class InvariantPointAttention(nn.Module):
    """Alg 22. Point projections are coordinate-major (x block, y block, z block); the output concat
    order is (scalar, point x, y, z, point norms, pair)."""

    def __init__(self, c_s: int, c_z: int, c_hidden: int, num_heads: int, num_qk_points: int,
                 num_v_points: int, eps: float = 1e-8) -> None:
        super().__init__()
        self.h, self.c, self.pq, self.pv, self.eps = num_heads, c_hidden, num_qk_points, num_v_points, eps
        self.linear_q = Linear(c_s, num_heads * c_hidden)
        self.linear_kv = Linear(c_s, 2 * num_heads * c_hidden)
        self.linear_q_points = _PointProjection(c_s, num_heads * num_qk_points)
        self.linear_kv_points = _PointProjection(c_s, num_heads * (num_qk_points + num_v_points))
        self.linear_b = Linear(c_z, num_heads)
        self.head_weights = nn.Parameter(torch.full((num_heads,), math.log(math.e - 1.0)))
        self.linear_out = Linear(num_heads * (c_z + c_hidden + 4 * num_v_points), c_s, init="final")

    def forward(self, s: Tensor, z: Tensor, rot: Tensor, trans: Tensor, mask: Tensor) -> Tensor:
        h, c, pq, pv = self.h, self.c, self.pq, self.pv
        q = self.linear_q(s).unflatten(-1, (h, c))
        k, v = self.linear_kv(s).unflatten(-1, (h, 2 * c)).split(c, dim=-1)
        frames = (rot[..., None, :, :], trans[..., None, :])
        q_pts = _apply(*frames, self.linear_q_points(s)).unflatten(-2, (h, pq))  # [*, N, H, Pq, 3]
        kv_pts = _apply(*frames, self.linear_kv_points(s)).unflatten(-2, (h, pq + pv))
        k_pts, v_pts = kv_pts.split([pq, pv], dim=-2)
        scalar = torch.einsum("...ihc,...jhc->...hij", q, k) * math.sqrt(1.0 / (3 * c))
        pair = self.linear_b(z).movedim(-1, -3) * math.sqrt(1.0 / 3)
        d2 = ((q_pts[..., :, None, :, :, :] - k_pts[..., None, :, :, :, :]) ** 2).sum(-1).sum(-1)  # [*, N, N, H]
        point_w = nn.functional.softplus(self.head_weights) * math.sqrt(1.0 / (3 * pq * 9.0 / 2))
        point = -0.5 * d2.movedim(-1, -3) * point_w[:, None, None]
        mask_2d = mask[..., :, None] * mask[..., None, :]
        logits = scalar + point + pair - 1e5 * (1.0 - mask_2d)[..., None, :, :]
        a = torch.softmax(logits, dim=-1)  # [*, H, N, N]
        o = torch.einsum("...hij,...jhc->...ihc", a, v).flatten(-2)
        o_pt = torch.einsum("...hij,...jhpx->...ihpx", a, v_pts)  # [*, N, H, Pv, 3]
        o_pt = _invert_apply(rot[..., None, None, :, :], trans[..., None, None, :], o_pt).flatten(-3, -2)
        o_pt_norm = torch.sqrt(self.eps + (o_pt ** 2).sum(-1))
        o_pair = torch.einsum("...hij,...ijc->...ihc", a, z).flatten(-2)
        return self.linear_out(torch.cat([o, *o_pt.unbind(-1), o_pt_norm, o_pair], -1))


class _PointProjection(nn.Module):
    """Linear map to ``num_points`` 3-D points, coordinate-major: ``[*, 3·P] → [*, P, 3]``."""

    def __init__(self, c_in: int, num_points: int) -> None:
        super().__init__()
        self.linear = Linear(c_in, 3 * num_points)

    def forward(self, s: Tensor) -> Tensor:
        return torch.stack(self.linear(s).chunk(3, dim=-1), -1)


class _TransitionLayer(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.linear_1 = Linear(c, c, init="relu")
        self.linear_2 = Linear(c, c, init="relu")
        self.linear_3 = Linear(c, c, init="final")

    def forward(self, s: Tensor) -> Tensor:
        return s + self.linear_3(torch.relu(self.linear_2(torch.relu(self.linear_1(s)))))


class StructureTransition(nn.Module):
    """Alg 20 lines 8–9: residual three-layer MLP(s), dropout, layer norm."""

    def __init__(self, c: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_TransitionLayer(c) for _ in range(num_layers))
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(c)

    def forward(self, s: Tensor) -> Tensor:
        for layer in self.layers:
            s = layer(s)
        return self.layer_norm(self.dropout(s))


class BackboneUpdate(nn.Module):
    """Alg 23 line 1: ``s → (b, c, d, t)``."""

    def __init__(self, c_s: int) -> None:
        super().__init__()
        self.linear = Linear(c_s, 6, init="final")

    def forward(self, s: Tensor) -> Tensor:
        return self.linear(s)


class _ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.linear_1 = Linear(c, c, init="relu")
        self.linear_2 = Linear(c, c, init="final")

    def forward(self, a: Tensor) -> Tensor:
        return a + self.linear_2(torch.relu(self.linear_1(torch.relu(a))))


class AngleResnet(nn.Module):
    """Alg 20 lines 11–14: torsion angles from the current and the initial single representation.
    Returns ``(unnormalised [*, N, 7, 2], normalised (sin, cos) [*, N, 7, 2])``."""

    def __init__(self, c_s: int, c_hidden: int, num_blocks: int, num_angles: int = 7, eps: float = 1e-12) -> None:
        super().__init__()
        self.eps, self.num_angles = eps, num_angles
        self.linear_in = Linear(c_s, c_hidden)
        self.linear_initial = Linear(c_s, c_hidden)
        self.layers = nn.ModuleList(_ResBlock(c_hidden) for _ in range(num_blocks))
        self.linear_out = Linear(c_hidden, 2 * num_angles)

    def forward(self, s: Tensor, s_initial: Tensor) -> tuple[Tensor, Tensor]:
        a = self.linear_in(torch.relu(s)) + self.linear_initial(torch.relu(s_initial))
        for layer in self.layers:
            a = layer(a)
        raw = self.linear_out(torch.relu(a)).unflatten(-1, (self.num_angles, 2))
        norm = torch.sqrt(torch.clamp((raw ** 2).sum(-1, keepdim=True), min=self.eps))
        return raw, raw / norm


class StructureModule(nn.Module):
    """Alg 20 with shared weights over ``num_layers`` iterations.

    Returns per-layer ``frames`` (quaternion w,x,y,z + translation Å ``[L, *, N, 7]``), ``angles``,
    ``unnormalized_angles`` ``[L, *, N, 7, 2]``, ``positions`` (atom14 Å ``[L, *, N, 14, 3]``), the
    final single ``single [*, N, c_s]`` and the last layer's group frames (rotation, translation Å).
    """

    def __init__(self, cfg: "AF2Config") -> None:
        super().__init__()
        self.cfg = cfg
        self.layer_norm_s = nn.LayerNorm(cfg.c_s)
        self.layer_norm_z = nn.LayerNorm(cfg.c_z)
        self.linear_in = Linear(cfg.c_s, cfg.c_s)
        self.ipa = InvariantPointAttention(cfg.c_s, cfg.c_z, cfg.c_ipa, cfg.ipa_heads, cfg.ipa_qk_points,
                                           cfg.ipa_v_points)
        self.ipa_dropout = nn.Dropout(cfg.structure_dropout)
        self.layer_norm_ipa = nn.LayerNorm(cfg.c_s)
        self.transition = StructureTransition(cfg.c_s, cfg.structure_transition_layers, cfg.structure_dropout)
        self.bb_update = BackboneUpdate(cfg.c_s)
        self.angle_resnet = AngleResnet(cfg.c_s, cfg.c_resnet, cfg.num_resnet_blocks)

    def forward(self, s: Tensor, z: Tensor, aatype: Tensor, mask: Tensor) -> dict[str, Tensor]:
        scale = self.cfg.position_scale
        s_initial = self.layer_norm_s(s)
        z = self.layer_norm_z(z)
        s = self.linear_in(s_initial)
        quat = torch.zeros(*s.shape[:-1], 4, dtype=s.dtype, device=s.device)
        quat[..., 0] = 1.0
        trans = torch.zeros(*s.shape[:-1], 3, dtype=s.dtype, device=s.device)
        out: dict[str, list[Tensor]] = {"frames": [], "angles": [], "unnormalized_angles": [], "positions": []}
        for _ in range(self.cfg.num_structure_layers):
            s = s + self.ipa(s, z, quat_to_rot(quat), trans, mask)
            s = self.layer_norm_ipa(self.ipa_dropout(s))
            s = self.transition(s)
            quat, trans = quat_update(quat, trans, self.bb_update(s))
            raw, angles = self.angle_resnet(s, s_initial)
            rot = quat_to_rot(quat)
            groups = torsion_angles_to_frames((rot, trans * scale), angles, aatype.long())
            atom14 = frames_to_atom14(groups, aatype.long()) * (aatype != 20).to(s.dtype)[..., None, None]
            for key, val in (("frames", torch.cat([quat, trans * scale], -1)), ("angles", angles),
                             ("unnormalized_angles", raw), ("positions", atom14)):
                out[key].append(val)
            quat = quat.detach()  # AF2 stops the rotation gradient between layers
        result = {k: torch.stack(v) for k, v in out.items()}
        result["single"] = s
        result["group_frames_rot"], result["group_frames_trans"] = groups
        return result
