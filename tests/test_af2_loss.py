"""The AlphaFold2 loss terms at their minima, their invariances, gating, scaling and precision,
and the supervision derived from real chains of the offline PDB mirror."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from foldworks.constants import ATOM_ORDER, RESTYPES
from foldworks.models.af2.loss import LossConfig, LossWeights, alphafold_loss, make_supervision
from foldworks.models.af2.loss import categorical, confidence, constants, fape, torsion, violation
from foldworks.models.af2.loss.geometry import apply, from_tensor_4x4, quat_to_rot, random_rigid
from foldworks.models.af2.loss.stereo_chemistry import atom14_distance_bounds
from foldworks.parse.core import parse_entry

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAPE_FLOOR = math.sqrt(1e-4) / 10.0  # eps under the root, divided by the length scale


def _chain(mirror: Path, entry: str) -> dict[str, torch.Tensor]:
    arrays = parse_entry(mirror / f"{entry}.cif.gz", entry).arrays["A"]
    aatype = torch.as_tensor(arrays["aatype"].astype(np.int64))
    sup = make_supervision(aatype, torch.as_tensor(arrays["atom_positions"]),
                           torch.as_tensor(arrays["atom_mask"]).float())
    n = aatype.shape[0]
    sup.update(residue_index=torch.as_tensor(arrays["auth_seq_id"].astype(np.int64)), seq_mask=torch.ones(n),
               resolution=torch.tensor(1.5), seq_length=torch.tensor(n), use_clamped_fape=torch.tensor(1.0))
    return sup


@pytest.fixture(scope="module")
def crambin(pdb_mirror: Path) -> dict[str, torch.Tensor]:
    return _chain(pdb_mirror, "1crn")


@pytest.fixture(scope="module")
def ubiquitin(pdb_mirror: Path) -> dict[str, torch.Tensor]:
    return _chain(pdb_mirror, "1ubq")


def _move(frames, pos, rigid):
    rot, trans = frames
    return (rigid[0] @ rot, apply(rigid, trans)), apply(rigid, pos)


def test_fape_at_minimum_for_identical_structures(crambin):
    frames = from_tensor_4x4(crambin["rigidgroups_gt_frames"].reshape(-1, 4, 4))
    fmask = crambin["rigidgroups_gt_exists"].reshape(-1)
    pos, pmask = crambin["atom14_gt_positions"].reshape(-1, 3), crambin["atom14_gt_exists"].reshape(-1)
    value = fape.compute_fape(frames, frames, fmask, pos, pos, pmask, length_scale=10.0)
    assert float(value) == pytest.approx(FAPE_FLOOR, rel=1e-3)


def test_fape_invariant_to_separate_rigid_motions(crambin):
    g = torch.Generator().manual_seed(0)
    frames = from_tensor_4x4(crambin["backbone_rigid_tensor"])
    mask = crambin["backbone_rigid_mask"]
    true_pos = frames[1]
    pred_pos = true_pos + 3.0 * torch.randn(true_pos.shape, generator=g)
    pred_frames = (quat_to_rot(F.normalize(torch.randn(true_pos.shape[0], 4, generator=g), dim=-1)), pred_pos)
    args = dict(length_scale=10.0, clamp=None)
    before = fape.compute_fape(pred_frames, frames, mask, pred_pos, true_pos, mask, **args)
    pf, pp = _move(pred_frames, pred_pos, random_rigid(g))
    tf, tp = _move(frames, true_pos, random_rigid(g))
    after = fape.compute_fape(pf, tf, mask, pp, tp, mask, **args)
    assert float(before) > 0.1
    assert float(after) == pytest.approx(float(before), rel=1e-5)


def test_backbone_fape_mixes_clamped_and_unclamped(crambin):
    g = torch.Generator().manual_seed(1)
    rot, trans = from_tensor_4x4(crambin["backbone_rigid_tensor"])
    n = trans.shape[0]
    traj = torch.cat([F.normalize(torch.randn(2, n, 4, generator=g), dim=-1),
                      trans + 15.0 * torch.randn(2, n, 3, generator=g)], -1)
    args = (crambin["backbone_rigid_tensor"], crambin["backbone_rigid_mask"])
    clamped, unclamped = (float(fape.backbone_fape(traj, *args, use_clamped_fape=torch.tensor(u))) for u in (1.0, 0.0))
    half = float(fape.backbone_fape(traj, *args, use_clamped_fape=torch.tensor(0.5)))
    per_layer = fape.backbone_fape_per_layer(traj, *args, clamp=10.0)
    assert clamped < unclamped
    assert clamped <= 1.0 + 1e-6  # clamped errors are at most 10 Å / 10 Å
    assert half == pytest.approx(0.5 * (clamped + unclamped), rel=1e-6)
    assert clamped == pytest.approx(float(per_layer.mean()), rel=1e-6)


def test_renaming_picks_the_swapped_truth(crambin):
    """A prediction equal to the renamed truth is scored at FAPE's floor after Alg 26 renaming."""
    batch = crambin
    pred = batch["atom14_alt_gt_positions"]
    swapped = (batch["atom14_alt_gt_positions"] - batch["atom14_gt_positions"]).abs().amax((-1, -2)) > 0.1
    assert swapped.any()  # crambin has resolved ASP/GLU/PHE/TYR side chains
    renamed = fape.renamed_ground_truth(batch, pred)
    assert torch.equal(renamed["alt_naming_is_better"].bool()[swapped], torch.ones(int(swapped.sum()), dtype=torch.bool))
    # the prediction's group frames: the truth's, flipped where the renaming flipped them
    alt = renamed["alt_naming_is_better"][:, None, None, None]
    pred_frames = (1 - alt) * batch["rigidgroups_gt_frames"] + alt * batch["rigidgroups_alt_gt_frames"]
    value = fape.sidechain_fape(pred_frames, pred, batch, renamed)
    assert float(value) == pytest.approx(FAPE_FLOOR, rel=1e-3)
    plain = {"alt_naming_is_better": torch.zeros_like(renamed["alt_naming_is_better"]),
             "renamed_atom14_gt_positions": batch["atom14_gt_positions"],
             "renamed_atom14_gt_exists": batch["atom14_gt_exists"]}
    assert float(fape.sidechain_fape(pred_frames, pred, batch, plain)) > 2 * FAPE_FLOOR


