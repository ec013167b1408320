"""``mpnn`` reproduces ProteinMPNN on its reference fixtures (every checkpoint × every chain listed).

Fixture folder: ``$FOLDWORKS_MPNN_REFERENCE`` or ``../shared/mpnn_reference`` (``manifest.json``,
``<ckpt>.pt``, ``<chain>/inputs.npz``, ``<chain>/outputs*.npz``, ``pdb/<chain>.pdb``). Each
checkpoint is loaded through :func:`read_proteinmpnn`; outputs are compared at 2e-5 absolute
(float32 rounding is ~3e-6; the smallest real bug measured moves log_probs by ~1e-4).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from foldworks.models.mpnn import MPNNModel, conditional_probs, sample, sequence_scores, unconditional_probs
from foldworks.models.weights.proteinmpnn import read_proteinmpnn

pytestmark = pytest.mark.mpnn_parity
ATOL = 2e-5


def reference_dir() -> Path | None:
    for candidate in (os.environ.get("FOLDWORKS_MPNN_REFERENCE"),
                      str(Path(__file__).resolve().parents[1].parent / "shared" / "mpnn_reference")):
        if candidate and (Path(candidate) / "manifest.json").exists():
            return Path(candidate)
    return None


REF = reference_dir()
MANIFEST = json.loads((REF / "manifest.json").read_text()) if REF else {"checkpoints": {}, "chains": {}}


def _file_name(kind: str, ckpt: str, chain_files: dict) -> str:
    """``<kind>_<tag>.npz`` when the checkpoint name starts with ``<tag>_`` (e.g. ``small``), else ``<kind>.npz``."""
    tagged = [n for n in chain_files if n.startswith(f"{kind}_") and ckpt.startswith(n[len(kind) + 1:-4] + "_")]
    return tagged[0] if tagged else f"{kind}.npz"


CASES = [(c, ch) for c in MANIFEST["checkpoints"] for ch in MANIFEST["chains"]]


@pytest.fixture(scope="module")
def models() -> dict[str, MPNNModel]:
    if REF is None:
        pytest.skip("ProteinMPNN reference fixtures not found: set FOLDWORKS_MPNN_REFERENCE or provide "
                    "../shared/mpnn_reference")
    torch.set_num_threads(1)
    out = {}
    for name, entry in MANIFEST["checkpoints"].items():
        state, config = read_proteinmpnn(REF / entry["file"])
        assert config["hidden"] == entry["hidden_dim"] and config["k_neighbors"] == entry["num_edges"]
        assert config["n_encoder"] == entry["num_encoder_layers"] and config["n_decoder"] == entry["num_decoder_layers"]
        model = MPNNModel(**config)
        model.load_state_dict(state)
        out[name] = model.eval()
    return out


def load_case(ckpt: str, chain: str) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    files = MANIFEST["chains"][chain]["files"]
    inputs = dict(np.load(REF / chain / "inputs.npz"))
    outputs = dict(np.load(REF / chain / _file_name("outputs", ckpt, files)))
    tensors = {k: torch.from_numpy(np.asarray(v)) for k, v in inputs.items() if k != "native_seq"}
    return tensors, outputs


def close(actual: torch.Tensor, expected: np.ndarray, what: str) -> None:
    diff = np.abs(actual.detach().double().numpy() - expected.astype(np.float64)).max()
    assert diff <= ATOL, f"{what}: max abs diff {diff:.3g} > {ATOL}"


@pytest.mark.parametrize("ckpt,chain", CASES)
def test_graph_features_and_encoder(models, ckpt, chain):
    """Neighbours, virtual Cβ, the 416-wide edge input, embedded edges and encoder states at the stored rows."""
    x, _ = load_case(ckpt, chain)
    ref = np.load(REF / chain / _file_name("intermediates", ckpt, MANIFEST["chains"][chain]["files"]))
    model, rows = models[ckpt], torch.from_numpy(ref["rows"])
    from foldworks.models.mpnn.features import virtual_cb

    with torch.no_grad():
        raw, e_idx = model.features.raw_edges(x["X"], x["mask"], x["residue_idx"], x["chain_encoding_all"])
        E = model.features.norm_edges(model.features.edge_embedding(raw))
        h_V, h_E, _ = model.encode(x["X"], x["mask"], x["residue_idx"], x["chain_encoding_all"])
    assert np.array_equal(e_idx.numpy(), ref["E_idx"]), f"{ckpt}/{chain}: neighbour lists differ"
    close(virtual_cb(x["X"]), ref["Cb"], "Cb")
    close(raw[:, rows], ref["E_raw_rows"], "E_raw rows")
    close(E[:, rows], ref["E_rows"], "E rows")
    close(h_V, ref["h_V_encoder"], "h_V after the encoder")
    close(h_E[:, rows], ref["h_E_encoder_rows"], "h_E after the encoder")


@pytest.mark.parametrize("ckpt,chain", CASES)
def test_log_probs_and_scores(models, ckpt, chain):
    x, ref = load_case(ckpt, chain)
    with torch.no_grad():
        log_probs, order = models[ckpt].log_probs(x["X"], x["S"], x["mask"], x["chain_M"] * x["chain_M_pos"],
                                                  x["residue_idx"], x["chain_encoding_all"], x["randn_1"])
    assert np.array_equal(order.numpy(), ref["decoding_order_forward"])
    close(log_probs, ref["log_probs"], f"{ckpt}/{chain} log_probs")
    designed = x["mask"] * x["chain_M"] * x["chain_M_pos"]
    close(sequence_scores(x["S"], log_probs, designed), ref["scores"], "score")
    close(sequence_scores(x["S"], log_probs, x["mask"]), ref["global_scores"], "global_score")


@pytest.mark.parametrize("ckpt,chain", CASES)
def test_sample_reproduces_sequence(models, ckpt, chain):
    """Same RNG state → same decoding order, per-step distributions and sampled sequence at T = 0.1."""
    x, ref = load_case(ckpt, chain)
    torch.set_rng_state(x["torch_rng_state_before_sample"])
    out = sample(models[ckpt], x["X"], x["randn_2"], x["S"], x["chain_M"], x["chain_encoding_all"], x["residue_idx"],
                 x["mask"], temperature=float(MANIFEST["temperature"]), omit_AAs=x["omit_AAs_np"],
                 bias_AAs=x["bias_AAs_np"], chain_M_pos=x["chain_M_pos"], omit_AA_mask=x["omit_AA_mask"],
                 bias_by_res=x["bias_by_res_all"])
    assert np.array_equal(out["decoding_order"].numpy(), ref["sample_decoding_order"])
    close(out["probs"], ref["sample_probs"], f"{ckpt}/{chain} sample probs")
    assert np.array_equal(out["S"].numpy(), ref["sample_S"]), f"{ckpt}/{chain}: sampled sequence differs"
    with torch.no_grad():
        log_probs, _ = models[ckpt].log_probs(x["X"], out["S"], x["mask"], x["chain_M"] * x["chain_M_pos"],
                                              x["residue_idx"], x["chain_encoding_all"], x["randn_2"],
                                              order=out["decoding_order"])
    close(log_probs, ref["sample_log_probs"], "sample log_probs")
    close(sequence_scores(out["S"], log_probs, x["mask"] * x["chain_M"]), ref["sample_scores"], "sample score")
    recovery = ((out["S"] == x["S"]).float() * x["mask"] * x["chain_M"]).sum() / (x["mask"] * x["chain_M"]).sum()
    close(recovery, ref["sample_seq_recovery"], "seq_recovery")


@pytest.mark.parametrize("ckpt,chain", CASES)
def test_conditional_and_unconditional_probs(models, ckpt, chain):
    """Conditional probabilities (sequence context / backbone only) at every position, unconditional ones."""
    x, ref = load_case(ckpt, chain)
    args = (x["X"], x["S"], x["mask"], x["chain_M"] * x["chain_M_pos"], x["residue_idx"], x["chain_encoding_all"],
            x["randn_1"])
    close(conditional_probs(models[ckpt], *args, backbone_only=False), ref["conditional_log_probs"],
          f"{ckpt}/{chain} conditional")
    close(conditional_probs(models[ckpt], *args, backbone_only=True), ref["conditional_log_probs_backbone_only"],
          f"{ckpt}/{chain} conditional backbone-only")
    close(unconditional_probs(models[ckpt], x["X"], x["mask"], x["residue_idx"], x["chain_encoding_all"]),
          ref["unconditional_log_probs"], f"{ckpt}/{chain} unconditional")
