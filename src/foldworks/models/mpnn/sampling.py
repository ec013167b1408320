"""ProteinMPNN's sampling and probability queries on a :class:`~foldworks.models.mpnn.model.MPNNModel`.

All functions take ProteinMPNN's inputs: ``X [B, L, 4, 3]`` Å, ``mask [B, L]`` float,
``chain_M [B, L]`` (1 = designed chain), ``chain_M_pos [B, L]`` (0 = fixed position),
``residue_idx``/``chain_encoding_all [B, L]`` long, ``randn [B, L]`` (sets the decoding order).
Token order ``ACDEFGHIKLMNPQRSTVWYX``.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from foldworks.models.mpnn.features import N_TOKENS, cat_neighbors_nodes
from foldworks.models.mpnn.model import MPNNModel, decoding_order, order_masks


def _step_layers(model: MPNNModel, state: dict[str, Tensor], t: Tensor) -> Tensor:
    """Run every decoder layer at position ``t [B]`` (one per row), store its states; return ``h_V [B, H]``."""
    rows = torch.arange(t.shape[0], device=t.device)
    E_idx_t = state["E_idx"][rows, t][:, None]
    h_ES_t = cat_neighbors_nodes(state["h_S"], state["h_E"][rows, t][:, None], E_idx_t)
    h_EXV_t = state["h_EXV_fw"][rows, t][:, None]
    mask_bw_t = state["mask_bw"][rows, t][:, None]
    mask_t = state["mask"][rows, t][:, None]
    stack = state["stack"]
    for layer_index, layer in enumerate(model.decoder_layers):
        h_ESV_t = mask_bw_t * cat_neighbors_nodes(stack[layer_index], h_ES_t, E_idx_t) + h_EXV_t
        h_V_t = stack[layer_index][rows, t][:, None]
        stack[layer_index + 1][rows, t] = layer(h_V_t, h_ESV_t, mask_t)[:, 0]
    return stack[-1][rows, t]


def _step_probs(logits: Tensor, temperature: float, omit: Tensor, bias: Tensor, bias_t: Tensor, omit_t: Tensor
                ) -> Tensor:
    """``softmax(logits − 1e8·omit + bias/T + bias_t/T)`` renormalised over ``1 − omit_t`` ``[B, 21]``
    (``logits`` already divided by T; float64 when ``bias`` is)."""
    probs = torch.softmax(logits - omit[None] * 1e8 + bias[None] / temperature + bias_t / temperature, dim=-1)
    kept = probs * (1.0 - omit_t)
    return kept / kept.sum(-1, keepdim=True)


def _groups(order: Tensor, tied: Sequence[Sequence[int]] | None) -> list[list[int]]:
    """Decoding steps of row 0's ``order``: single positions, or a whole tied group at its first member."""
    owner: dict[int, list[int]] = {}
    for group in tied or []:
        for position in group:
            owner[int(position)] = [int(p) for p in group]
    steps, seen = [], set()
    for position in order[0].tolist():
        if position in seen:
            continue
        group = owner.get(position, [position])
        seen.update(group)
        steps.append(group)
    return steps


