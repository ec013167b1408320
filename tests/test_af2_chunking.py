"""Automatic cache-sized attention chunks on CPU: same outputs, and with gradients the same gradients."""

from __future__ import annotations

import torch

from foldworks.models.af2 import evoformer, primitives
from foldworks.models.af2.primitives import Attention, cpu_chunk_rows

torch.set_num_threads(1)


def _attention_inputs(seed: int = 0) -> tuple[Attention, torch.Tensor, list[torch.Tensor]]:
    torch.manual_seed(seed)
    att = Attention(8, 8, 4, 2)
    for p in att.parameters():  # the gating/output layers start at zero: perturb so every path counts
        p.data.add_(0.1 * torch.randn_like(p))
    x = torch.randn(9, 7, 8)  # rows 9, queries 7, channels 8
    mask = (torch.rand(9, 7) > 0.2).float()
    biases = [primitives.mask_bias(mask)[:, None, None, :], torch.randn(1, 2, 7, 7)]
    return att, x, biases


def test_cpu_chunk_rows_bounds_the_logits_per_chunk() -> None:
    x = torch.zeros(3, 50, 20, 8)  # lead 3, rows 50, queries 20
    per_row = 3 * 4 * 20 * 20
    rows = cpu_chunk_rows(x, x, num_heads=4)
    assert rows == primitives.CPU_CHUNK_ELEMENTS // per_row
    assert cpu_chunk_rows(torch.zeros(2, 4096, 8), torch.zeros(2, 4096, 8), num_heads=8) == 1


def _spy_on_attend(monkeypatch, att: Attention) -> list[int]:
    """Rows of every ``_attend`` call (one call per chunk), recorded in the returned list."""
    calls: list[int] = []
    original = att._attend
    monkeypatch.setattr(att, "_attend", lambda q, kv, b: calls.append(q.shape[0]) or original(q, kv, b))
    return calls


def test_automatic_chunks_match_unchunked(monkeypatch) -> None:
    att, x, biases = _attention_inputs()
    monkeypatch.setattr(att, "chunk_size", 9)  # one call: the reference
    with torch.no_grad():
        whole = att(x, x, biases)
    monkeypatch.setattr(att, "chunk_size", None)
    calls = _spy_on_attend(monkeypatch, att)
    monkeypatch.setattr(primitives, "CPU_CHUNK_ELEMENTS", 2 * 2 * 7 * 7)  # two rows per chunk
    with torch.no_grad():
        chunked = att(x, x, biases)
    assert calls == [2, 2, 2, 2, 1]
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-6)


def _grads(att: Attention, x: torch.Tensor, biases: list[torch.Tensor]) -> list[torch.Tensor]:
    att.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    tri = biases[1].clone().requires_grad_(True)
    out = att(x, x, [biases[0], tri])
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return [out.detach(), x.grad, tri.grad] + [p.grad for p in att.parameters()]


def test_chunks_with_gradients_give_the_unchunked_gradients(monkeypatch) -> None:
    att, x, biases = _attention_inputs()
    monkeypatch.setattr(att, "chunk_size", 9)
    whole = _grads(att, x, biases)
    monkeypatch.setattr(att, "chunk_size", None)
    calls = _spy_on_attend(monkeypatch, att)
    monkeypatch.setattr(primitives, "CPU_CHUNK_ELEMENTS_GRAD", 4 * 2 * 7 * 7)  # four rows per chunk
    chunked = _grads(att, x, biases)
    assert calls == [4, 4, 1]
    for a, b in zip(chunked, whole):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _opm_grads(opm, m: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    opm.zero_grad(set_to_none=True)
    m = m.clone().requires_grad_(True)
    out = opm(m, mask)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return [out.detach(), m.grad] + [p.grad for p in opm.parameters()]


def test_outer_product_mean_chunks_give_the_unchunked_values_and_gradients(monkeypatch) -> None:
    torch.manual_seed(0)
    opm = evoformer.OuterProductMean(c_m=8, c_z=6, c_hidden=3)
    for p in opm.parameters():  # linear_out starts at zero: perturb so every path counts
        p.data.add_(0.1 * torch.randn_like(p))
    m, mask = torch.randn(5, 7, 8), (torch.rand(5, 7) > 0.2).float()
    monkeypatch.setattr(evoformer, "CPU_CHUNK_ELEMENTS", 1 << 30)  # one step: the reference
    whole = _opm_grads(opm, m, mask)
    monkeypatch.setattr(evoformer, "CPU_CHUNK_ELEMENTS", 2 * 7 * 3 * 3)  # two residues per step
    chunked = _opm_grads(opm, m, mask)
    for a, b in zip(chunked, whole):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_triangle_multiplication_with_a_batch_dimension_equals_each_sample() -> None:
    torch.manual_seed(0)
    for outgoing in (True, False):
        tri = evoformer.TriangleMultiplication(c_z=6, c_hidden=4, outgoing=outgoing)
        for p in tri.parameters():
            p.data.add_(0.1 * torch.randn_like(p))
        z, mask = torch.randn(2, 5, 5, 6), (torch.rand(2, 5, 5) > 0.2).float()
        batched = tri(z, mask)
        for i in range(2):
            torch.testing.assert_close(batched[i], tri(z[i], mask[i]), rtol=1e-5, atol=1e-6)
