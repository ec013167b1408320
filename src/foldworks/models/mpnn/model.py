"""``mpnn``: ProteinMPNN (Dauparas et al. 2022, Science 378:49), the full-backbone inverse-folding model.

Architecture, parameter names and numerics follow ProteinMPNN's vanilla model, so a released
``v_48_0XX.pt`` state dict loads by identity (:mod:`foldworks.models.weights.proteinmpnn`):

1. :class:`~foldworks.models.mpnn.features.ProteinFeatures`: virtual Cβ, k-NN graph on Cα
   (``K = min(k, L)``, self included), 25 RBF atom-pair blocks + 66-class relative position
   → ``E [B, L, K, H]``; then ``W_e``. Node states start at zero.
2. ``n_encoder`` :class:`EncLayer` (node and edge updates), ``n_decoder`` :class:`DecLayer`.
3. Autoregressive decoder over the order ``argsort((chain_M·mask + 1e-4)·|randn|)``: neighbour
   j of i contributes its sequence embedding ``W_s(S_j)`` and current decoder state iff j is
   decoded strictly before i, else its encoder state with a zero sequence slot.
4. ``W_out`` → log-softmax over the 21 tokens ``ACDEFGHIKLMNPQRSTVWYX``.

Training follows ProteinMPNN's recipe: Gaussian backbone noise (the checkpoint's training noise,
Å) in training mode only, label smoothing 0.1 as ``(onehot + 0.1/21)`` renormalised, loss summed
over scored tokens and divided by a fixed 2000 (``loss_normaliser``). Batch contract: see
:mod:`foldworks.models.common`; outputs ``logits`` (= log-probabilities) ``[B, L, 21]`` in
ProteinMPNN's alphabet, ``S [B, L]`` native tokens, ``node_mask [B, L]`` bool.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from foldworks.models.mpnn.features import N_TOKENS, ProteinFeatures, batch_inputs, cat_neighbors_nodes, gather_nodes
from foldworks.models.mpnn.layers import DecLayer, EncLayer
from foldworks.models.registry import register_model

#: Released ProteinMPNN vanilla sizes (name = k + training noise) and the demo's small CPU size.
PRESETS: dict[str, dict[str, Any]] = {
    "v_48_002": {"hidden": 128, "n_encoder": 3, "n_decoder": 3, "k_neighbors": 48, "backbone_noise": 0.02},
    "v_48_010": {"hidden": 128, "n_encoder": 3, "n_decoder": 3, "k_neighbors": 48, "backbone_noise": 0.10},
    "v_48_020": {"hidden": 128, "n_encoder": 3, "n_decoder": 3, "k_neighbors": 48, "backbone_noise": 0.20},
    "v_48_030": {"hidden": 128, "n_encoder": 3, "n_decoder": 3, "k_neighbors": 48, "backbone_noise": 0.30},
    "cpu_small": {"hidden": 32, "n_encoder": 3, "n_decoder": 3, "k_neighbors": 16, "backbone_noise": 0.02},
}
DEFAULT_PRESET = "v_48_020"


def decoding_order(chain_M: Tensor, mask: Tensor, randn: Tensor) -> Tensor:
    """ProteinMPNN's order ``argsort((chain_M·mask + 1e-4)·|randn|)`` ``[B, L]``: fixed positions mostly first."""
    return torch.argsort((chain_M * mask + 0.0001) * torch.abs(randn))


