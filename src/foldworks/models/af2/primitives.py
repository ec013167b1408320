"""Building blocks shared by every AlphaFold2 module: initialised linear layers, gated multi-head
attention, global attention and shared dropout.

Parameter names follow OpenFold (``linear_q``, ``linear_g``, ...), so an OpenFold state dict loads
by identity. Initialisers follow AF2 supplement 1.11.4.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

# Masking constant of AF2's attention logits (``1e9 * (mask - 1)``).
MASK_INF = 1e9


def _truncated_normal_(weight: Tensor, scale: float) -> None:
    """Haiku's ``VarianceScaling(scale, 'fan_in', 'truncated_normal')`` on a ``[out, in]`` weight."""
    fan_in = weight.shape[1]
    std = math.sqrt(scale / max(1, fan_in)) / 0.87962566103423978  # stddev of N(0,1) truncated to ±2
    with torch.no_grad():
        nn.init.trunc_normal_(weight, mean=0.0, std=1.0, a=-2.0, b=2.0)
        weight.mul_(std)


class Linear(nn.Linear):
    """``nn.Linear`` with AF2's initialisers (supp. 1.11.4).

    ``init``: ``"default"`` LeCun (truncated) normal; ``"relu"`` He normal (layers before a ReLU);
    ``"glorot"`` Glorot uniform (attention q/k/v); ``"gating"`` W 0, b 1; ``"final"`` zeros.
    Every bias starts at 0 except gating biases.
    """

    def __init__(self, c_in: int, c_out: int, bias: bool = True, init: str = "default") -> None:
        self.init_kind = init
        super().__init__(c_in, c_out, bias=bias)

    def reset_parameters(self) -> None:  # called by nn.Linear.__init__
        kind = getattr(self, "init_kind", "default")
        if self.weight.is_meta:
            return
        if kind == "default":
            _truncated_normal_(self.weight, 1.0)
        elif kind == "relu":
            _truncated_normal_(self.weight, 2.0)
        elif kind == "glorot":
            nn.init.xavier_uniform_(self.weight)
        elif kind in ("gating", "final"):
            nn.init.zeros_(self.weight)
        else:
            raise ValueError(f"unknown initialiser {kind!r}")
        if self.bias is not None:
            nn.init.constant_(self.bias, 1.0 if kind == "gating" else 0.0)


def mask_bias(mask: Tensor) -> Tensor:
    """Additive attention bias ``1e9 · (mask − 1)`` (0 where kept, −1e9 where masked)."""
    return MASK_INF * (mask - 1.0)


# Elements of one chunk's largest intermediate on CPU (float32, ~1 MiB): attention logits, or the
# outer product mean's [i, j, c, e] product. A chunk's passes over it then stay in the core's cache
# instead of streaming through memory.
CPU_CHUNK_ELEMENTS = 1 << 18
# With gradients each attention chunk also keeps its softmax for the backward, and many small chunks
# cost more in per-chunk overhead than they save: 2^20 logits per chunk (bench/af2_step.md).
CPU_CHUNK_ELEMENTS_GRAD = 1 << 20