@torch.no_grad()
def sample(model: MPNNModel, X: Tensor, randn: Tensor, S_true: Tensor, chain_M: Tensor, chain_encoding_all: Tensor,
           residue_idx: Tensor, mask: Tensor, temperature: float = 0.1, omit_AAs: Tensor | None = None,
           bias_AAs: Tensor | None = None, chain_M_pos: Tensor | None = None, omit_AA_mask: Tensor | None = None,
           bias_by_res: Tensor | None = None, tied_positions: Sequence[Sequence[int]] | None = None,
           tied_beta: Tensor | None = None, generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """Autoregressive sampling as ProteinMPNN's ``sample``/``tied_sample`` → ``{S, probs, decoding_order}``.

    Per step: ``probs = softmax(W_out(h)/T − 1e8·omit + bias/T + bias_by_res/T)`` in float64
    (the global ``bias_AAs [21]`` is float64), renormalised over ``1 − omit_AA_mask``, then one
    ``torch.multinomial`` draw, also at fixed positions (which then keep ``S_true``). A step whose
    position is masked in every row takes ``S_true`` without a draw (in a tied group: the first
    such member's, for the whole group, as ``tied_sample`` does). A tied group (0-based
    positions, batch row 0's order) is decoded at its first member's step with the β-weighted
    mean of its members' logits (``tied_beta [L]``, default 1) and one shared draw.
    ``probs [B, L, 21]`` (float32) holds the per-step distributions, 0 at positions not designed.
    """
    B, L = S_true.shape
    device = X.device
    chain_M_pos = torch.ones_like(mask) if chain_M_pos is None else chain_M_pos
    omit = torch.zeros(N_TOKENS, device=device) if omit_AAs is None else omit_AAs.to(device)
    bias = torch.zeros(N_TOKENS, dtype=torch.float64, device=device) if bias_AAs is None else bias_AAs.to(device)
    bias_by_res = torch.zeros(B, L, N_TOKENS, device=device) if bias_by_res is None else bias_by_res
    omit_AA_mask = torch.zeros(B, L, N_TOKENS, device=device) if omit_AA_mask is None else omit_AA_mask
    tied_beta = torch.ones(L, device=device) if tied_beta is None else tied_beta
    h_V, h_E, E_idx = model.encode(X, mask, residue_idx, chain_encoding_all)
    chain_mask = chain_M * chain_M_pos * mask
    order = decoding_order(chain_M * chain_M_pos, mask, randn)
    steps = _groups(order, tied_positions)
    if tied_positions:
        order = torch.tensor([p for group in steps for p in group], device=device).expand(B, -1)
    mask_bw, mask_fw = order_masks(order, E_idx, mask)
    state = {"E_idx": E_idx, "h_E": h_E, "mask": mask, "mask_bw": mask_bw, "h_S": torch.zeros_like(h_V),
             "h_EXV_fw": mask_fw * model.encoder_context(h_V, h_E, E_idx),
             "stack": [h_V] + [torch.zeros_like(h_V) for _ in model.decoder_layers]}
    S = torch.zeros(B, L, dtype=torch.long, device=device)
    all_probs = torch.zeros(B, L, N_TOKENS, device=device)
    rows = torch.arange(B, device=device)
    for step, group in enumerate(steps):
        ts = [order[:, step] if not tied_positions else torch.full((B,), p, device=device) for p in group]
        t = ts[-1]
        logits, masked_at = 0.0, None
        for member in ts:
            if bool((mask[rows, member] == 0).all()):  # padding / missing backbone: keep the input residue
                masked_at = member
                break
            h = _step_layers(model, state, member)
            logits = logits + tied_beta[member][:, None] * (model.W_out(h) / temperature) / len(ts)
        if masked_at is not None:
            for member in ts:
                state["h_S"][rows, member] = model.W_s(S_true[rows, masked_at])
                S[rows, member] = S_true[rows, masked_at]
            continue
        probs = _step_probs(logits, temperature, omit, bias, bias_by_res[rows, t], omit_AA_mask[rows, t])
        S_t = torch.multinomial(probs, 1, generator=generator)[:, 0]
        for member in ts:
            designed = chain_mask[rows, member]
            S_m = (S_t * designed + S_true[rows, member] * (1.0 - designed)).long()
            all_probs[rows, member] = (designed[:, None] * probs).float()
            state["h_S"][rows, member] = model.W_s(S_m)
            S[rows, member] = S_m
    return {"S": S, "probs": all_probs, "decoding_order": order}


@torch.no_grad()
def conditional_probs(model: MPNNModel, X: Tensor, S: Tensor, mask: Tensor, chain_M: Tensor, residue_idx: Tensor,
                      chain_encoding_all: Tensor, randn: Tensor, backbone_only: bool = False,
                      positions: Sequence[int] | None = None) -> Tensor:
    """Log-probabilities ``[B, L, 21]`` of each designed position given all other residues' sequence
    (``backbone_only``: given none), each from its own decoder pass with that position decoded last
    (first). Only positions designed in batch row 0 are filled (of those, only ``positions`` when
    given); others are 0."""
    h_V, h_E, E_idx = model.encode(X, mask, residue_idx, chain_encoding_all)
    chain_M = chain_M * mask
    h_ES = cat_neighbors_nodes(model.W_s(S), h_E, E_idx)
    context = model.encoder_context(h_V, h_E, E_idx)
    out = torch.zeros(*S.shape, N_TOKENS, device=X.device)
    for idx in torch.nonzero(chain_M[0] == 1)[:, 0].tolist():
        if positions is not None and idx not in positions:
            continue
        order_mask = torch.full((S.shape[1],), float(backbone_only), device=X.device)
        order_mask[idx] = 0.0 if backbone_only else 1.0
        order = torch.argsort((order_mask[None] + 0.0001) * torch.abs(randn))
        out[:, idx] = _decode_at(model, h_V, h_ES, context, E_idx, mask, order, idx)
    return out


def _decode_at(model: MPNNModel, h_V: Tensor, h_ES: Tensor, context: Tensor, E_idx: Tensor, mask: Tensor,
               order: Tensor, target: int) -> Tensor:
    """Teacher-forced log-probabilities ``[B, 21]`` at ``target`` only (same values as a full decoder pass).

    Decoder layer l is evaluated only at the positions that later layers read: ``target`` for
    the last, plus its neighbours for the one before, and so on (the receptive field).
    """
    mask_bw, mask_fw = order_masks(order, E_idx, mask)
    n_layers = len(model.decoder_layers)
    need = [torch.tensor([target], device=h_V.device)]
    for _ in range(n_layers - 1):
        need.append(torch.unique(torch.cat([need[-1], E_idx[:, need[-1]].reshape(-1)])))
    for layer, rows in zip(model.decoder_layers, reversed(need)):
        h_ESV = mask_bw[:, rows] * cat_neighbors_nodes(h_V, h_ES[:, rows], E_idx[:, rows]) \
            + mask_fw[:, rows] * context[:, rows]
        h_V = h_V.clone()
        h_V[:, rows] = layer(h_V[:, rows], h_ESV, mask[:, rows])
    return torch.log_softmax(model.W_out(h_V[:, target]), dim=-1)


@torch.no_grad()
def unconditional_probs(model: MPNNModel, X: Tensor, mask: Tensor, residue_idx: Tensor,
                        chain_encoding_all: Tensor) -> Tensor:
    """Log-probabilities ``[B, L, 21]`` from structure alone: every neighbour enters via the encoder path."""
    h_V, h_E, E_idx = model.encode(X, mask, residue_idx, chain_encoding_all)
    h_EXV_fw = mask[:, :, None, None] * model.encoder_context(h_V, h_E, E_idx)
    for layer in model.decoder_layers:
        h_V = layer(h_V, h_EXV_fw, mask)
    return torch.log_softmax(model.W_out(h_V), dim=-1)
