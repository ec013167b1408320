"""ProteinMPNN's encoder and decoder message-passing layers (parameter names as in its state dict).

Shapes: ``h_V [B, L, H]`` nodes, ``h_E [B, L, K, H]`` edges, ``E_idx [B, L, K]``. Messages are
summed over the K neighbours and divided by a constant ``scale`` (30), not averaged over K.
GELU is the exact (erf) form; LayerNorm eps 1e-5.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from foldworks.models.mpnn.features import cat_neighbors_nodes

MESSAGE_SCALE = 30.0


def with_centre(h_V: Tensor, h_E: Tensor) -> Tensor:
    """``[h_V_i, h_E_ij]`` along the last axis: ``[B, L, K, H + C]``."""
    return torch.cat([h_V[:, :, None, :].expand(-1, -1, h_E.shape[2], -1), h_E], dim=-1)


class PositionWiseFeedForward(nn.Module):
    """``W_out(GELU(W_in(h)))``, hidden → 4·hidden → hidden."""

    def __init__(self, num_hidden: int, num_ff: int) -> None:
        super().__init__()
        self.W_in = nn.Linear(num_hidden, num_ff)
        self.W_out = nn.Linear(num_ff, num_hidden)
        self.act = nn.GELU()

    def forward(self, h: Tensor) -> Tensor:
        return self.W_out(self.act(self.W_in(h)))


class EncLayer(nn.Module):
    """Encoder layer: node update from ``[h_V_i, h_E_ij, h_V_j]`` messages, then edge update with the new nodes."""

    def __init__(self, num_hidden: int, dropout: float = 0.1, scale: float = MESSAGE_SCALE) -> None:
        super().__init__()
        self.scale = scale
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(num_hidden), nn.LayerNorm(num_hidden), nn.LayerNorm(num_hidden)
        self.W1, self.W2, self.W3 = nn.Linear(3 * num_hidden, num_hidden), nn.Linear(num_hidden, num_hidden), \
            nn.Linear(num_hidden, num_hidden)
        self.W11, self.W12, self.W13 = nn.Linear(3 * num_hidden, num_hidden), nn.Linear(num_hidden, num_hidden), \
            nn.Linear(num_hidden, num_hidden)
        self.act = nn.GELU()
        self.dense = PositionWiseFeedForward(num_hidden, 4 * num_hidden)

    def _message(self, h_V: Tensor, h_E: Tensor, E_idx: Tensor, first: nn.Linear, second: nn.Linear,
                 third: nn.Linear) -> Tensor:
        h_EV = with_centre(h_V, cat_neighbors_nodes(h_V, h_E, E_idx))  # [h_V_i, h_E_ij, h_V_j]
        return third(self.act(second(self.act(first(h_EV)))))

    def forward(self, h_V: Tensor, h_E: Tensor, E_idx: Tensor, mask_V: Tensor, mask_attend: Tensor
                ) -> tuple[Tensor, Tensor]:
        """``mask_V [B, L]``, ``mask_attend [B, L, K]`` (both endpoints present) → ``(h_V, h_E)``."""
        message = self._message(h_V, h_E, E_idx, self.W1, self.W2, self.W3) * mask_attend[..., None]
        h_V = self.norm1(h_V + self.dropout1(message.sum(-2) / self.scale))
        h_V = self.norm2(h_V + self.dropout2(self.dense(h_V)))
        h_V = mask_V[..., None] * h_V
        edge_message = self._message(h_V, h_E, E_idx, self.W11, self.W12, self.W13)
        h_E = self.norm3(h_E + self.dropout3(edge_message))
        return h_V, h_E


class DecLayer(nn.Module):
    """Decoder layer: node update from ``[h_V_i, h_ESV_ij]`` (``h_ESV`` = edge | sequence | neighbour state)."""

    def __init__(self, num_hidden: int, dropout: float = 0.1, scale: float = MESSAGE_SCALE) -> None:
        super().__init__()
        self.scale = scale
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)
        self.norm1, self.norm2 = nn.LayerNorm(num_hidden), nn.LayerNorm(num_hidden)
        self.W1, self.W2, self.W3 = nn.Linear(4 * num_hidden, num_hidden), nn.Linear(num_hidden, num_hidden), \
            nn.Linear(num_hidden, num_hidden)
        self.act = nn.GELU()
        self.dense = PositionWiseFeedForward(num_hidden, 4 * num_hidden)

    def forward(self, h_V: Tensor, h_E: Tensor, mask_V: Tensor) -> Tensor:
        """``h_V [B, L', H]``, ``h_E [B, L', K, 3H]``, ``mask_V [B, L']`` → ``h_V [B, L', H]``."""
        message = self.W3(self.act(self.W2(self.act(self.W1(with_centre(h_V, h_E))))))
        h_V = self.norm1(h_V + self.dropout1(message.sum(-2) / self.scale))
        h_V = self.norm2(h_V + self.dropout2(self.dense(h_V)))
        return mask_V[..., None] * h_V