def order_masks(order: Tensor, E_idx: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(mask_bw, mask_fw) [B, L, K, 1]``: neighbour decoded strictly before the centre, or not (self is fw).

    Both are multiplied by the centre's ``mask`` only, not by the neighbour's.
    """
    rank = torch.argsort(order, dim=-1)  # position -> step
    before = (gather_nodes(rank[..., None], E_idx)[..., 0] < rank[..., None]).to(mask.dtype)[..., None]
    mask_1d = mask[:, :, None, None]
    return mask_1d * before, mask_1d * (1.0 - before)


def sequence_scores(S: Tensor, log_probs: Tensor, mask: Tensor) -> Tensor:
    """Mean NLL (nats) of ``S`` over ``mask`` per row ``[B]`` (ProteinMPNN's ``score``/``global_score``)."""
    nll = -log_probs.gather(-1, S[..., None])[..., 0]
    return (nll * mask).sum(-1) / mask.sum(-1)


@register_model("mpnn")
class MPNNModel(nn.Module):
    """ProteinMPNN; config keys are the constructor arguments (``preset`` fills the sizes)."""

    task = "design"
    monitor = "recovery"

    def __init__(self, preset: str | None = None, hidden: int | None = None, n_encoder: int | None = None,
                 n_decoder: int | None = None, k_neighbors: int | None = None, backbone_noise: float | None = None,
                 dropout: float = 0.1, label_smoothing: float = 0.1, loss_normaliser: float = 2000.0) -> None:
        super().__init__()
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"mpnn: unknown preset {preset!r}; known: {sorted(PRESETS)}")
        given = {"hidden": hidden, "n_encoder": n_encoder, "n_decoder": n_decoder, "k_neighbors": k_neighbors,
                 "backbone_noise": backbone_noise}
        size = {**PRESETS[preset or DEFAULT_PRESET], **{k: v for k, v in given.items() if v is not None}}
        self.size = size
        self.hidden, self.k = int(size["hidden"]), int(size["k_neighbors"])
        self.noise, self.smoothing, self.normaliser = float(size["backbone_noise"]), label_smoothing, loss_normaliser
        h = self.hidden
        self.features = ProteinFeatures(h, top_k=self.k, augment_eps=self.noise)
        self.W_e = nn.Linear(h, h)
        self.W_s = nn.Embedding(N_TOKENS, h)
        self.encoder_layers = nn.ModuleList([EncLayer(h, dropout) for _ in range(int(size["n_encoder"]))])
        self.decoder_layers = nn.ModuleList([DecLayer(h, dropout) for _ in range(int(size["n_decoder"]))])
        self.W_out = nn.Linear(h, N_TOKENS)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    # ---- ProteinMPNN's computations on its own inputs --------------------------------------------
    def encode(self, X: Tensor, mask: Tensor, residue_idx: Tensor, chain_encoding_all: Tensor
               ) -> tuple[Tensor, Tensor, Tensor]:
        """Graph + encoder → ``(h_V [B, L, H], h_E [B, L, K, H], E_idx [B, L, K])``."""
        E, E_idx = self.features(X, mask, residue_idx, chain_encoding_all)
        h_V = torch.zeros(E.shape[0], E.shape[1], E.shape[-1], device=E.device, dtype=E.dtype)
        h_E = self.W_e(E)
        mask_attend = mask[..., None] * gather_nodes(mask[..., None], E_idx)[..., 0]
        for layer in self.encoder_layers:
            h_V, h_E = layer(h_V, h_E, E_idx, mask, mask_attend)
        return h_V, h_E, E_idx

    def encoder_context(self, h_V: Tensor, h_E: Tensor, E_idx: Tensor) -> Tensor:
        """``[h_E_ij, 0, h_V_j]`` ``[B, L, K, 3H]``: what a not-yet-decoded neighbour contributes."""
        return cat_neighbors_nodes(h_V, cat_neighbors_nodes(torch.zeros_like(h_V), h_E, E_idx), E_idx)

    def decode(self, h_V: Tensor, h_E: Tensor, E_idx: Tensor, S: Tensor, mask: Tensor, order: Tensor) -> Tensor:
        """Teacher-forced decoder → log-probabilities ``[B, L, 21]`` of every position given ``S`` and ``order``."""
        mask_bw, mask_fw = order_masks(order, E_idx, mask)
        h_ES = cat_neighbors_nodes(self.W_s(S), h_E, E_idx)
        h_EXV_encoder_fw = mask_fw * self.encoder_context(h_V, h_E, E_idx)
        for layer in self.decoder_layers:
            h_ESV = mask_bw * cat_neighbors_nodes(h_V, h_ES, E_idx) + h_EXV_encoder_fw
            h_V = layer(h_V, h_ESV, mask)
        return torch.log_softmax(self.W_out(h_V), dim=-1)

    def log_probs(self, X: Tensor, S: Tensor, mask: Tensor, chain_M: Tensor, residue_idx: Tensor,
                  chain_encoding_all: Tensor, randn: Tensor, order: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """ProteinMPNN's ``forward``: ``(log_probs [B, L, 21], decoding order [B, L])``.

        ``chain_M [B, L]`` marks designed positions (multiplied by ``mask`` here); the order is
        :func:`decoding_order` of ``randn [B, L]`` unless ``order`` is given.
        """
        h_V, h_E, E_idx = self.encode(X, mask, residue_idx, chain_encoding_all)
        if order is None:
            order = decoding_order(chain_M, mask, randn)
        return self.decode(h_V, h_E, E_idx, S, mask, order), order

    # ---- the shared trainer's contract ---------------------------------------------------------
    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Teacher-forced log-probabilities of the native sequence under a random decoding order.

        Training draws the order and backbone noise from torch's global RNG; eval mode draws the
        order from a fixed-seed generator, so validation and evaluation are deterministic.
        """
        inp = batch_inputs(batch)
        generator = None if self.training else torch.Generator(device=inp["X"].device).manual_seed(0)
        randn = torch.randn(inp["mask"].shape, generator=generator, device=inp["X"].device)
        log_probs, _ = self.log_probs(inp["X"], inp["S"], inp["mask"], inp["chain_M"], inp["residue_idx"],
                                      inp["chain_encoding_all"], randn)
        return {"logits": log_probs, "S": inp["S"], "node_mask": inp["mask"] > 0,
                "scored": (inp["mask"] * inp["chain_M"]) > 0}

    def loss(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """ProteinMPNN's ``loss_smoothed`` in fp32: Σ smoothed CE over scored tokens / ``loss_normaliser``."""
        log_probs, S = outputs["logits"].float(), outputs["S"]
        scored = outputs["scored"].float()
        target = nn.functional.one_hot(S, N_TOKENS).float() + self.smoothing / N_TOKENS
        target = target / target.sum(-1, keepdim=True)
        per_token = -(target * log_probs).sum(-1)
        loss = (per_token * scored).sum() / self.normaliser
        incomplete = float((batch["mask"] & batch["residue_mask"] & ~outputs["node_mask"]).sum())
        count = float(scored.sum())
        nll = -(log_probs.gather(-1, S[..., None])[..., 0] * scored).sum()
        return loss, {"sequence_ce": float(nll.detach()) / max(count, 1.0), "masked_backbone_residues": incomplete}

    def validation_metrics(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Per chain ``[B]``: ``recovery`` = teacher-forced argmax identity to native over scored positions."""
        scored = outputs["scored"].float()
        hit = (outputs["logits"].argmax(-1) == outputs["S"]).float() * scored
        return {"recovery": hit.sum(1) / scored.sum(1).clamp(min=1.0)}

    @torch.no_grad()
    def native_nll(self, batch: dict[str, Tensor], generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Per-residue NLL (nats) of the native sequence ``[B, L]`` under a random order, and the scored mask."""
        inp = batch_inputs(batch)
        randn = torch.randn(inp["mask"].shape, generator=generator).to(inp["X"].device)
        log_probs, _ = self.log_probs(inp["X"], inp["S"], inp["mask"], inp["chain_M"], inp["residue_idx"],
                                      inp["chain_encoding_all"], randn)
        scored = (inp["mask"] * inp["chain_M"]) > 0
        nll = -log_probs.float().gather(-1, inp["S"][..., None])[..., 0]
        return nll * scored, scored

    def sample(self, X: Tensor, randn: Tensor, S_true: Tensor, chain_M: Tensor, chain_encoding_all: Tensor,
               residue_idx: Tensor, mask: Tensor, **options: Any) -> dict[str, Tensor]:
        """ProteinMPNN's ``sample`` on this model: see :func:`foldworks.models.mpnn.sampling.sample`."""
        from foldworks.models.mpnn.sampling import sample

        return sample(self, X, randn, S_true, chain_M, chain_encoding_all, residue_idx, mask, **options)