def _seven_angles(chi: torch.Tensor) -> torch.Tensor:
    backbone = torch.tensor([0.0, 1.0]).expand(chi.shape[:-2] + (3, 2))
    return torch.cat([backbone, chi], -2)[None]  # one layer


def test_torsion_loss_zero_at_true_angles_and_pi_periodic(crambin):
    b = crambin
    chi = b["chi_angles_sin_cos"]
    args = (b["aatype"], b["chi_mask"], chi)
    assert float(torsion.chi_squared_error(_seven_angles(chi), *args)) < 1e-10
    periodic = torch.as_tensor(constants.CHI_PI_PERIODIC)[b["aatype"]]
    flipped = chi * (1 - 2 * periodic)[..., None]
    assert periodic.sum() > 0
    assert float(torsion.chi_squared_error(_seven_angles(flipped), *args)) < 1e-10
    assert float(torsion.chi_squared_error(_seven_angles(-chi), *args)) > 0.5  # non-periodic chis flipped too
    unit = F.normalize(torch.randn(1, chi.shape[0], 7, 2, generator=torch.Generator().manual_seed(5)), dim=-1)
    assert float(torsion.angle_norm_error(unit, b["seq_mask"])) < 1e-4
    assert float(torsion.angle_norm_error(2 * unit, b["seq_mask"])) == pytest.approx(1.0, abs=1e-4)


def test_categorical_terms_minimal_at_one_hot_logits(crambin):
    b = crambin
    bins = categorical.distogram_true_bins(b["pseudo_beta"])
    sharp = 1e4 * F.one_hot(bins, 64).float()
    assert float(categorical.distogram_loss(sharp, b["pseudo_beta"], b["pseudo_beta_mask"])) < 1e-6
    uniform = torch.zeros_like(sharp)
    assert float(categorical.distogram_loss(uniform, b["pseudo_beta"], b["pseudo_beta_mask"])) == pytest.approx(
        math.log(64), rel=1e-5)
    msa = torch.randint(0, 23, (5, bins.shape[0]), generator=torch.Generator().manual_seed(2))
    mask = (torch.rand(msa.shape, generator=torch.Generator().manual_seed(3)) < 0.15).float()
    assert float(categorical.masked_msa_loss(1e4 * F.one_hot(msa, 23).float(), msa, mask)) < 1e-6
    assert float(categorical.masked_msa_loss(torch.zeros(msa.shape + (23,)), msa, mask)) == pytest.approx(
        math.log(23), rel=1e-5)


