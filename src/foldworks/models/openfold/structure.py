"""Structure module (AF2 supplement 1.8, Alg 20, 22, 23) with the torsion head and all-atom output.

Shapes: single ``s [B, L, c_s]``, pair ``z [B, L, L, c_z]``, mask bool ``[B, L]``; frames
``(rot [B, L, 3, 3], trans [B, L, 3])``. Internally translations are in nanometres as in AF2
(the "position scale" 10 of supp. 1.8.2 keeps IPA point distances O(1)); every returned
coordinate is in Å. The module runs in fp32 even under autocast: rotations composed in bf16
drift from orthonormality within a few layers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foldworks.models.openfold import all_atom, rigid
from foldworks.models.openfold.rigid import Frames

POSITION_SCALE = 10.0  # Å per internal unit


class InvariantPointAttention(nn.Module):
    """Alg 22: attention over residues from scalar q·k, pair bias and point distances in global frame.

    The output is invariant to a global rotation + translation of all frames (points are
    moved to global coordinates for the distances and back to each residue's local frame).
    """

    def __init__(self, c_s: int, c_z: int, c_hidden: int = 16, n_heads: int = 12, n_qk_points: int = 4,
                 n_v_points: int = 8) -> None:
        super().__init__()
        self.h, self.c, self.pq, self.pv = n_heads, c_hidden, n_qk_points, n_v_points
        self.q, self.k, self.v = (nn.Linear(c_s, n_heads * c_hidden) for _ in range(3))
        self.q_pts = nn.Linear(c_s, n_heads * n_qk_points * 3)
        self.kv_pts = nn.Linear(c_s, n_heads * (n_qk_points + n_v_points) * 3)
        self.pair_bias = nn.Linear(c_z, n_heads)
        self.head_weights = nn.Parameter(torch.full((n_heads,), math.log(math.e - 1.0)))  # softplus → 1
        self.out = nn.Linear(n_heads * (c_z + c_hidden + 4 * n_v_points), c_s)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, s: Tensor, z: Tensor, frames: Frames, mask: Tensor) -> Tensor:
        b, n = s.shape[:2]
        q, k, v = (lin(s).view(b, n, self.h, self.c) for lin in (self.q, self.k, self.v))
        rot, trans = frames[0], frames[1][:, :, None, None]
        to_global = lambda p: torch.einsum("blij,blhpj->blhpi", rot, p) + trans  # noqa: E731
        q_pts = to_global(self.q_pts(s).view(b, n, self.h, self.pq, 3))
        kv_pts = to_global(self.kv_pts(s).view(b, n, self.h, self.pq + self.pv, 3))
        k_pts, v_pts = kv_pts.split([self.pq, self.pv], dim=-2)
        w_l, w_c = math.sqrt(1.0 / 3.0), math.sqrt(2.0 / (9.0 * self.pq))
        logits = torch.einsum("bihc,bjhc->bhij", q, k) / math.sqrt(self.c)
        logits = logits + self.pair_bias(z).permute(0, 3, 1, 2)
        qf, kf = q_pts.flatten(-2), k_pts.flatten(-2)  # [B, L, H, P·3]
        dist2 = ((qf ** 2).sum(-1)[:, :, None] + (kf ** 2).sum(-1)[:, None]
                 - 2.0 * torch.einsum("bihc,bjhc->bijh", qf, kf))  # Σ_p |q_ip − k_jp|², [B, i, j, H]
        gamma = F.softplus(self.head_weights)
        logits = logits - (gamma * w_c / 2.0 * dist2).permute(0, 3, 1, 2)
        logits = w_l * logits + ((mask.float() - 1.0) * 1e9)[:, None, None, :]
        attn = torch.softmax(logits, -1)  # [B, H, i, j]
        o = torch.einsum("bhij,bjhc->bihc", attn, v)
        o_pair = torch.einsum("bhij,bijc->bihc", attn, z)
        o_pts = torch.einsum("bhij,bjhpx->bihpx", attn, v_pts)
        o_pts = torch.einsum("blji,blhpj->blhpi", rot, o_pts - trans)  # back to each residue's local frame
        norms = torch.sqrt((o_pts ** 2).sum(-1) + 1e-8)
        feats = [o.flatten(2), o_pair.flatten(2), o_pts.flatten(2), norms.flatten(2)]
        return self.out(torch.cat(feats, -1))


class BackboneUpdate(nn.Module):
    """Alg 23: ``s`` → quaternion (1, b, c, d) (normalised) and translation; zero-init → identity update."""

    def __init__(self, c_s: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c_s, 6)
        nn.init.zeros_(self.lin.weight)
        nn.init.zeros_(self.lin.bias)

    def forward(self, s: Tensor) -> Frames:
        bcd, t = self.lin(s).split(3, -1)
        quat = torch.cat([torch.ones_like(bcd[..., :1]), bcd], -1)
        return rigid.quat_to_rot(quat), t


class AngleResnet(nn.Module):
    """Alg 20 lines 11–14: 2-block ResNet on ``s`` and ``s_initial`` → 7 unnormalised (sin, cos) pairs."""

    def __init__(self, c_s: int, c_hidden: int = 128, n_blocks: int = 2, n_angles: int = 7) -> None:
        super().__init__()
        self.n_angles = n_angles
        self.lin_s, self.lin_init = nn.Linear(c_s, c_hidden), nn.Linear(c_s, c_hidden)
        self.blocks = nn.ModuleList([nn.Sequential(nn.ReLU(), nn.Linear(c_hidden, c_hidden), nn.ReLU(),
                                                   nn.Linear(c_hidden, c_hidden)) for _ in range(n_blocks)])
        self.out = nn.Linear(c_hidden, n_angles * 2)

    def forward(self, s: Tensor, s_initial: Tensor) -> Tensor:
        a = self.lin_s(torch.relu(s)) + self.lin_init(torch.relu(s_initial))
        for block in self.blocks:
            a = a + block(a)
        return self.out(torch.relu(a)).view(*s.shape[:-1], self.n_angles, 2)


class StructureModule(nn.Module):
    """Alg 20: ``n_layers`` applications of one shared IPA layer + transition + backbone update.

    Frames start at the identity ("black-hole" initialisation, Alg 20 line 2); rotations are
    detached between layers (Alg 20 line 20), so each update's rotation is trained only through
    its own layer's outputs. Returns per-layer frames (Å) and angles for the auxiliary losses, and
    the final all-atom structure from the torsion angles (Alg 24).
    """

    def __init__(self, c_s: int, c_z: int, n_layers: int = 8, c_ipa: int = 16, n_heads_ipa: int = 12,
                 n_qk_points: int = 4, n_v_points: int = 8, c_resnet: int = 128, dropout: float = 0.1) -> None:
        super().__init__()
        self.n_layers = n_layers
        self.norm_s, self.norm_z = nn.LayerNorm(c_s), nn.LayerNorm(c_z)
        self.lin_in = nn.Linear(c_s, c_s)
        self.ipa = InvariantPointAttention(c_s, c_z, c_ipa, n_heads_ipa, n_qk_points, n_v_points)
        self.drop = nn.Dropout(dropout)
        self.norm_ipa = nn.LayerNorm(c_s)
        self.transition = nn.Sequential(nn.Linear(c_s, c_s), nn.ReLU(), nn.Linear(c_s, c_s), nn.ReLU(),
                                        nn.Linear(c_s, c_s))
        self.norm_transition = nn.LayerNorm(c_s)
        self.backbone_update = BackboneUpdate(c_s)
        self.angles = AngleResnet(c_s, c_resnet)

    def forward(self, s: Tensor, z: Tensor, aatype: Tensor, mask: Tensor) -> dict[str, Tensor]:
        """Outputs: ``frames_rot [B, S, L, 3, 3]``, ``frames_trans [B, S, L, 3]`` (Å) per layer S,
        ``angles``/``unnormalized_angles [B, S, L, 7, 2]``, ``single [B, L, c_s]``, final
        ``group_rot [B, L, 8, 3, 3]``, ``group_trans [B, L, 8, 3]`` (Å) and ``atom14 [B, L, 14, 3]`` (Å)."""
        device_type = s.device.type
        with torch.autocast(device_type=device_type, enabled=False):
            s, z = s.float(), z.float()
            s_initial = self.norm_s(s)
            z = self.norm_z(z)
            s = self.lin_in(s_initial)
            frames = rigid.identity(tuple(s.shape[:2]), s.device)
            rots, trans, angles, unnorm = [], [], [], []
            for layer in range(self.n_layers):
                s = self.norm_ipa(self.drop(s + self.ipa(s, z, frames, mask)))
                s = self.norm_transition(self.drop(s + self.transition(s)))
                frames = rigid.compose(frames, self.backbone_update(s))
                raw = self.angles(s, s_initial)
                norm = raw / torch.sqrt((raw ** 2).sum(-1, keepdim=True).clamp(min=1e-12))
                rots.append(frames[0])
                trans.append(frames[1] * POSITION_SCALE)
                angles.append(norm)
                unnorm.append(raw)
                if layer < self.n_layers - 1:  # Alg 20 line 20
                    frames = (frames[0].detach(), frames[1])
            final = (rots[-1], trans[-1])
            groups = all_atom.torsion_angles_to_frames(final, angles[-1], aatype)
            atom14 = all_atom.frames_to_atom14(groups, aatype)
        return {"frames_rot": torch.stack(rots, 1), "frames_trans": torch.stack(trans, 1),
                "angles": torch.stack(angles, 1), "unnormalized_angles": torch.stack(unnorm, 1),
                "single": s, "group_rot": groups[0], "group_trans": groups[1], "atom14": atom14}