def cpu_chunk_rows(q_x: Tensor, kv_x: Tensor, num_heads: int, limit: int = CPU_CHUNK_ELEMENTS) -> int:
    """Rows (dim -3 of ``q_x [*, R, Q, c]``) per chunk so that one chunk's logits ``[*, r, H, Q, K]``
    hold at most ``limit`` elements (at least one row)."""
    if q_x.dim() < 3:
        return 1
    per_row = math.prod(q_x.shape[:-3]) * num_heads * q_x.shape[-2] * kv_x.shape[-2]
    return max(1, limit // max(per_row, 1))


class Attention(nn.Module):
    """Gated multi-head attention (AF2 Alg 7 core; ``Attention`` in AF2's code).

    ``q_x [*, Q, c_q]``, ``kv_x [*, K, c_kv]``; ``biases`` broadcast to ``[*, H, Q, K]``.
    Per-head width ``c_hidden``; queries scaled by ``c_hidden ** -0.5``; output ``[*, Q, c_out]``.
    """

    def __init__(self, c_q: int, c_kv: int, c_hidden: int, num_heads: int, c_out: int | None = None,
                 gating: bool = True) -> None:
        super().__init__()
        self.c_hidden, self.num_heads = c_hidden, num_heads
        hc = c_hidden * num_heads
        self.linear_q = Linear(c_q, hc, bias=False, init="glorot")
        self.linear_k = Linear(c_kv, hc, bias=False, init="glorot")
        self.linear_v = Linear(c_kv, hc, bias=False, init="glorot")
        self.linear_o = Linear(hc, c_out if c_out is not None else c_q, init="final")
        self.linear_g = Linear(c_q, hc, init="gating") if gating else None

    # Rows (dim -3 of the inputs) processed per step; None = all at once, except cache-sized chunks
    # on CPU (see :func:`cpu_chunk_rows`). Chunking changes no result. The chunks are views from
    # ``split``, whose backward concatenates the chunks' gradients (slicing would fill a full-size
    # zero tensor per chunk).
    chunk_size: int | None = None

    def forward(self, q_x: Tensor, kv_x: Tensor, biases: list[Tensor]) -> Tensor:
        rows = q_x.shape[-3] if q_x.dim() >= 3 else 1
        chunk = self.chunk_size
        if chunk is None and q_x.device.type == "cpu":
            limit = CPU_CHUNK_ELEMENTS_GRAD if torch.is_grad_enabled() else CPU_CHUNK_ELEMENTS
            chunk = cpu_chunk_rows(q_x, kv_x, self.num_heads, limit)
        if chunk is None or rows <= chunk:
            return self._attend(q_x, kv_x, biases)
        n = -(-rows // chunk)

        def split(x: Tensor, dim: int) -> list[Tensor] | tuple[Tensor, ...]:
            if x.dim() >= -dim and x.shape[dim] > 1:
                return x.split(chunk, dim=dim)
            return [x] * n

        qs, kvs = q_x.split(chunk, dim=-3), split(kv_x, -3)
        bias_chunks = [split(b, -4) for b in biases]
        outs = [self._attend(qs[i], kvs[i], [b[i] for b in bias_chunks]) for i in range(n)]
        return torch.cat(outs, dim=-3)

    def _attend(self, q_x: Tensor, kv_x: Tensor, biases: list[Tensor]) -> Tensor:
        h, c = self.num_heads, self.c_hidden
        q = self.linear_q(q_x).unflatten(-1, (h, c)).transpose(-2, -3) * (c ** -0.5)  # [*, H, Q, C]
        k = self.linear_k(kv_x).unflatten(-1, (h, c)).transpose(-2, -3)
        v = self.linear_v(kv_x).unflatten(-1, (h, c)).transpose(-2, -3)
        logits = q @ k.transpose(-1, -2)
        for b in biases:
            logits.add_(b)  # biases broadcast to the logits' shape; in place saves a [*, H, Q, K] copy
        out = (torch.softmax(logits, dim=-1) @ v).transpose(-2, -3)  # [*, Q, H, C]
        if self.linear_g is not None:
            out = out * torch.sigmoid(self.linear_g(q_x)).unflatten(-1, (h, c))
        return self.linear_o(out.flatten(-2))


class GlobalAttention(nn.Module):
    """Global attention of the extra-MSA column update (AF2 Alg 19).

    ``m [*, S, c_in]`` (the attended axis is S), ``mask [*, S]``. One query per head from the
    masked mean of ``m``; keys and values shared by the heads. Output ``[*, S, c_in]``.
    """

    def __init__(self, c_in: int, c_hidden: int, num_heads: int, eps: float = 1e-10) -> None:
        super().__init__()
        self.c_hidden, self.num_heads, self.eps = c_hidden, num_heads, eps
        self.linear_q = Linear(c_in, c_hidden * num_heads, bias=False, init="glorot")
        self.linear_k = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_v = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_g = Linear(c_in, c_hidden * num_heads, init="gating")
        self.linear_o = Linear(c_hidden * num_heads, c_in, init="final")

    def forward(self, m: Tensor, mask: Tensor) -> Tensor:
        h, c = self.num_heads, self.c_hidden
        q_avg = (m * mask[..., None]).sum(-2) / (mask.sum(-1)[..., None] + self.eps)  # [*, c_in]
        q = self.linear_q(q_avg).unflatten(-1, (h, c)) * (c ** -0.5)  # [*, H, C]
        k, v = self.linear_k(m), self.linear_v(m)  # [*, S, C]
        logits = q @ k.transpose(-1, -2) + mask_bias(mask)[..., None, :]  # [*, H, S]
        avg = torch.softmax(logits, dim=-1) @ v  # [*, H, C]
        gate = torch.sigmoid(self.linear_g(m)).unflatten(-1, (h, c))  # [*, S, H, C]
        return self.linear_o((avg[..., None, :, :] * gate).flatten(-2))


def shared_dropout(x: Tensor, rate: float, shared_dim: int, training: bool) -> Tensor:
    """Dropout whose mask is shared along ``shared_dim`` (AF2 supp. 1.11.6: row-wise dropout
    shares along rows, column-wise along columns). Identity in eval mode or at rate 0."""
    if not training or rate == 0.0:
        return x
    shape = list(x.shape)
    shape[shared_dim] = 1
    keep = torch.bernoulli(torch.full(shape, 1.0 - rate, dtype=x.dtype, device=x.device))
    return x * keep / (1.0 - rate)
