"""Analytical model FLOPs of the ``evoformer`` family (AF2/OpenFold architecture), per training step.

Counts the matrix products only (linear layers, attention logits and weighted sums, outer-product
mean, triangle products): 2 FLOPs per multiply-add. Layer norms, softmax, activations and the
all-atom construction are a few % and are left out, as in the usual MFU accounting. Symbols: ``L``
crop (residues), ``N`` MSA rows, ``B`` chains per step; channel sizes as in the AF2 supplement.

Per Evoformer block (Alg 6), multiply-adds:

- MSA row attention with pair bias (Alg 7), ``H = heads x c_hidden``:
  q, k, v, gate, out ``5 N L c_m H`` + logits and weighted sum ``2 N L² H`` + pair bias ``L² c_z h``
- MSA column attention (Alg 8): ``5 N L c_m H + 2 L N² H``
- MSA transition (Alg 9), factor ``n``: ``2 n N L c_m²``
- outer-product mean (Alg 10), hidden ``c``: ``2 N L c_m c + N L² c² + L² c² c_z``
- triangle multiplication outgoing and incoming (Alg 11, 12), hidden ``c_t`` each: projections
  and gates ``4 L² c_z c_t``, output gate ``L² c_z²``, triangle product ``L³ c_t``, output ``L² c_t c_z``
- triangle attention starting and ending node (Alg 13, 14), ``H_t = h_t c`` each:
  ``5 L² c_z H_t + L² c_z h_t + 2 L³ H_t``
- pair transition: ``2 n L² c_z²``

Structure module (Alg 20), ``n_layers`` layers with shared weights, IPA (Alg 22) with ``h``
heads, ``c`` channels, ``p_qk``/``p_v`` points: projections ``L c_s h (3 c + 3 (2 p_qk + p_v))``,
pair bias ``L² c_z h``, logits ``L² h (c + 3 p_qk)``, outputs ``L² h (c + 3 p_v + c_z)``, output
linear ``L h (c_z + c + 4 p_v) c_s``; transition ``3 L c_s²``; backbone update ``6 L c_s``;
angle resnet (Alg 20 l. 11-14) ``L (2 c_s c_r + 4 c_r² + 14 c_r)``. Plus the single projection
``L c_m c_s``, input embedding ``N L (msa_dim + tf_dim) c_m + L² 65 c_z`` (one-hot relative
positions as a linear), recycling ``L² 15 c_z`` and the heads: distogram ``L² c_z 64``, PAE
``L² c_z 64``, masked MSA ``N L c_m 23``, pLDDT ``L (c_s c_r + c_r² + 50 c_r)``.

A training step (AF2 1.10): ``n_cycle = 1 + r``, ``r`` uniform in ``0..max_recycles``, all but the last without
gradients (1 forward each), the last with forward + backward (3 forwards). Model FLOPs per step =
``B F (E[n_cycle] - 1 + 3)``. Activation checkpointing recomputes a forward of the blocks; that is
hardware work, not model FLOPs, and is not counted (MFU, not HFU).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvoformerSizes:
    """Channel sizes (AF2 / OpenFold defaults) of one configuration."""

    n_blocks: int = 48
    c_m: int = 256
    c_z: int = 128
    c_s: int = 384
    c_hidden_msa: int = 32
    n_heads_msa: int = 8
    c_hidden_opm: int = 32
    c_hidden_mul: int = 128
    c_hidden_tri: int = 32
    n_heads_tri: int = 4
    transition_n: int = 4
    n_struct_layers: int = 8
    c_ipa: int = 16
    n_heads_ipa: int = 12
    n_qk_points: int = 4
    n_v_points: int = 8
    c_resnet: int = 128
    msa_dim: int = 25   #: foldworks MSA features: 23-class one-hot + 2 deletion features
    tf_dim: int = 45    #: foldworks target features: 21 one-hot + 22 profile + 2 deletion
    use_pae_head: bool = False
    max_recycles: int = 3
    max_msa_clusters: int = 128


def sizes_from_config(cfg: dict) -> EvoformerSizes:
    """:class:`EvoformerSizes` from the family's resolved config (``model.cfg``)."""
    fields = EvoformerSizes.__dataclass_fields__
    return EvoformerSizes(**{key: cfg[key] for key in fields if key in cfg})


def block_macs(s: EvoformerSizes, length: int, rows: int) -> float:
    """Multiply-adds of one Evoformer block on ``rows`` x ``length``."""
    L, N = float(length), float(rows)
    H = s.n_heads_msa * s.c_hidden_msa
    row = 5 * N * L * s.c_m * H + 2 * N * L * L * H + L * L * s.c_z * s.n_heads_msa
    col = 5 * N * L * s.c_m * H + 2 * L * N * N * H
    msa_transition = 2 * s.transition_n * N * L * s.c_m ** 2
    c = s.c_hidden_opm
    opm = 2 * N * L * s.c_m * c + N * L * L * c * c + L * L * c * c * s.c_z
    ct = s.c_hidden_mul
    tri_mul = 2 * (4 * L * L * s.c_z * ct + L * L * s.c_z ** 2 + L ** 3 * ct + L * L * ct * s.c_z)
    Ht = s.n_heads_tri * s.c_hidden_tri
    tri_att = 2 * (5 * L * L * s.c_z * Ht + L * L * s.c_z * s.n_heads_tri + 2 * L ** 3 * Ht)
    pair_transition = 2 * s.transition_n * L * L * s.c_z ** 2
    return row + col + msa_transition + opm + tri_mul + tri_att + pair_transition


