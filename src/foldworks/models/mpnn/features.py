"""ProteinMPNN graph featurisation: virtual Cβ, k-NN graph, 25 RBF atom-pair blocks, positional classes.

Follows ProteinMPNN (Dauparas et al. 2022, Science 378:49; supplementary methods "Model
architecture") for the full-backbone model. Shapes: ``B`` chains, ``L`` residues,
``K = min(k, L)`` neighbours, ``H`` hidden width. Coordinates are in Å, atom order N, CA, C, O.

The module :class:`ProteinFeatures` has ProteinMPNN's parameter layout
(``embeddings.linear``, ``edge_embedding``, ``norm_edges``), so released weights load by name.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from foldworks.constants import RESTYPES, UNK_INDEX

#: ProteinMPNN's 21-token alphabet (index 20 = X).
ALPHABET = "ACDEFGHIKLMNPQRSTVWYX"
N_TOKENS = len(ALPHABET)
#: ``aatype`` (``constants.RESTYPES`` order, 20 = X) → ProteinMPNN token, as a lookup table.
AATYPE_TO_TOKEN = torch.tensor([ALPHABET.index(a) for a in RESTYPES] + [N_TOKENS - 1])
#: ProteinMPNN token → ``aatype``.
TOKEN_TO_AATYPE = torch.tensor([RESTYPES.index(a) if a in RESTYPES else UNK_INDEX for a in ALPHABET])
BACKBONE_ATOM37 = (0, 1, 2, 4)  # atom37 slots of N, CA, C, O
N_RBF, RBF_MIN, RBF_MAX = 16, 2.0, 22.0
N_POSITIONAL, MAX_RELATIVE = 16, 32
#: The 25 atom pairs (centre atom, neighbour atom) in ProteinMPNN's order; the first uses the graph's Cα distance.
ATOM_PAIRS = (("Ca", "Ca"), ("N", "N"), ("C", "C"), ("O", "O"), ("Cb", "Cb"), ("Ca", "N"), ("Ca", "C"),
              ("Ca", "O"), ("Ca", "Cb"), ("N", "C"), ("N", "O"), ("N", "Cb"), ("Cb", "C"), ("Cb", "O"),
              ("O", "C"), ("N", "Ca"), ("C", "Ca"), ("O", "Ca"), ("Cb", "Ca"), ("C", "N"), ("O", "N"),
              ("Cb", "N"), ("C", "Cb"), ("O", "Cb"), ("C", "O"))
_ATOM_SLOT = {"N": 0, "Ca": 1, "C": 2, "O": 3, "Cb": 4}


def virtual_cb(X: Tensor) -> Tensor:
    """Virtual Cβ ``[..., 3]`` (Å) from backbone ``X [..., 4, 3]`` (ProteinMPNN's ideal-geometry constants)."""
    b = X[..., 1, :] - X[..., 0, :]
    c = X[..., 2, :] - X[..., 1, :]
    a = torch.cross(b, c, dim=-1)
    return -0.58273431 * a + 0.56802827 * b - 0.54067466 * c + X[..., 1, :]


def gather_nodes(nodes: Tensor, e_idx: Tensor) -> Tensor:
    """Neighbour features ``[B, L, K, C]`` of ``nodes [B, L, C]`` at ``e_idx [B, L, K]``."""
    b, l, k = e_idx.shape
    flat = e_idx.reshape(b, l * k, 1).expand(-1, -1, nodes.shape[-1])
    return torch.gather(nodes, 1, flat).reshape(b, l, k, nodes.shape[-1])


def gather_edges(edges: Tensor, e_idx: Tensor) -> Tensor:
    """Pair features ``[B, L, K, C]`` of ``edges [B, L, L, C]`` at ``e_idx [B, L, K]``."""
    return torch.gather(edges, 2, e_idx[..., None].expand(-1, -1, -1, edges.shape[-1]))


def cat_neighbors_nodes(nodes: Tensor, edges: Tensor, e_idx: Tensor) -> Tensor:
    """``[edges, nodes_j]`` along the last axis: ``[B, L, K, C_e + C_n]`` (edges first)."""
    return torch.cat([edges, gather_nodes(nodes, e_idx)], dim=-1)


def knn_graph(ca: Tensor, mask: Tensor, top_k: int, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Nearest neighbours by Cα distance: ``(D_neighbors [B, L, K] Å, E_idx [B, L, K])``, nearest first.

    ``D = m_ij·sqrt(|Δ|² + eps)``; pairs with a masked residue get the row maximum added, so they
    rank last but can still be selected when a row has fewer than ``K`` valid residues. Self is
    included. ``K = min(top_k, L)``.
    """
    mask_2d = mask[:, None, :] * mask[:, :, None]
    diff = ca[:, None, :, :] - ca[:, :, None, :]
    dist = mask_2d * torch.sqrt((diff ** 2).sum(-1) + eps)
    d_max, _ = dist.max(-1, keepdim=True)
    adjusted = dist + (1.0 - mask_2d) * d_max
    return torch.topk(adjusted, min(top_k, ca.shape[1]), dim=-1, largest=False)


def rbf(dist: Tensor) -> Tensor:
    """16 Gaussians ``exp(-((d - μ)/σ)²)``, μ = linspace(2, 22, 16) Å, σ = 20/16 Å → ``[..., 16]``."""
    mu = torch.linspace(RBF_MIN, RBF_MAX, N_RBF, device=dist.device, dtype=dist.dtype)
    sigma = (RBF_MAX - RBF_MIN) / N_RBF
    return torch.exp(-(((dist[..., None] - mu) / sigma) ** 2))


def pair_rbf(a: Tensor, b: Tensor, e_idx: Tensor) -> Tensor:
    """RBF ``[B, L, K, 16]`` of ``|a_i - b_j|`` for atom ``a`` of centre i and ``b`` of neighbour j (``[B, L, 3]``)."""
    d = torch.sqrt(((a[:, :, None, :] - b[:, None, :, :]) ** 2).sum(-1) + 1e-6)  # [B, L, L]
    return rbf(gather_edges(d[..., None], e_idx)[..., 0])


def positional_classes(residue_idx: Tensor, chain_labels: Tensor, e_idx: Tensor) -> Tensor:
    """Relative-position class ``[B, L, K]`` in 0..65: ``clip(i - j + 32, 0, 64)`` within a chain, 65 across chains."""
    offset = residue_idx[:, :, None] - gather_nodes(residue_idx[..., None], e_idx)[..., 0]
    same = (chain_labels[:, :, None] == gather_nodes(chain_labels[..., None], e_idx)[..., 0]).long()
    clipped = torch.clip(offset + MAX_RELATIVE, 0, 2 * MAX_RELATIVE)
    return clipped * same + (1 - same) * (2 * MAX_RELATIVE + 1)


class PositionalEncodings(nn.Module):
    """One-hot of the 66 relative-position classes → ``Linear(66, 16)``."""

    def __init__(self, num_embeddings: int = N_POSITIONAL) -> None:
        super().__init__()
        self.linear = nn.Linear(2 * MAX_RELATIVE + 2, num_embeddings)

    def forward(self, classes: Tensor) -> Tensor:
        """``classes [B, L, K]`` long → ``[B, L, K, 16]``."""
        return self.linear(F.one_hot(classes, 2 * MAX_RELATIVE + 2).to(self.linear.weight.dtype))


class ProteinFeatures(nn.Module):
    """Backbone → edge features ``E [B, L, K, H]`` and graph ``E_idx [B, L, K]`` (supplement "Model").

    ``augment_eps`` (Å) adds Gaussian noise to all four backbone atoms in training mode, and also in
    eval mode when ``noise_in_eval`` is set (ProteinMPNN's design script does so for ``--backbone_noise``).
    """

    def __init__(self, edge_features: int, top_k: int = 48, augment_eps: float = 0.0) -> None:
        super().__init__()
        self.top_k, self.augment_eps, self.noise_in_eval = top_k, augment_eps, False
        self.embeddings = PositionalEncodings(N_POSITIONAL)
        self.edge_embedding = nn.Linear(N_POSITIONAL + len(ATOM_PAIRS) * N_RBF, edge_features, bias=False)
        self.norm_edges = nn.LayerNorm(edge_features)

    def raw_edges(self, X: Tensor, mask: Tensor, residue_idx: Tensor, chain_labels: Tensor
                  ) -> tuple[Tensor, Tensor]:
        """The 416-wide edge input ``[B, L, K, 16 + 25·16]`` (positional | RBF blocks) and ``E_idx``."""
        if (self.training or self.noise_in_eval) and self.augment_eps > 0:
            X = X + self.augment_eps * torch.randn_like(X)
        atoms = [X[..., 0, :], X[..., 1, :], X[..., 2, :], X[..., 3, :], virtual_cb(X)]
        d_neighbors, e_idx = knn_graph(atoms[1], mask, self.top_k)
        blocks = [rbf(d_neighbors)]
        for a, b in ATOM_PAIRS[1:]:
            blocks.append(pair_rbf(atoms[_ATOM_SLOT[a]], atoms[_ATOM_SLOT[b]], e_idx))
        pos = self.embeddings(positional_classes(residue_idx, chain_labels, e_idx))
        return torch.cat([pos, *blocks], dim=-1), e_idx

    def forward(self, X: Tensor, mask: Tensor, residue_idx: Tensor, chain_labels: Tensor) -> tuple[Tensor, Tensor]:
        """``X [B, L, 4, 3]`` Å, ``mask [B, L]`` float, ``residue_idx``/``chain_labels [B, L]`` long → ``(E, E_idx)``."""
        raw, e_idx = self.raw_edges(X, mask, residue_idx, chain_labels)
        return self.norm_edges(self.edge_embedding(raw)), e_idx


def batch_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """ProteinMPNN inputs from a foldworks batch (see :mod:`foldworks.models.common`).

    Returns ``X [B, L, 4, 3]`` (0 where missing), ``S [B, L]`` tokens, ``mask [B, L]`` float (1 =
    present with all four of N, CA, C, O), ``residue_idx``, ``chain_encoding_all`` (1-based; 0 on
    padding) and ``chain_M [B, L]`` (designed positions; ``design_mask`` when the batch has one).
    """
    slots = list(BACKBONE_ATOM37)
    X = batch["all_atom_positions"][:, :, slots].float()
    complete = batch["all_atom_mask"][:, :, slots].all(-1) & batch["mask"]
    mask = complete.float()
    chain = batch.get("chain_index")
    chain = (chain + 1) if chain is not None else torch.ones_like(batch["residue_index"])
    chain = chain * batch["mask"].long()
    S = AATYPE_TO_TOKEN.to(batch["aatype"].device)[batch["aatype"].clamp(0, UNK_INDEX)]
    chain_M = batch.get("design_mask", batch["mask"]).float()
    return {"X": X * mask[..., None, None], "S": S, "mask": mask, "residue_idx": batch["residue_index"],
            "chain_encoding_all": chain, "chain_M": chain_M}