def test_confidence_terms_minimal_at_one_hot_logits_and_gated(crambin):
    b = crambin
    x37, m37 = b["all_atom_positions"], b["all_atom_mask"]
    lddt, bins = confidence.plddt_target_bins(x37, x37, m37)
    assert torch.allclose(lddt, torch.ones_like(lddt)) and int(bins.min()) == 49
    plddt = lambda res: confidence.plddt_loss(1e4 * F.one_hot(bins, 50).float(), x37, x37, m37, res)  # noqa: E731
    assert float(plddt(torch.tensor(1.5))) < 1e-6
    er_logits = 1e4 * (2 * m37 - 1)
    er = lambda res: confidence.experimentally_resolved_loss(er_logits, b["atom37_atom_exists"], m37, res)  # noqa: E731
    assert float(er(torch.tensor(1.5))) < 1e-6
    rot, trans = from_tensor_4x4(b["backbone_rigid_tensor"])
    affine = torch.cat([torch.tensor([1.0, 0, 0, 0]).expand(trans.shape[0], 4), trans], -1)
    tm_bins = confidence.aligned_error_bins(affine, b["backbone_rigid_tensor"])
    tm = lambda logits, res: confidence.tm_loss(logits, affine, b["backbone_rigid_tensor"],  # noqa: E731
                                                b["backbone_rigid_mask"], res)
    assert float(tm(1e4 * F.one_hot(tm_bins, 64).float(), torch.tensor(1.5))) < 1e-6
    assert float(tm(torch.zeros(tm_bins.shape + (64,)), torch.tensor(1.5))) == pytest.approx(math.log(64), rel=1e-4)
    for res, gated in ((0.05, True), (0.1, False), (3.0, False), (3.5, True)):
        r = torch.tensor(res)
        values = [float(confidence.plddt_loss(torch.zeros(bins.shape + (50,)), x37, x37, m37, r)),
                  float(confidence.experimentally_resolved_loss(torch.zeros_like(er_logits), b["atom37_atom_exists"],
                                                                m37, r)),
                  float(tm(torch.zeros(tm_bins.shape + (64,)), r))]
        assert all((v == 0.0) == gated for v in values), (res, values)


def test_aligned_error_bin_zero_only_at_zero_error():
    frames = torch.eye(4).expand(3, 4, 4).clone()
    frames[:, :3, 3] = torch.tensor([[0.0, 0, 0], [3.8, 0, 0], [7.6, 0, 0]])
    affine = torch.cat([torch.tensor([1.0, 0, 0, 0]).expand(3, 4), frames[:, :3, 3]], -1)
    assert int(confidence.aligned_error_bins(affine, frames).max()) == 0
    affine[2, 4] += 0.01
    bins = confidence.aligned_error_bins(affine, frames)
    assert int(bins[0, 2]) == 1 and int(bins[0, 1]) == 0
    affine[2, 4] += 100.0
    assert int(confidence.aligned_error_bins(affine, frames)[0, 2]) == 63


@pytest.mark.parametrize("entry", ["1crn", "1ubq"])
def test_violation_zero_on_true_structure(pdb_mirror, entry):
    b = _chain(pdb_mirror, entry)
    batch = {**b, "atom14_atom_exists": b["atom14_gt_exists"]}  # score the resolved atoms only
    loss, parts = violation.violation_loss(b["atom14_gt_positions"], batch)
    assert float(loss) == 0.0
    assert int(parts["per_residue_violation_mask"].sum()) == 0
    stretched = b["atom14_gt_positions"].clone()
    bond = stretched[10, 0] - stretched[9, 2]  # C(9) -> N(10)
    stretched[10:] += bond / bond.norm()  # lengthen the peptide bond between residues 9 and 10 by 1 Å
    loss, parts = violation.violation_loss(stretched, batch)
    assert float(parts["bonds_c_n"]) > 0.0
    assert parts["per_residue_violation_mask"][9:11].tolist() == [1.0, 1.0]


