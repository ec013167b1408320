"""Memory estimate of a whole-chain prediction, checked before the model runs.

Prediction never crops (the metrics score whole chains), so a long chain on a model with a pair
representation needs memory growing as ``L²`` (pair activations) and, with triangle attention,
``L³`` (attention logits of one block). :func:`estimate_inference_bytes` gives a deliberately
generous estimate; :func:`check_memory` refuses a chain whose estimate exceeds the limit
(``predict.max_memory_gb``) with an error naming the chain and the memory it would need.
"""

from __future__ import annotations

from torch import nn

#: fp32 bytes per value.
BYTES = 4
#: Pair-sized ``[L, L, c_z]`` tensors alive at the peak of a pair block under ``no_grad``: the
#: pair itself, its layer norm, the triangle update's left/right projections and gates, output
#: gate and update, the residual sum; rounded up.
PAIR_COPIES = 12
#: ``[L, L, c_m]``-sized MSA tensors (row attention input, norm, q/k/v, gate, output) per row.
MSA_COPIES = 8


class ChainTooLarge(RuntimeError):
    """Predicting a chain whole would exceed the memory limit; the message names the chain."""


def _attribute(model: nn.Module, names: tuple[str, ...]) -> int:
    """The first positive int attribute of ``model`` (or its ``config`` dict) among ``names``; 0 if none."""
    config = getattr(model, "config", None)
    for name in names:
        value = getattr(model, name, None)
        if value is None and isinstance(config, dict):
            value = config.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def estimate_inference_bytes(model: nn.Module, length: int, msa_rows: int) -> int:
    """Estimated peak activation bytes of predicting a chain of ``length`` residues with
    ``msa_rows`` MSA rows (fp32, no gradients); weights not included.

    A model may define ``inference_memory_bytes(length, msa_rows)`` itself; otherwise the estimate
    is built from its ``c_z`` (pair channels), ``c_m`` (MSA channels) and the triangle-attention
    heads (``n_heads_pair``/``tri_heads``; without chunking one block holds ``heads × L³`` logits)
    found as attributes. A family without a pair representation gets 0 (nothing to check).
    """
    custom = getattr(model, "inference_memory_bytes", None)
    if callable(custom):
        return int(custom(length, msa_rows))
    c_z = _attribute(model, ("c_z",))
    if c_z == 0:
        return 0
    c_m = _attribute(model, ("c_m",))
    heads = _attribute(model, ("n_heads_pair", "tri_heads", "n_heads_tri"))
    pair = PAIR_COPIES * c_z * length * length
    msa = MSA_COPIES * c_m * msa_rows * length + msa_rows * length * length  # + row-attention logits / head
    triangle = heads * length ** 3
    return BYTES * (pair + msa + triangle)


def check_memory(model: nn.Module, target: str, length: int, msa_rows: int, max_memory_gb: float) -> float:
    """Estimated GiB for ``target``; raises :class:`ChainTooLarge` when it exceeds
    ``max_memory_gb`` (0 or less: no limit)."""
    needed = estimate_inference_bytes(model, length, msa_rows) / 2 ** 30
    if max_memory_gb > 0 and needed > max_memory_gb:
        raise ChainTooLarge(
            f"{target}: predicting the whole chain ({length} residues, {msa_rows} MSA rows) needs an "
            f"estimated {needed:.1f} GiB of activations, over predict.max_memory_gb = {max_memory_gb:g}; "
            f"raise the limit on a machine with more memory, or drop the chain (chains.filters.length_max)")
    return needed
