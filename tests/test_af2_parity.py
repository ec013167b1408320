"""AlphaFold2 forward parity with DeepMind's and OpenFold's reference outputs.

Every case folder with a ``config.json`` under ``$FOLDWORKS_AF2_REFERENCE`` (default
``../shared/af2_reference``) is run twice: with ``params.npz`` through the DeepMind converter and
with ``openfold_state_dict.pt`` through the OpenFold loader. The model is built from the case's
``config.json``; inputs are ``features.npz``. Outputs are compared with DeepMind's ``outputs.npz``.
Where a case provides ``af2_template_angle_feat.npz`` (AF2's in-model template angle features),
they are passed as the ``template_angle_feat`` input, because AF2's value for the undefined
pre-ω torsion of a template's first residue is arbitrary; the in-model torsion features are
checked against that file separately.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import _shared_path
from foldworks.models.af2.config import from_reference_config
from foldworks.models.af2.geometry import template_angle_features
from foldworks.models.af2.model import AlphaFold2
from foldworks.models.weights import deepmind, openfold
from foldworks.models.weights.errors import check_strict, read_npz, read_torch

pytestmark = pytest.mark.af2_parity

REFERENCE = _shared_path("FOLDWORKS_AF2_REFERENCE", "af2_reference")
CASES = sorted(p.name for p in REFERENCE.iterdir() if (p / "config.json").is_file()) if REFERENCE else []

# (our output, reference key in outputs.npz, absolute tolerance); positions in Å, pLDDT 0–100.
COMPARED = [
    ("final_atom_positions", "structure_module/final_atom_positions", 1e-3),
    ("msa", "representations/msa", 1e-3),
    ("pair", "representations/pair", 1e-3),
    ("single", "representations/single", 1e-3),
    ("sm_single", "representations/structure_module", 1e-3),
    ("final_atom14_positions", "structure_module/final_atom14_positions", 1e-3),
    ("traj", "structure_module/traj", 1e-3),
    ("sm_positions", "structure_module/sidechains/atom_pos", 1e-3),
    ("sm_angles", "structure_module/sidechains/angles_sin_cos", 1e-3),
    ("sm_unnormalized_angles", "structure_module/sidechains/unnormalized_angles_sin_cos", 1e-3),
    ("distogram_logits", "distogram/logits", 1e-3),
    ("masked_msa_logits", "masked_msa/logits", 1e-3),
    ("lddt_logits", "predicted_lddt/logits", 1e-3),
    ("experimentally_resolved_logits", "experimentally_resolved/logits", 1e-3),
    ("plddt", "confidence/plddt", 1e-2),
    ("tm_logits", "predicted_aligned_error/logits", 1e-3),
    ("predicted_aligned_error", "confidence/predicted_aligned_error", 1e-3),
    ("ptm_score", "confidence/ptm", 1e-4),
]


def _case_dir(case: str) -> Path:
    assert REFERENCE is not None
    return REFERENCE / case


def _features(case: str) -> dict[str, torch.Tensor]:
    d = _case_dir(case)
    feats = {k: torch.from_numpy(v) for k, v in read_npz(d / "features.npz").items()}
    angle_file = d / "af2_template_angle_feat.npz"
    if angle_file.is_file():
        feats["template_angle_feat"] = torch.from_numpy(read_npz(angle_file)["template_angle_feat"])
    return feats


def _state(case: str, source: str) -> dict[str, torch.Tensor]:
    d = _case_dir(case)
    if source == "deepmind":
        return deepmind.convert(read_npz(d / "params.npz"))
    state, _ = openfold.unwrap(read_torch(d / "openfold_state_dict.pt"), d)
    return state


@functools.lru_cache(maxsize=2)
def _run(case: str, source: str) -> dict[str, np.ndarray]:
    torch.set_num_threads(1)
    cfg = from_reference_config(json.loads((_case_dir(case) / "config.json").read_text()))
    model = AlphaFold2(cfg).eval()
    state = _state(case, source)
    check_strict(state, {k: tuple(v.shape) for k, v in model.state_dict().items()})
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        out = model(_features(case))
    flat = {k: v for k, v in out.items() if torch.is_tensor(v)}
    flat["sm_single"] = out["sm"]["single"]
    flat["traj"] = out["sm"]["frames"]
    for key in ("positions", "angles", "unnormalized_angles"):
        flat[f"sm_{key}"] = out["sm"][key]
    return {k: v.numpy() for k, v in flat.items()}


def _skip_without_reference() -> None:
    if REFERENCE is None:
        pytest.skip("AF2 reference fixtures not found: set FOLDWORKS_AF2_REFERENCE or provide ../shared/af2_reference")


@pytest.mark.parametrize("source", ["deepmind", "openfold"])
@pytest.mark.parametrize("case", CASES or ["<none>"])
def test_forward_matches_alphafold2(case: str, source: str) -> None:
    _skip_without_reference()
    ours = _run(case, source)
    ref = read_npz(_case_dir(case) / "outputs.npz")
    checked = 0
    for ours_key, ref_key, tol in COMPARED:
        if ref_key not in ref:
            continue
        assert ours_key in ours, f"{case}: model gave no {ours_key} but the reference has {ref_key}"
        a, b = ours[ours_key], ref[ref_key].astype(np.float32).reshape(ours[ours_key].shape)
        err = float(np.abs(a - b).max())
        assert err <= tol, f"{case}/{source}: {ours_key} differs from {ref_key} by {err:.3g} (> {tol})"
        checked += 1
    assert checked >= 15, f"{case}: only {checked} outputs compared"


@pytest.mark.parametrize("case", CASES or ["<none>"])
def test_deepmind_and_openfold_weights_identical(case: str) -> None:
    _skip_without_reference()
    dm, of = _state(case, "deepmind"), _state(case, "openfold")
    assert sorted(dm) == sorted(of)
    for key in dm:
        assert torch.equal(dm[key], of[key]), key


@pytest.mark.parametrize("case", CASES or ["<none>"])
def test_template_torsion_features_match_alphafold2(case: str) -> None:
    """In-model template angle features equal AF2's wherever the torsion is defined."""
    _skip_without_reference()
    angle_file = _case_dir(case) / "af2_template_angle_feat.npz"
    if not angle_file.is_file():
        pytest.skip(f"{case}: no templates")
    feats = read_npz(_case_dir(case) / "features.npz")
    ref = torch.from_numpy(read_npz(angle_file)["template_angle_feat"])
    ours, _ = template_angle_features(torch.from_numpy(feats["template_aatype"]),
                                      torch.from_numpy(feats["template_all_atom_positions"]),
                                      torch.from_numpy(feats["template_all_atom_masks"]))
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours[..., :22], ref[..., :22], atol=0, rtol=0)  # aatype
    torch.testing.assert_close(ours[..., 50:], ref[..., 50:], atol=0, rtol=0)  # torsion mask
    sin_cos, ref_sin_cos = ours[..., 22:50].unflatten(-1, (14, 2)), ref[..., 22:50].unflatten(-1, (14, 2))
    undefined = (sin_cos == 0).all(-1)
    masked_out = torch.cat([ref[..., 50:], ref[..., 50:]], -1) == 0  # torsions and alternatives
    assert (undefined <= masked_out).all(), "a masked-in torsion came out (0, 0)"
    diff = (sin_cos - ref_sin_cos).abs().amax(-1)
    assert float(diff[~undefined].max()) <= 1e-5
