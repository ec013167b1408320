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


def _sizes(model: nn.Module) -> dict:
    """The model's size settings: its resolved ``cfg``/``config`` dict, else its int attributes."""
    for name in ("cfg", "config"):
        value = getattr(model, name, None)
        if isinstance(value, dict):
            return value
    return {k: v for k, v in vars(model).items() if isinstance(v, int)}


def estimate_inference_bytes(model: nn.Module, length: int, msa_rows: int) -> int:
    """Estimated peak activation bytes of predicting a chain of ``length`` residues with
    ``msa_rows`` MSA rows (fp32, no gradients); weights not included.

    A model may define ``estimate_inference_bytes(length, msa_rows)`` itself (the ``evoformer``
    family does, calibrated against measured peak RSS); otherwise the estimate
    is built from its size settings (``cfg``/``config`` dict or attributes): ``c_z`` (pair
    channels), ``c_m`` (MSA channels), ``max_msa_clusters`` (rows the trunk sees),
    ``n_heads_tri`` / ``n_heads_msa`` (attention logits of one block: ``heads × rows × L²``, with
    ``chunk_size`` ``heads × chunk × L²``). A family without ``c_z`` gets 0 (nothing to check).
    """
    custom = getattr(model, "estimate_inference_bytes", None)
    if callable(custom):
        return int(custom(length, msa_rows))
    sizes = _sizes(model)
    c_z = int(sizes.get("c_z") or 0)
    if c_z <= 0:
        return 0
    rows = min(msa_rows, int(sizes.get("max_msa_clusters") or msa_rows))
    chunk = int(sizes.get("chunk_size") or 0)
    def sliced(n: int) -> int:
        return min(n, chunk) if chunk > 0 else n
    pair = PAIR_COPIES * c_z * length * length
    msa = MSA_COPIES * int(sizes.get("c_m") or 0) * rows * length
    logits = (int(sizes.get("n_heads_tri") or 0) * sliced(length) * length * length
              + int(sizes.get("n_heads_msa") or 0) * sliced(rows) * length * length)
    return BYTES * (pair + msa + logits)


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