def structure_macs(s: EvoformerSizes, length: int) -> float:
    """Multiply-adds of the structure module (all layers) and the single projection."""
    L = float(length)
    h, c, pq, pv = s.n_heads_ipa, s.c_ipa, s.n_qk_points, s.n_v_points
    ipa = (L * s.c_s * h * (3 * c + 3 * (2 * pq + pv)) + L * L * s.c_z * h + L * L * h * (c + 3 * pq)
           + L * L * h * (c + 3 * pv + s.c_z) + L * h * (s.c_z + c + 4 * pv) * s.c_s)
    layer = ipa + 3 * L * s.c_s ** 2 + 6 * L * s.c_s
    layer += L * (2 * s.c_s * s.c_resnet + 4 * s.c_resnet ** 2 + 14 * s.c_resnet)
    return s.n_struct_layers * layer + L * s.c_m * s.c_s + L * s.c_s * s.c_s  # + initial single linear


def embed_and_heads_macs(s: EvoformerSizes, length: int, rows: int) -> float:
    """Input embedder, recycling embedder and heads."""
    L, N = float(length), float(rows)
    embed = N * L * (s.msa_dim + s.tf_dim) * s.c_m + L * L * 65 * s.c_z + 2 * L * s.tf_dim * s.c_z
    recycle = L * L * 15 * s.c_z
    heads = (1 + s.use_pae_head) * L * L * s.c_z * 64 + N * L * s.c_m * 23 + L * (s.c_s * s.c_resnet + s.c_resnet ** 2 + 50 * s.c_resnet)
    return embed + recycle + heads


def forward_flops(s: EvoformerSizes, length: int, rows: int) -> float:
    """FLOPs of one forward pass (one recycling iteration) for one chain."""
    macs = s.n_blocks * block_macs(s, length, rows) + structure_macs(s, length)
    return 2.0 * (macs + embed_and_heads_macs(s, length, rows))


def step_flops(s: EvoformerSizes, length: int, rows: int, batch: int, mean_cycles: float | None = None) -> float:
    """Model FLOPs of one training step: ``batch x F x (E[n_cycle] - 1 + 3)``; ``E[n_cycle]`` =
    ``1 + max_recycles / 2`` (recycles uniform in ``0..max_recycles``) unless ``mean_cycles`` is
    given. ``rows`` is capped at ``max_msa_clusters`` (the rows the Evoformer sees)."""
    expected = 1.0 + s.max_recycles / 2.0 if mean_cycles is None else mean_cycles
    rows = min(rows, s.max_msa_clusters)
    return batch * forward_flops(s, length, rows) * (expected - 1.0 + 3.0)


#: Dense bf16 tensor-core peak, FLOP/s (vendor data sheets; "dense" = without sparsity).
GPU_BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


def bf16_peak(device_name: str) -> float | None:
    """Peak bf16 FLOP/s for a CUDA device name (``torch.cuda.get_device_name``), ``None`` if unknown."""
    for key, value in GPU_BF16_PEAK.items():
        if key.lower() in device_name.lower():
            return value
    return None


def check_against_torch(cases: list[tuple[str, dict, int, int]] | None = None) -> list[str]:
    """Compare :func:`forward_flops` with ``torch.utils.flop_counter.FlopCounterMode`` on one
    no-recycling eval forward of the real family (random inputs); Markdown table rows."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from foldworks.models import build_model

    torch.set_num_threads(1)
    cases = cases or [("cpu_small", {}, 64, 16),
                      ("cpu_small", {"n_blocks": 4, "c_m": 64, "c_z": 64, "use_pae_head": True}, 96, 16),
                      ("openfold_initial", {"n_blocks": 2}, 64, 32)]
    rows = []
    for preset, overrides, length, depth in cases:
        model = build_model("evoformer", {"preset": preset, **overrides}).eval()
        model.cfg["max_recycles"] = 0
        g = torch.Generator().manual_seed(0)
        batch = {"aatype": torch.randint(0, 20, (1, length), generator=g),
                 "msa": torch.randint(0, 22, (1, depth, length), generator=g),
                 "msa_mask": torch.ones(1, depth, dtype=torch.bool), "deletion_matrix": torch.zeros(1, depth, length),
                 "mask": torch.ones(1, length, dtype=torch.bool), "residue_mask": torch.ones(1, length, dtype=torch.bool),
                 "residue_index": torch.arange(length)[None], "ca_coords": torch.zeros(1, length, 3),
                 "all_atom_positions": torch.zeros(1, length, 37, 3),
                 "all_atom_mask": torch.zeros(1, length, 37, dtype=torch.bool)}
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(batch)
        counted = counter.get_total_flops()
        sizes = sizes_from_config(model.cfg)
        formula = forward_flops(sizes, length, min(depth, sizes.max_msa_clusters))
        rows.append(f"| {preset} {overrides or ''} | {length} | {depth} | {counted / 1e9:.3f} | {formula / 1e9:.3f} "
                    f"| {formula / counted:.3f} |")
    return rows


if __name__ == "__main__":
    print("| preset | L | MSA rows | FlopCounterMode GFLOP | formula GFLOP | ratio |\n|---|---:|---:|---:|---:|---:|")
    print("\n".join(check_against_torch()))
