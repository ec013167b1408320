"""Rigid-body frames as ``(rot [..., 3, 3], trans [..., 3])`` tuples: ``x_global = rot @ x_local + trans`` (Å).

AF2 supplement 1.1 (frames ``T = (R, t)``), Alg 21 (``rigidFrom3Points``, Gram–Schmidt),
Alg 23 (quaternion → rotation). All functions broadcast over leading dimensions.
"""

from __future__ import annotations

import torch
from torch import Tensor

Frames = tuple[Tensor, Tensor]


def identity(shape: tuple[int, ...], device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> Frames:
    """Identity frames of leading ``shape``."""
    rot = torch.eye(3, device=device, dtype=dtype).expand(*shape, 3, 3).clone()
    return rot, torch.zeros(*shape, 3, device=device, dtype=dtype)


def quat_to_rot(quat: Tensor) -> Tensor:
    """Unit quaternion ``[..., 4]`` (a, b, c, d; normalised here) → rotation ``[..., 3, 3]`` (Alg 23 line 3)."""
    q = quat / torch.linalg.vector_norm(quat, dim=-1, keepdim=True).clamp(min=1e-12)
    a, b, c, d = q.unbind(-1)
    rows = [
        a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c),
        2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b),
        2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d,
    ]
    return torch.stack(rows, -1).reshape(*quat.shape[:-1], 3, 3)


def compose(a: Frames, b: Frames) -> Frames:
    """``a ∘ b``: apply ``b`` then ``a``."""
    return a[0] @ b[0], (a[0] @ b[1][..., None])[..., 0] + a[1]


def invert(f: Frames) -> Frames:
    """Inverse frame ``(Rᵀ, −Rᵀ t)``."""
    rot_t = f[0].transpose(-1, -2)
    return rot_t, -(rot_t @ f[1][..., None])[..., 0]


def apply(f: Frames, x: Tensor) -> Tensor:
    """``R x + t`` for points ``x [..., 3]`` broadcast against the frames."""
    return (f[0] * x[..., None, :]).sum(-1) + f[1]


def invert_apply(f: Frames, x: Tensor) -> Tensor:
    """``Rᵀ (x − t)``: global points into the local frame."""
    return (f[0] * (x - f[1])[..., :, None]).sum(-2)


def rigid_from_3_points(x1: Tensor, x2: Tensor, x3: Tensor, eps: float = 1e-8) -> Frames:
    """Alg 21: frame with origin ``x2``, e1 along ``x3 − x2``, e2 in the plane towards ``x1``.

    For a residue ``(x1, x2, x3) = (N, CA, C)`` this is the AF2 backbone frame. Inputs ``[..., 3]`` Å.
    """
    v1, v2 = x3 - x2, x1 - x2
    e1 = v1 / torch.sqrt((v1 ** 2).sum(-1, keepdim=True) + eps)
    u2 = v2 - e1 * (e1 * v2).sum(-1, keepdim=True)
    e2 = u2 / torch.sqrt((u2 ** 2).sum(-1, keepdim=True) + eps)
    e3 = torch.cross(e1, e2, dim=-1)
    return torch.stack([e1, e2, e3], dim=-1), x2


def frame_from_neg_x(neg_x: Tensor, origin: Tensor, xy: Tensor, eps: float = 1e-8) -> Frames:
    """Frame at ``origin`` with e1 along ``origin − neg_x`` and e2 in the plane towards ``xy``.

    Used for the psi and chi group frames (the group's rotation axis is e1, supp. 1.8).
    """
    return rigid_from_3_points(xy, origin, 2 * origin - neg_x, eps)


def rot_x(sin: Tensor, cos: Tensor) -> Tensor:
    """``makeRotX`` of Alg 24: rotation about x by the angle with ``(sin, cos)`` ``[...]`` → ``[..., 3, 3]``."""
    one, zero = torch.ones_like(sin), torch.zeros_like(sin)
    rows = [one, zero, zero, zero, cos, -sin, zero, sin, cos]
    return torch.stack(rows, -1).reshape(*sin.shape, 3, 3)


def random_rotation(generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """A random proper rotation ``[3, 3]`` (from a random quaternion)."""
    return quat_to_rot(torch.randn(4, generator=generator, dtype=dtype))