def test_stereo_bounds_are_the_tabulated_ones():
    lower, upper = atom14_distance_bounds(overlap_tolerance=1.5, bond_length_tolerance_factor=12.0)
    ala = list(constants.ATOM14_NAMES["ALA"])
    n, ca, c = ala.index("N"), ala.index("CA"), ala.index("C")
    a = RESTYPES.index("A")
    assert lower[a, n, ca] == pytest.approx(1.459 - 12 * 0.020) and upper[a, n, ca] == pytest.approx(1.459 + 12 * 0.020)
    n_c = math.sqrt(1.459 ** 2 + 1.525 ** 2 - 2 * 1.459 * 1.525 * math.cos(math.radians(111.0)))
    assert (lower[a, n, c] + upper[a, n, c]) / 2 == pytest.approx(n_c, rel=1e-6)
    o, cb = ala.index("O"), ala.index("CB")
    assert lower[a, o, cb] == pytest.approx(1.52 + 1.7 - 1.5) and upper[a, o, cb] == pytest.approx(1e10)
    np.testing.assert_array_equal(lower, lower.transpose(0, 2, 1))
    assert not lower[constants.UNK].any() and not upper[constants.UNK].any()


def test_supervision_unknown_residue_has_no_atoms_and_glycine_uses_ca(crambin):
    b = crambin
    aatype = b["aatype"].clone()
    aatype[0], aatype[1] = constants.UNK, constants.GLY
    sup = make_supervision(aatype, b["all_atom_positions"], b["all_atom_mask"])
    assert sup["atom14_atom_exists"][0].sum() == 0 and sup["atom37_atom_exists"][0].sum() == 0
    assert sup["chi_mask"][0].sum() == 0 and sup["atom14_gt_exists"][0].sum() == 0
    assert torch.equal(sup["pseudo_beta"][1], b["all_atom_positions"][1, ATOM_ORDER["CA"]])


def _dihedral(p: np.ndarray) -> np.ndarray:
    b0, b1, b2 = p[..., 0, :] - p[..., 1, :], p[..., 2, :] - p[..., 1, :], p[..., 3, :] - p[..., 2, :]
    b1 = b1 / np.linalg.norm(b1, axis=-1, keepdims=True)
    v = b0 - (b0 * b1).sum(-1, keepdims=True) * b1
    w = b2 - (b2 * b1).sum(-1, keepdims=True) * b1
    return np.arctan2((np.cross(b1, v) * w).sum(-1), (v * w).sum(-1))


def test_chi_angles_are_the_iupac_dihedrals(ubiquitin):
    b = ubiquitin
    idx = torch.as_tensor(constants.CHI_ATOM37)[b["aatype"]]  # [N, 4, 4]
    pts = b["all_atom_positions"].double().numpy()[np.arange(idx.shape[0])[:, None, None], idx.numpy()]
    mask = b["chi_mask"].bool().numpy()
    assert mask.sum() > 100
    want = _dihedral(pts[mask])
    got = torch.atan2(*b["chi_angles_sin_cos"].unbind(-1)).double().numpy()[mask]
    diff = np.angle(np.exp(1j * (got - want)))
    assert np.abs(diff).max() < 1e-4


