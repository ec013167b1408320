"""Rigid transforms as ``(rot [..., 3, 3], trans [..., 3])`` pairs (Å), AF2 supp. 1.1 conventions.

A frame maps local coordinates to global ones: ``x_global = rot @ x_local + trans``.
"""

from __future__ import annotations

import torch
from torch import Tensor

Frames = tuple[Tensor, Tensor]


def quat_to_rot(quat: Tensor) -> Tensor:
    """Rotation matrices ``[..., 3, 3]`` from quaternions ``[..., 4]`` (w, x, y, z), not renormalised."""
    w, x, y, z = quat.unbind(-1)
    rows = [
        [w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
    ]
    return torch.stack([torch.stack(r, -1) for r in rows], -2)


def from_tensor_7(t: Tensor) -> Frames:
    """Frames from ``[..., 7]`` = quaternion (w, x, y, z) + translation (Å), the structure module's layout."""
    return quat_to_rot(t[..., :4]), t[..., 4:]


def from_tensor_4x4(m: Tensor) -> Frames:
    """Frames from homogeneous matrices ``[..., 4, 4]``."""
    return m[..., :3, :3], m[..., :3, 3]


def to_tensor_4x4(frames: Frames) -> Tensor:
    """Homogeneous matrices ``[..., 4, 4]`` of ``frames``."""
    rot, trans = frames
    m = rot.new_zeros(rot.shape[:-2] + (4, 4))
    m[..., :3, :3] = rot
    m[..., :3, 3] = trans
    m[..., 3, 3] = 1.0
    return m


def apply(frames: Frames, x: Tensor) -> Tensor:
    """``rot @ x + trans`` for points ``x [..., 3]`` broadcast against the frames."""
    rot, trans = frames
    return torch.einsum("...ij,...j->...i", rot, x) + trans


def invert_apply(frames: Frames, x: Tensor) -> Tensor:
    """``rot^T (x - trans)``: global points ``x [..., 3]`` into the frames' local coordinates."""
    rot, trans = frames
    return torch.einsum("...ji,...j->...i", rot, x - trans)


def compose_rot(frames: Frames, rot: Tensor) -> Frames:
    """``frames ∘ (rot, 0)``: a local rotation applied before the frame."""
    return frames[0] @ rot, frames[1]


def from_3_points(neg_x: Tensor, origin: Tensor, xy: Tensor, eps: float = 1e-8) -> Frames:
    """Gram–Schmidt frame (AF2 Alg 21): x axis from ``neg_x`` towards ``origin``, ``xy`` in the xy plane.

    Args: three point sets ``[..., 3]`` (Å). ``eps`` is added under the square roots of the norms.
    Returns: ``(rot [..., 3, 3], trans = origin)``; the rotation's columns are the x, y, z axes.
    """
    e0 = origin - neg_x
    e1 = xy - origin
    e0 = e0 / torch.sqrt((e0 * e0).sum(-1, keepdim=True) + eps)
    e1 = e1 - e0 * (e0 * e1).sum(-1, keepdim=True)
    e1 = e1 / torch.sqrt((e1 * e1).sum(-1, keepdim=True) + eps)
    e2 = torch.cross(e0, e1, dim=-1)
    return torch.stack([e0, e1, e2], -1), origin


def random_rigid(generator: torch.Generator | None = None) -> Frames:
    """A uniformly random rotation and a translation drawn from N(0, 10 Å), for invariance tests."""
    q = torch.randn(4, generator=generator, dtype=torch.float64)
    rot = quat_to_rot(q / q.norm()).float()
    return rot, 10.0 * torch.randn(3, generator=generator)
