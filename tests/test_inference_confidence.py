"""inference confidences against AlphaFold's own (the AF2 reference fixtures, every case folder):
pTM, expected aligned error and ranking confidence from AF2's head outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import _shared_path
from foldworks.inference.confidence import bin_centers_from_breaks, predicted_tm_score, ranking_confidence
from foldworks.predict.writer import expected_pae


def _cases() -> list[Path]:
    root = _shared_path("FOLDWORKS_AF2_REFERENCE", "af2_reference")
    if root is None:
        return []
    return sorted(p.parent for p in root.glob("*/outputs.npz"))


@pytest.fixture(params=_cases() or [None], ids=lambda p: p.name if p else "absent")
def af2_outputs(request) -> dict[str, np.ndarray]:
    if request.param is None:
        pytest.skip("AF2 reference fixtures not found: set FOLDWORKS_AF2_REFERENCE or provide ../shared/af2_reference")
    with np.load(request.param / "outputs.npz") as data:
        keys = [k for k in data.files if k.startswith(("confidence/", "predicted_aligned_error/"))]
        return {key: data[key] for key in keys}


def test_confidences_match_alphafold(af2_outputs: dict[str, np.ndarray]) -> None:
    out = af2_outputs
    if "predicted_aligned_error/logits" not in out:
        pytest.skip("case has no aligned-error head")
    logits = out["predicted_aligned_error/logits"]
    centers = bin_centers_from_breaks(out["predicted_aligned_error/breaks"])
    assert centers.shape == (logits.shape[-1],)
    import torch

    from foldworks.models.af2 import heads as H  # the bins the evoformer family's PAE head uses

    ours = H.aligned_error_bin_centers(H.pae_breaks(31.0, logits.shape[-1], torch.zeros(())))
    np.testing.assert_allclose(ours.numpy(), centers, atol=1e-5)
    assert centers[-1] == pytest.approx(float(np.ravel(out["confidence/max_predicted_aligned_error"])[0]))
    assert predicted_tm_score(logits, centers) == pytest.approx(float(np.ravel(out["confidence/ptm"])[0]), abs=1e-6)
    np.testing.assert_allclose(expected_pae(logits, centers), out["confidence/predicted_aligned_error"], atol=1e-4)
    mean_plddt = float(np.mean(out["confidence/plddt"]))
    ptm = float(np.ravel(out["confidence/ptm"])[0])
    assert ranking_confidence(mean_plddt, ptm) == pytest.approx(float(np.ravel(out["confidence/ranking_confidence"])[0]))


def test_bin_centers_need_two_edges() -> None:
    with pytest.raises(ValueError, match="at least 2 bin edges"):
        bin_centers_from_breaks(np.array([1.0]))
