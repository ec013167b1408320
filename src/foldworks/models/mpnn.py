"""``mpnn``: inverse folding (backbone → sequence) after ProteinMPNN (Dauparas et al. 2022, Science 378:49).

Written from the paper and its supplementary methods (no reference code used). Shapes for ``B``
chains of ``L`` residues, ``K = min(k_neighbors, L)`` neighbours, hidden width ``H``:

1. Backbone: N, CA, C, O from ``all_atom_positions [B, L, 37, 3]`` (Å) plus the virtual Cβ of
   the supplement (Cβ = −0.58273431·a + 0.56802827·b − 0.54067466·c + CA, b = CA − N, c = C − CA,
   a = b × c). A residue is a graph node only if all four backbone atoms are resolved; the others
   are masked (no node, no neighbour, no loss) and counted (``masked_backbone_residues``).
   Training adds Gaussian noise (``backbone_noise`` Å, default 0.02) to the coordinates.
2. Graph (paper Fig. 1A, "k-nearest neighbours by Cα–Cα distance", k = 48): ``E_idx [B, L, K]``;
   a chain shorter than k uses all of its residues.
3. Edge features: 16 Gaussian RBFs (centres 2–22 Å) of the 25 distances between the five
   backbone atoms of i and j (``[B, L, K, 400]``) + relative-position one-hot (offset clipped to
   ±32, one extra class for "different chain") → linear → LayerNorm ``[B, L, K, H]``. Node
   features start at zero (the structure lives on the edges).
4. ``n_encoder`` message-passing layers updating nodes and edges (supplement "encoder"),
   ``n_decoder`` layers of the autoregressive decoder (paper Fig. 1B): a random decoding order
   per chain; for neighbour j of i, j's sequence embedding and current decoder state are visible
   iff j comes before i in the order, otherwise only j's encoder state (no sequence).
5. Loss: label-smoothed (0.1) cross-entropy of the native residue over graph nodes with a
   standard amino acid (X excluded), computed in fp32.

Outputs of ``forward``: ``logits [B, L, 21]`` (X never sampled), ``node_mask [B, L]``,
``order_rank [B, L]``; ``task = "design"``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foldworks.constants import UNK_INDEX
from foldworks.models.registry import register_model

BACKBONE_ATOMS = (0, 1, 2, 4)  # atom37 slots of N, CA, C, O
N_RBF, RBF_MIN, RBF_MAX = 16, 2.0, 22.0
N_TOKENS = UNK_INDEX + 1  # 20 amino acids + X


def backbone(batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """``(coords [B, L, 4, 3] Å of N/CA/C/O, complete [B, L] bool)``: complete = padding-free and all four resolved."""
    coords = batch["all_atom_positions"][:, :, list(BACKBONE_ATOMS)].float()
    complete = batch["all_atom_mask"][:, :, list(BACKBONE_ATOMS)].all(-1) & batch["mask"]
    return coords, complete


def virtual_cb(coords: Tensor) -> Tensor:
    """Virtual Cβ ``[..., 3]`` (Å) from backbone ``coords [..., 4, 3]`` (ProteinMPNN supplement constants)."""
    n, ca, c = coords[..., 0, :], coords[..., 1, :], coords[..., 2, :]
    b, cc = ca - n, c - ca
    a = torch.cross(b, cc, dim=-1)
    return -0.58273431 * a + 0.56802827 * b - 0.54067466 * cc + ca


def knn_graph(ca: Tensor, node_mask: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """k nearest graph nodes by Cα distance (self included): ``(E_idx [B, L, K] long, edge_mask [B, L, K])``.

    ``K = min(k, L)``: a chain shorter than ``k`` uses all residues. Non-nodes are pushed to the end
    and masked out (``edge_mask`` False), so they are never neighbours.
    """
    dist = torch.cdist(ca, ca)  # [B, L, L] Å
    pair = node_mask[:, :, None] & node_mask[:, None, :]
    dist = dist.masked_fill(~pair, float("inf"))
    count = min(k, ca.shape[1])
    d_k, e_idx = torch.topk(dist, count, dim=-1, largest=False)
    return e_idx, torch.isfinite(d_k) & node_mask[:, :, None]


def gather_nodes(nodes: Tensor, e_idx: Tensor) -> Tensor:
    """Neighbour features ``[B, L, K, C]`` of ``nodes [B, L, C]`` at ``e_idx [B, L, K]``."""
    b, l, k = e_idx.shape
    flat = e_idx.reshape(b, l * k, 1).expand(-1, -1, nodes.shape[-1])
    return torch.gather(nodes, 1, flat).reshape(b, l, k, nodes.shape[-1])


def rbf(dist: Tensor) -> Tensor:
    """16 Gaussian radial basis functions (centres 2..22 Å, width 1.25 Å) → ``[..., 16]``."""
    centers = torch.linspace(RBF_MIN, RBF_MAX, N_RBF, device=dist.device)
    sigma = (RBF_MAX - RBF_MIN) / N_RBF
    return torch.exp(-(((dist[..., None] - centers) / sigma) ** 2))


def edge_distances(coords: Tensor, e_idx: Tensor) -> Tensor:
    """RBF features ``[B, L, K, 25 * 16]`` of the 25 distances among N, CA, C, O, Cβ of i and of j."""
    atoms = torch.cat([coords, virtual_cb(coords)[:, :, None]], dim=2)  # [B, L, 5, 3]
    b, l, _, _ = atoms.shape
    neigh = gather_nodes(atoms.reshape(b, l, 15), e_idx).reshape(b, l, -1, 5, 3)  # [B, L, K, 5, 3]
    diff = atoms[:, :, None, :, None, :] - neigh[:, :, :, None, :, :]  # [B, L, K, 5, 5, 3]
    dist = torch.sqrt((diff ** 2).sum(-1) + 1e-6)
    return rbf(dist).flatten(3)


class MessageLayer(nn.Module):
    """One message-passing layer (supplement "encoder/decoder layer"), all widths ``H``.

    Message ``m_ij = MLP([h_i, e_ij, n_j])`` (3 linear layers, GELU); the first linear layer of the
    concatenation is applied as a sum of per-part maps (``w_self h_i + w_edge e_ij + w_nb n_j``,
    same function, fewer edge-level products), the neighbour part ``n_j`` being the caller's
    (:meth:`neighbour_input`). Update ``h_i ← LN(h_i + Σ_j m_ij / scale)``, then
    ``h_i ← LN(h_i + FFN(h_i))``. Encoder layers also update edges,
    ``e_ij ← LN(e_ij + MLP([h_i, e_ij, h_j]))``; decoder layers have a sequence map ``w_seq``.
    """

    def __init__(self, hidden: int, dropout: float, scale: float, update_edges: bool, with_sequence: bool) -> None:
        super().__init__()
        self.scale = scale
        self.w_self, self.w_edge = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden, bias=False)
        self.w_nb = nn.Linear(hidden, hidden, bias=False)
        self.w_seq = nn.Linear(hidden, hidden, bias=False) if with_sequence else None
        self.message = nn.Sequential(nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.dropout = nn.Dropout(dropout)
        if update_edges:
            self.e_self, self.e_edge = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden, bias=False)
            self.e_nb = nn.Linear(hidden, hidden, bias=False)
            self.e_mlp = nn.Sequential(nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden))
            self.e_norm = nn.LayerNorm(hidden)

    def forward(self, h: Tensor, edge_pre: Tensor, edge_mask: Tensor, node_mask: Tensor) -> Tensor:
        """``h [B, L, H]``, ``edge_pre = w_edge e_ij + w_nb n_j [B, L, K, H]`` → new ``h [B, L, H]``."""
        msg = self.message(self.w_self(h)[:, :, None] + edge_pre) * edge_mask[..., None].to(h.dtype)
        h = self.norm1(h + self.dropout(msg.sum(2) / self.scale))
        h = self.norm2(h + self.dropout(self.ffn(h)))
        return h * node_mask[..., None].to(h.dtype)

    def update_edges(self, h: Tensor, e: Tensor, e_idx: Tensor) -> Tensor:
        """Encoder edge update ``[B, L, K, H]``."""
        pre = self.e_self(h)[:, :, None] + self.e_edge(e) + gather_nodes(self.e_nb(h), e_idx)
        return self.e_norm(e + self.dropout(self.e_mlp(pre)))


@register_model("mpnn")
class MPNNModel(nn.Module):
    """ProteinMPNN-style inverse-folding model; config keys are the constructor arguments."""

    task = "design"
    monitor = "recovery"

    def __init__(self, hidden: int = 128, n_encoder: int = 3, n_decoder: int = 3, k_neighbors: int = 48,
                 backbone_noise: float = 0.02, dropout: float = 0.1, label_smoothing: float = 0.1,
                 max_offset: int = 32) -> None:
        super().__init__()
        self.k, self.noise, self.smoothing, self.max_offset = k_neighbors, backbone_noise, label_smoothing, max_offset
        self.relpos = nn.Embedding(2 * max_offset + 2, hidden)  # last class: different chain
        self.edge_in = nn.Linear(25 * N_RBF, hidden)
        self.edge_norm = nn.LayerNorm(hidden)
        scale = float(k_neighbors)
        self.encoder = nn.ModuleList([MessageLayer(hidden, dropout, scale, True, False) for _ in range(n_encoder)])
        self.seq_embed = nn.Embedding(N_TOKENS, hidden)
        self.decoder = nn.ModuleList([MessageLayer(hidden, dropout, scale, False, True) for _ in range(n_decoder)])
        self.out = nn.Linear(hidden, N_TOKENS)

    # ---- encoder ------------------------------------------------------------------------------
    def encode(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Graph + encoder: ``h [B, L, H]``, ``e [B, L, K, H]``, ``e_idx``, ``edge_mask``, ``node_mask``."""
        coords, node_mask = backbone(batch)
        if self.training and self.noise > 0:
            coords = coords + self.noise * torch.randn_like(coords)
        coords = coords * node_mask[:, :, None, None].to(coords.dtype)
        e_idx, edge_mask = knn_graph(coords[:, :, 1], node_mask, self.k)
        chain = batch.get("chain_index", torch.zeros_like(batch["residue_index"]))
        offset = gather_nodes(batch["residue_index"][..., None], e_idx)[..., 0] - batch["residue_index"][..., None]
        same = gather_nodes(chain[..., None], e_idx)[..., 0] == chain[..., None]
        cls = offset.clamp(-self.max_offset, self.max_offset) + self.max_offset
        cls = torch.where(same, cls, torch.full_like(cls, 2 * self.max_offset + 1))
        e = self.edge_norm(self.edge_in(edge_distances(coords, e_idx)) + self.relpos(cls))
        h = e.new_zeros(e.shape[0], e.shape[1], e.shape[-1])
        for layer in self.encoder:
            h = layer(h, layer.w_edge(e) + gather_nodes(layer.w_nb(h), e_idx), edge_mask, node_mask)
            e = layer.update_edges(h, e, e_idx)
        return {"h": h, "e": e, "e_idx": e_idx, "edge_mask": edge_mask, "node_mask": node_mask}

    # ---- decoder ------------------------------------------------------------------------------
    def decode(self, enc: dict[str, Tensor], tokens: Tensor, rank: Tensor) -> Tensor:
        """Logits ``[B, L, 21]`` given ``tokens [B, L]`` and decoding ``rank [B, L]`` (0 = first decoded).

        Neighbour j of i contributes ``[e_ij, s_j, h_j^(layer)]`` when ``rank_j < rank_i``,
        else ``[e_ij, 0, h_j^(encoder)]`` (paper Fig. 1B; self-edge is "not yet decoded").
        """
        e, e_idx, edge_mask, node_mask, h_enc = enc["e"], enc["e_idx"], enc["edge_mask"], enc["node_mask"], enc["h"]
        before = (gather_nodes(rank[..., None], e_idx)[..., 0] < rank[..., None])[..., None].to(e.dtype)
        seq = self.seq_embed(tokens)
        h = h_enc
        for layer in self.decoder:
            visible = gather_nodes(layer.w_seq(seq) + layer.w_nb(h), e_idx)
            context = gather_nodes(layer.w_nb(h_enc), e_idx)
            h = layer(h, layer.w_edge(e) + before * visible + (1.0 - before) * context, edge_mask, node_mask)
        return self.out(h)

    def random_rank(self, node_mask: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Rank of each residue in a uniformly random decoding order ``[B, L]`` (long)."""
        noise = torch.rand(node_mask.shape, generator=generator, device=node_mask.device)
        return torch.argsort(torch.argsort(noise, dim=-1), dim=-1)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Teacher-forced logits of the native sequence under a random decoding order.

        Training draws the order (and the backbone noise) from torch's global RNG; eval mode uses
        a fixed-seed generator, so validation and evaluation scores are deterministic.
        """
        enc = self.encode(batch)
        generator = None if self.training else torch.Generator(device=enc["h"].device).manual_seed(0)
        rank = self.random_rank(enc["node_mask"], generator)
        logits = self.decode(enc, batch["aatype"], rank)
        return {"logits": logits, "node_mask": enc["node_mask"], "order_rank": rank}

    # ---- loss and metrics ---------------------------------------------------------------------
    @staticmethod
    def loss_mask(batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> Tensor:
        """Residues scored ``[B, L]``: graph nodes (complete backbone), resolved, standard amino acid."""
        return outputs["node_mask"] & batch["residue_mask"] & (batch["aatype"] < UNK_INDEX)

    def loss(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Label-smoothed cross-entropy (fp32) of the native residues over :meth:`loss_mask`."""
        scored = self.loss_mask(batch, outputs)
        logits = outputs["logits"].float()[..., :UNK_INDEX]
        incomplete = int((batch["mask"] & batch["residue_mask"] & ~outputs["node_mask"]).sum())
        if not scored.any():
            return logits.sum() * 0.0, {"masked_backbone_residues": float(incomplete)}
        ce = F.cross_entropy(logits[scored], batch["aatype"][scored], label_smoothing=self.smoothing)
        return ce, {"sequence_ce": float(ce.detach()), "masked_backbone_residues": float(incomplete)}

    def validation_metrics(self, batch: dict[str, Tensor], outputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Per chain ``[B]``: ``recovery`` = teacher-forced argmax identity to native over :meth:`loss_mask`."""
        scored = self.loss_mask(batch, outputs).float()
        hit = (outputs["logits"][..., :UNK_INDEX].argmax(-1) == batch["aatype"]).float() * scored
        return {"recovery": hit.sum(1) / scored.sum(1).clamp(min=1.0)}

    @torch.no_grad()
    def native_nll(self, batch: dict[str, Tensor], generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Per-residue NLL (nats) of the native sequence ``[B, L]`` under a random order, and its mask ``[B, L]``."""
        enc = self.encode(batch)
        rank = self.random_rank(enc["node_mask"], generator)
        logits = self.decode(enc, batch["aatype"], rank).float()[..., :UNK_INDEX]
        scored = self.loss_mask(batch, {"node_mask": enc["node_mask"]})
        logp = torch.log_softmax(logits, -1)
        nll = -logp.gather(-1, batch["aatype"].clamp(max=UNK_INDEX - 1)[..., None])[..., 0]
        return nll * scored, scored

    @torch.no_grad()
    def sample(self, batch: dict[str, Tensor], temperature: float = 0.1, n_samples: int = 1,
               generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Autoregressive sampling: ``(sequences [n_samples, B, L] long 0..19, log_probs [n_samples, B, L])``.

        Each sample draws its own random decoding order and samples residue by residue from
        ``softmax(logits / temperature)`` (X excluded), caching every decoder layer's state of
        the decoded residues (a decoded residue's state depends only on residues decoded before
        it, so this equals :meth:`decode` on the final sequence). ``log_probs`` are the model's
        temperature-1 log-probabilities of the sampled residues; non-nodes keep the native
        residue (X clamped to index 19) and log-prob 0; callers mark them (see predict.design).
        """
        enc = self.encode(batch)
        b = batch["aatype"].shape[0]
        tiled = {key: value.repeat(n_samples, *([1] * (value.dim() - 1))) for key, value in enc.items()}
        tokens, logp = self._sample_one(tiled, batch["aatype"].repeat(n_samples, 1), temperature, generator)
        return tokens.reshape(n_samples, b, -1), logp.reshape(n_samples, b, -1)

    def _sample_one(self, enc: dict[str, Tensor], native: Tensor, temperature: float,
                    generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        e, e_idx, edge_mask, node_mask, h_enc = enc["e"], enc["e_idx"], enc["edge_mask"], enc["node_mask"], enc["h"]
        rank = self.random_rank(node_mask, generator)
        order = torch.argsort(rank, dim=-1)
        rows = torch.arange(native.shape[0], device=native.device)
        tokens = native.clamp(max=UNK_INDEX - 1).clone()
        logp_out = torch.zeros(tokens.shape, device=tokens.device)
        states = [h_enc] + [torch.zeros_like(h_enc) for _ in self.decoder]
        s_all = torch.zeros_like(h_enc)  # sequence embeddings of decoded residues
        for step in range(tokens.shape[1]):
            pos = order[:, step]
            idx = e_idx[rows, pos][:, None]  # [B, 1, K]
            before = (gather_nodes(rank[..., None], idx)[..., 0] < rank[rows, pos][:, None, None])[..., None]
            before = before.to(e.dtype)
            e_pos, m_pos, n_pos = e[rows, pos][:, None], edge_mask[rows, pos][:, None], node_mask[rows, pos][:, None]
            s_j, enc_j = gather_nodes(s_all, idx), gather_nodes(h_enc, idx)
            h = h_enc[rows, pos][:, None]
            for layer_index, layer in enumerate(self.decoder):
                visible = layer.w_seq(s_j) + layer.w_nb(gather_nodes(states[layer_index], idx))
                pre = layer.w_edge(e_pos) + before * visible + (1.0 - before) * layer.w_nb(enc_j)
                h = layer(h, pre, m_pos, n_pos)
                states[layer_index + 1][rows, pos] = h[:, 0]
            row = self.out(h[:, 0]).float()[:, :UNK_INDEX]
            probs = torch.softmax(row / max(temperature, 1e-6), -1)
            choice = torch.multinomial(probs, 1, generator=generator)[:, 0]
            active = node_mask[rows, pos]
            tokens[rows, pos] = torch.where(active, choice, tokens[rows, pos])
            chosen = torch.log_softmax(row, -1).gather(-1, choice[:, None])[:, 0]
            logp_out[rows, pos] = torch.where(active, chosen, torch.zeros_like(chosen))
            s_all[rows, pos] = self.seq_embed(tokens[rows, pos])
        return tokens, logp_out