def _random_outputs(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    frames = torch.eye(4).expand(2, n, 8, 4, 4).clone()
    frames[..., :3, 3] = 10 * r(2, n, 8, 3)
    raw = r(2, n, 7, 2)
    return {"sm/frames": torch.cat([F.normalize(r(2, n, 4), dim=-1), 10 * r(2, n, 3)], -1),
            "sm/sidechain_frames": frames, "sm/positions": 10 * r(2, n, 14, 3),
            "sm/angles": F.normalize(raw, dim=-1), "sm/unnormalized_angles": raw,
            "final_atom_positions": 10 * r(n, 37, 3), "distogram_logits": r(n, n, 64),
            "masked_msa_logits": r(4, n, 23), "lddt_logits": r(n, 50),
            "experimentally_resolved_logits": r(n, 37), "tm_logits": r(n, n, 64)}


def _msa_batch(b: dict, n: int) -> dict:
    return {**b, "true_msa": torch.zeros(4, n, dtype=torch.long), "bert_mask": torch.ones(4, n)}


def test_total_scaling_weights_and_fp32_under_autocast(crambin):
    n = crambin["aatype"].shape[0]
    out, batch = _random_outputs(n), _msa_batch(crambin, n)
    loss, terms = alphafold_loss(out, batch, LossConfig(weights=LossWeights.fine_tuning()))
    w = LossWeights.fine_tuning()
    expected = sum(getattr(w, k) * float(terms[k]) for k in
                   ("fape", "supervised_chi", "distogram", "masked_msa", "plddt_loss", "experimentally_resolved",
                    "violation", "tm"))
    assert float(terms["unscaled_loss"]) == pytest.approx(expected, rel=1e-5)
    assert float(loss) == pytest.approx(float(terms["unscaled_loss"]) * math.sqrt(n), rel=1e-6)
    cropped, _ = alphafold_loss(out, {**batch, "seq_length": torch.tensor(10 * n)}, LossConfig(weights=w))
    assert float(cropped) == pytest.approx(float(loss), rel=1e-6)  # √min(L, crop) with crop = N
    initial, t0 = alphafold_loss(out, batch, LossConfig(weights=LossWeights.initial_training()))
    assert float(t0["violation"]) == pytest.approx(float(terms["violation"]))  # reported, weight 0
    assert float(initial) < float(loss)
    half = {k: v.bfloat16() for k, v in out.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, low_terms = alphafold_loss(half, batch, LossConfig(weights=w))
    assert low.dtype == torch.float32 and all(v.dtype == torch.float32 for v in low_terms.values())
    reference, _ = alphafold_loss({k: v.float() for k, v in half.items()}, batch, LossConfig(weights=w))
    assert float(low) == float(reference)


def test_total_accepts_nested_structure_module_outputs(crambin):
    n = crambin["aatype"].shape[0]
    out, batch = _random_outputs(n, seed=4), _msa_batch(crambin, n)
    flat, _ = alphafold_loss(out, batch)
    last = out["sm/sidechain_frames"][-1]
    nested = {k: v for k, v in out.items() if not k.startswith("sm/")}
    nested["sm"] = {k[3:]: v for k, v in out.items() if k.startswith("sm/") and k != "sm/sidechain_frames"}
    nested["sm"].update(group_frames_rot=last[..., :3, :3], group_frames_trans=last[..., :3, 3])
    again, _ = alphafold_loss(nested, batch)
    assert float(again) == float(flat)


def test_total_averages_terms_over_a_batch_of_chains(crambin):
    """Two chains batched give the mean of their separate terms (per-chain averaging)."""
    n = crambin["aatype"].shape[0]
    batch = _msa_batch(crambin, n)
    outs = [_random_outputs(n, seed=s) for s in (6, 7)]
    cfg = LossConfig(weights=LossWeights.fine_tuning())
    single = [alphafold_loss(o, batch, cfg)[1] for o in outs]
    stacked = {k: torch.stack([o[k] for o in outs], 1 if k.startswith("sm/") else 0) for k in outs[0]}
    batched = {k: torch.stack([v, v]) if torch.is_tensor(v) else v for k, v in batch.items()}
    _, terms = alphafold_loss(stacked, batched, cfg)
    for key in ("fape", "supervised_chi", "distogram", "masked_msa", "plddt_loss", "experimentally_resolved", "tm",
                "violation", "unscaled_loss"):
        assert float(terms[key]) == pytest.approx(0.5 * float(single[0][key] + single[1][key]), rel=1e-5), key


def test_clamped_fape_is_drawn_per_sample_with_p_0_9():
    draws = fape.sample_use_clamped_fape((20000,), generator=torch.Generator().manual_seed(8))
    assert set(draws.unique().tolist()) == {0.0, 1.0}
    assert float(draws.mean()) == pytest.approx(0.9, abs=0.01)


def test_gradients_are_finite_and_reach_every_output(crambin):
    n = crambin["aatype"].shape[0]
    out = {k: v.requires_grad_() for k, v in _random_outputs(n, seed=9).items()}
    loss, _ = alphafold_loss(out, _msa_batch(crambin, n), LossConfig(weights=LossWeights.fine_tuning()))
    loss.backward()
    assert out["final_atom_positions"].grad is None  # it only feeds the (detached) pLDDT target
    for key, value in out.items():
        if key != "final_atom_positions":
            assert value.grad is not None and torch.isfinite(value.grad).all(), key
            assert value.grad.abs().sum() > 0, key


def test_tm_logits_required_only_when_weighted(crambin):
    n = crambin["aatype"].shape[0]
    out = {k: v for k, v in _random_outputs(n, seed=10).items() if k != "tm_logits"}
    batch = _msa_batch(crambin, n)
    _, terms = alphafold_loss(out, batch, LossConfig(weights=LossWeights.initial_training(ptm=False)))
    assert "tm" not in terms
    with pytest.raises(KeyError, match="tm_logits"):
        alphafold_loss(out, batch, LossConfig(weights=LossWeights.initial_training()))
