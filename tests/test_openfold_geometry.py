"""evoformer family geometry: frames, all-atom construction, FAPE, IPA invariance, renaming, torsion loss.

Real chains (1crn, 1ubq, 5pti) from the offline mirror via ``_features_fixture``; CPU, one thread.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from _features_fixture import build_feature_cache
from foldworks.constants import ATOM_ORDER
from foldworks.models.openfold import all_atom, losses, rigid
from foldworks.models.openfold import residue_constants as rc
from foldworks.models.openfold.structure import InvariantPointAttention, StructureModule
from foldworks.train.data import ChainDataset, collate, select_targets

ENTRIES = ("1crn", "1ubq", "5pti")
N, CA, C, O = (ATOM_ORDER[a] for a in ("N", "CA", "C", "O"))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def chains(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """Whole reference chains (no crop), fp64 coordinates."""
    out = tmp_path_factory.mktemp("of_geom")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    table = pd.read_parquet(out / "chains.parquet")
    targets = select_targets(table, ["train", "val", "test"], out / "features")
    dataset = ChainDataset(targets, crop_size=None, max_msa_rows=1, seed=0, train=False)
    batch = collate([dataset[(0, i)] for i in range(len(dataset))])
    batch["all_atom_positions"] = batch["all_atom_positions"].double()
    return batch


def _reference(chains):
    x37, m37, aatype = chains["all_atom_positions"], chains["all_atom_mask"], chains["aatype"]
    bb, bb_mask = all_atom.backbone_frames(x37, m37)
    tors, alt, tmask = all_atom.torsion_angles(x37, m37, aatype, chains["residue_index"])
    return x37, m37, aatype, bb, bb_mask, tors, tmask


def test_tables_are_consistent() -> None:
    # every atom14 slot maps to an atom37 slot and back; chi atoms exist in the residue
    for r, name in enumerate(rc.RESNAMES):
        for i in range(14):
            if rc.ATOM14_MASK[r, i]:
                assert rc.ATOM37_TO_ATOM14[r, rc.ATOM14_TO_ATOM37[r, i]] == i
        for k in range(4):
            if rc.CHI_MASK[r, k]:
                assert rc.ATOM37_MASK[r, rc.CHI_ATOM37[r, k]].all(), (name, k)
    assert rc.ATOM37_MASK[20].sum() == 4  # X: backbone only
    assert rc.CHI_PI_PERIODIC.sum() == 4 and rc.ATOM14_IS_AMBIGUOUS.sum() == 2 + 2 + 4 + 4


def _nerf(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bond: float, angle: float, torsion: float) -> torch.Tensor:
    """Place d with |cd| = bond, angle bcd, dihedral abcd (radians)."""
    bc = (c - b) / torch.linalg.norm(c - b)
    n = torch.linalg.cross(b - a, bc)
    n = n / torch.linalg.norm(n)
    m = torch.linalg.cross(n, bc)
    d2 = torch.tensor([-bond * math.cos(angle), bond * math.sin(angle) * math.cos(torsion),
                       bond * math.sin(angle) * math.sin(torsion)], dtype=a.dtype)
    return c + d2[0] * bc + d2[1] * m + d2[2] * n


def _angle(a, b, c):
    u, v = a - b, c - b
    return torch.arccos((u * v).sum(-1) / torch.linalg.norm(u, dim=-1) / torch.linalg.norm(v, dim=-1))


def test_ideal_chain_from_torsions_has_ideal_bonds(chains) -> None:
    """Backbone built residue by residue (ideal residue geometry, peptide C–N 1.329 Å, real phi/psi/omega),
    then rebuilt by Alg 24 from its frames + torsions with chis 0/60/180°: bonds as the constants."""
    x37, m37, aatype, _, _, tors, tmask = _reference(chains)
    chain = 0
    length = int(chains["mask"][chain].sum())
    ang = torch.atan2(tors[chain, ..., 0], tors[chain, ..., 1])  # [L, 7]
    seq = aatype[chain, :length]
    local = torch.as_tensor(rc.ATOM14_LOCAL, dtype=torch.float64)
    xs = []
    for i in range(length):
        r = int(seq[i])
        n_l, ca_l, c_l = local[r, 0], local[r, 1], local[r, 2]
        if i == 0:
            xs.append((n_l, ca_l, c_l))
            continue
        pn, pca, pc = xs[-1]
        psi = float(ang[i - 1, 2]) if tmask[chain, i - 1, 2] else math.pi
        omega = float(ang[i, 0]) if tmask[chain, i, 0] else math.pi
        phi = float(ang[i, 1]) if tmask[chain, i, 1] else -math.pi / 2
        n = _nerf(pn, pca, pc, 1.329, math.radians(116.2), psi)
        ca = _nerf(pca, pc, n, float(torch.linalg.norm(n_l - ca_l)), math.radians(121.7), omega)
        c = _nerf(pc, n, ca, float(torch.linalg.norm(c_l - ca_l)), float(_angle(n_l, ca_l, c_l)), phi)
        xs.append((n, ca, c))
    n, ca, c = (torch.stack(t)[None] for t in zip(*xs))
    frames = rigid.rigid_from_3_points(n, ca, c)
    angles = torch.zeros(1, length, 7, 2, dtype=torch.float64)
    angles[..., 1] = 1.0
    angles[0, :, 2] = tors[chain, :length, 2]  # psi places O
    for k, deg in enumerate((60.0, 180.0, 0.0, 60.0)):
        angles[0, :, 3 + k] = torch.tensor([math.sin(math.radians(deg)), math.cos(math.radians(deg))])
    groups = all_atom.torsion_angles_to_frames(frames, angles, seq[None])
    x14 = all_atom.frames_to_atom14(groups, seq[None])[0]
    d = lambda a, b: torch.linalg.norm(a - b, dim=-1)  # noqa: E731
    assert torch.allclose(d(x14[:, 0], x14[:, 1]), torch.full((length,), 1.458, dtype=torch.float64), atol=0.01)
    assert torch.allclose(d(x14[:, 1], x14[:, 2]), torch.full((length,), 1.525, dtype=torch.float64), atol=0.01)
    peptide = d(x14[:-1, 2], x14[1:, 0])
    assert torch.allclose(peptide, torch.full_like(peptide, 1.329), atol=0.01), peptide.max()
    assert (d(x14[:, 2], x14[:, 3]) - 1.23).abs().max() < 0.02  # C=O
    # side chains: every chi's moving atom sits at its ideal bond length from the axis atom, and the
    # 1–3 distance over the axis does not depend on the chi value
    checked = 0
    for i in range(length):
        name = rc.RESNAMES[int(seq[i])]
        names14 = rc.ATOM14_NAMES[name]
        ideal = {a: (g, torch.tensor(p, dtype=torch.float64)) for a, g, p in rc.IDEAL_POSITIONS[name]}
        for a0, a1, a2, a3 in rc.CHI_ATOMS[name]:
            bond = d(x14[i, names14.index(a2)], x14[i, names14.index(a3)])
            assert abs(float(bond) - float(torch.linalg.norm(ideal[a3][1]))) < 1e-6
            assert 1.2 < float(bond) < 1.9
            checked += 1
    assert checked > 20


def test_reference_frames_rebuild_backbone_and_chis_round_trip(chains) -> None:
    """Frames + torsions from real atoms → Alg 24 → atoms. Backbone within 0.05 Å on average (N, CA, C;
    real N–CA–C angles scatter ±3° around ideal so single N atoms are off by up to ~0.3 Å); side-chain
    atoms within a few tenths of an Å on average (ideal bond lengths/angles accumulate along the chain);
    and torsions re-extracted from the rebuilt atoms equal the input torsions (exact round trip)."""
    x37, m37, aatype, bb, bb_mask, tors, tmask = _reference(chains)
    groups = all_atom.torsion_angles_to_frames(bb, tors, aatype)
    x14 = all_atom.frames_to_atom14(groups, aatype)
    ref14, mask14 = all_atom.atom37_to_atom14(x37, m37, aatype)
    err = torch.linalg.norm(x14 - ref14, dim=-1)
    ok = mask14 & bb_mask[..., None] & tmask[..., 2:3]
    backbone = err[..., :3][ok[..., :3]]
    assert backbone.mean() < 0.05 and backbone.max() < 0.35, (backbone.mean(), backbone.max())
    side = err[..., 4:][ok[..., 4:]]
    assert side.numel() > 500
    assert side.mean() < 0.45, side.mean()
    x37_rebuilt, exists = all_atom.atom14_to_atom37(x14, aatype)
    tors2, _, tmask2 = all_atom.torsion_angles(x37_rebuilt, exists & m37, aatype, chains["residue_index"])
    both = (tmask & tmask2)[..., 2:]  # psi and chis (omega/phi move no atoms)
    assert torch.allclose(tors2[..., 2:, :][both], tors[..., 2:, :][both], atol=1e-5)


def _global_transform(seed: int):
    g = torch.Generator().manual_seed(seed)
    return rigid.random_rotation(g, torch.float64), torch.randn(3, generator=g, dtype=torch.float64) * 10


def test_fape_zero_invariant_and_not_mirror_symmetric(chains) -> None:
    x37, m37, aatype, bb, bb_mask, _, _ = _reference(chains)
    ca = x37[..., CA, :]
    same = losses.fape(bb, bb, bb_mask, ca, ca, bb_mask)
    assert float(same) < 2e-3  # sqrt(eps)/Z with eps = 1e-4
    noisy = x37 + torch.randn(x37.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    nbb, _ = all_atom.backbone_frames(noisy, m37)
    base = losses.fape(nbb, bb, bb_mask, noisy[..., CA, :], ca, bb_mask)
    rot, shift = _global_transform(1)
    moved = noisy @ rot.T + shift
    mbb, _ = all_atom.backbone_frames(moved, m37)
    assert torch.allclose(losses.fape(mbb, bb, bb_mask, moved[..., CA, :], ca, bb_mask), base, atol=1e-6)
    both = losses.fape(mbb, rigid.compose((rot, shift), bb), bb_mask, moved[..., CA, :], ca @ rot.T + shift, bb_mask)
    assert torch.allclose(both, base, atol=1e-6)
    mirror = x37 * torch.tensor([-1.0, 1.0, 1.0], dtype=torch.float64)
    mir_bb, _ = all_atom.backbone_frames(mirror, m37)
    mirrored = losses.fape(mir_bb, bb, bb_mask, mirror[..., CA, :], ca, bb_mask)
    assert float(mirrored) > 0.3, float(mirrored)  # distances identical, handedness wrong


def test_ipa_invariant_to_global_frame_transform() -> None:
    torch.manual_seed(0)
    ipa = InvariantPointAttention(c_s=16, c_z=8, c_hidden=8, n_heads=4, n_qk_points=4, n_v_points=4).double()
    torch.nn.init.normal_(ipa.out.weight, std=0.1)  # zero-initialised output would make the test vacuous
    s, z = torch.randn(2, 12, 16, dtype=torch.float64), torch.randn(2, 12, 12, 8, dtype=torch.float64)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 9:] = False
    g = torch.Generator().manual_seed(3)
    frames = (rigid.quat_to_rot(torch.randn(2, 12, 4, generator=g, dtype=torch.float64)),
              torch.randn(2, 12, 3, generator=g, dtype=torch.float64) * 5)
    rot, shift = _global_transform(2)
    moved = rigid.compose((rot, shift), frames)
    out, out_moved = ipa(s, z, frames, mask), ipa(s, z, moved, mask)
    assert out.abs().mean() > 1e-3
    assert torch.allclose(out, out_moved, atol=1e-8)


def test_symmetric_renaming_makes_swapped_asp_free(chains) -> None:
    x37, m37, aatype = chains["all_atom_positions"].float(), chains["all_atom_mask"], chains["aatype"]
    batch = {**chains, "all_atom_positions": x37}
    ref = losses.reference_geometry(batch)
    pred = {"atom14": ref["atom14"], "group_rot": ref["group_rot"], "group_trans": ref["group_trans"]}
    asp = aatype == rc.RESNAMES.index("ASP")
    assert asp.sum() >= 3
    swapped = x37.clone()
    od1, od2 = ATOM_ORDER["OD1"], ATOM_ORDER["OD2"]
    swapped[..., od1, :] = torch.where(asp[..., None], x37[..., od2, :], x37[..., od1, :])
    swapped[..., od2, :] = torch.where(asp[..., None], x37[..., od1, :], x37[..., od2, :])
    batch_sw = {**batch, "all_atom_positions": swapped}
    ref_sw = losses.reference_geometry(batch_sw)
    renamed = losses.sidechain_fape(pred, batch_sw, ref_sw)
    b, n = aatype.shape
    raw = losses.fape((ref["group_rot"].reshape(b, -1, 3, 3), ref["group_trans"].reshape(b, -1, 3)),
                      (ref_sw["group_rot"].reshape(b, -1, 3, 3), ref_sw["group_trans"].reshape(b, -1, 3)),
                      ref_sw["group_mask"].reshape(b, -1), ref["atom14"].reshape(b, -1, 3),
                      ref_sw["atom14"].reshape(b, -1, 3), ref_sw["mask14"].reshape(b, -1))
    # renamed ≈ the sqrt(eps)/Z floor of identical structures (1e-3); raw pays for every swapped ASP
    assert float(renamed) < 0.002 and float(raw) > 5 * float(renamed), (float(renamed), float(raw))


def test_torsion_loss_minimal_at_truth_and_pi_periodic(chains) -> None:
    ref = losses.reference_geometry({**chains, "all_atom_positions": chains["all_atom_positions"].float()})
    true = ref["torsions"][:, None]  # one "layer"
    out = {"sm_angles": true, "sm_unnormalized_angles": true * 2.0}
    l_t, l_n = losses.torsion_loss(out, ref)
    assert float(l_t) < 1e-6 and abs(float(l_n) - 1.0) < 0.15  # masked angles are 0-vectors: |0 − 1| = 1 too
    out = {"sm_angles": ref["alt_torsions"][:, None], "sm_unnormalized_angles": ref["alt_torsions"][:, None]}
    assert float(losses.torsion_loss(out, ref)[0]) < 1e-6  # π-periodic chis flipped: still free
    flipped = -true  # every angle + π
    l_flip, _ = losses.torsion_loss({"sm_angles": flipped, "sm_unnormalized_angles": flipped}, ref)
    assert float(l_flip) > 3.0  # squared chord of π is 4 (periodic chis excepted)


def test_ca_bond_loss_zero_at_truth_invariant_and_skips_chain_breaks(chains) -> None:
    ca = chains["ca_coords"].float()
    assert float(losses.ca_bond_loss(ca, chains)) < 1e-3
    rot, shift = _global_transform(2)
    assert float(losses.ca_bond_loss(ca @ rot.float().T + shift.float(), chains)) < 1e-3
    stretched = ca * 1.1  # every consecutive Cα–Cα distance 10 % longer: |Δd| ≈ 0.38 Å → 0.038 (Å / 10)
    assert 0.03 < float(losses.ca_bond_loss(stretched, chains)) < 0.045
    gapped = dict(chains)
    gapped["residue_index"] = chains["residue_index"] * 2  # no residue_index step of 1: no pair scored
    assert float(losses.ca_bond_loss(stretched, gapped)) == 0.0


def _ca_centre(ca: torch.Tensor, resolved: torch.Tensor) -> torch.Tensor:
    """Mean of the resolved Cα ``[B, 1, 3]`` (Å)."""
    return (ca * resolved[..., None]).sum(1, keepdim=True) / resolved.sum(1)[:, None, None]


def _ca_fape(pred_ca: torch.Tensor, chains) -> float:
    return float(losses.ca_fape_loss({"sm_frames_trans": pred_ca[:, None].float()}, chains))


def test_ca_fape_zero_invariant_chiral_and_penalises_compaction(chains) -> None:
    """Cα pseudo-frame FAPE (``w_ca_fape``): 0 at the truth, blind to a global rigid motion, not to a
    mirror image, and it grows when the chain is shrunk towards a ball (long pairs count, to 10 Å)."""
    ca = chains["ca_coords"].double()
    assert _ca_fape(ca, chains) < 2e-3  # sqrt(eps)/Z with eps = 1e-4
    noisy = ca + torch.randn(ca.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    base = _ca_fape(noisy, chains)
    rot, shift = _global_transform(4)
    assert abs(_ca_fape(noisy @ rot.T + shift, chains) - base) < 1e-4
    assert _ca_fape(ca * torch.tensor([-1.0, 1.0, 1.0], dtype=torch.float64), chains) > 0.3  # wrong handedness
    centre = _ca_centre(ca, chains["residue_mask"])
    assert _ca_fape(centre + 0.5 * (ca - centre), chains) > 0.3  # half-size chain: far pairs wrong by Å
    frames_mask = losses.ca_pseudo_frames(ca, chains["residue_mask"], chains["residue_index"])[1]
    assert not frames_mask[:, 0].any()  # chain start: no Cα_{i-1}, no frame
    gapped = dict(chains)
    gapped["residue_index"] = chains["residue_index"] * 2  # no consecutive residues: no frame, loss 0
    assert _ca_fape(noisy, gapped) == 0.0


def test_local_ca_fape_sees_handedness_but_not_far_pairs(chains) -> None:
    """``ca_fape_window``: the windowed Cα pseudo-frame FAPE is 0 at the truth and blind to a global
    rigid motion; it scores a mirror image (every helix left-handed), less than the all-pairs term as
    the far pairs are dropped, and a window of 1 (three Cα per frame) cannot see the hand at all."""
    def local(pred_ca: torch.Tensor, window: int) -> float:
        return float(losses.ca_fape_loss({"sm_frames_trans": pred_ca[:, None].float()}, chains, window=window))
    ca = chains["ca_coords"].double()
    assert local(ca, 4) < 2e-3
    noisy = ca + torch.randn(ca.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    rot, shift = _global_transform(6)
    assert abs(local(noisy @ rot.T + shift, 4) - local(noisy, 4)) < 1e-4
    mirror = ca * torch.tensor([-1.0, 1.0, 1.0], dtype=torch.float64)
    assert local(mirror, 4) > 0.1  # local pairs only: Å-scale errors, not the clamp
    assert local(mirror, 4) < _ca_fape(mirror, chains)  # far pairs dropped: less than the all-pairs term
    # Window 1 scores Cα_{i-1}, Cα_i, Cα_{i+1} in frame i, which those three atoms define: only the
    # bond lengths and the Cα angle are left, and a mirror image keeps both.
    assert local(mirror, 1) < 2e-3


def _structure_module_inputs(batch: int, length: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    s, z = torch.randn(batch, length, 16, generator=g), torch.randn(batch, length, length, 8, generator=g)
    return s, z, torch.zeros(batch, length, dtype=torch.long), torch.ones(batch, length, dtype=torch.bool)


def test_structure_module_starts_at_the_black_hole() -> None:
    """Alg 20 line 2: frames start at the identity, so with the zero-initialised backbone update every
    layer leaves every Cα at the origin."""
    torch.manual_seed(0)
    sm = StructureModule(c_s=16, c_z=8, n_layers=3, c_ipa=8, n_heads_ipa=4, n_qk_points=4, n_v_points=4,
                         c_resnet=16, dropout=0.0).eval()
    with torch.no_grad():
        out = sm(*_structure_module_inputs(2, 12, seed=2))
    assert out["frames_trans"].shape == (2, 3, 12, 3)
    assert out["frames_trans"].abs().max() < 1e-6 and out["atom14"][:, :, 1].abs().max() < 1e-6


def test_rotations_are_detached_between_structure_layers() -> None:
    """Alg 20 line 20: a loss on the final Cα alone gives no gradient to the quaternion part of the
    backbone update (each layer's translation is applied in the previous layer's detached rotation),
    only to its translation part."""
    torch.manual_seed(0)
    sm = StructureModule(16, 8, n_layers=3, c_ipa=8, n_heads_ipa=2, n_qk_points=2, n_v_points=2,
                         c_resnet=16, dropout=0.0)
    torch.nn.init.normal_(sm.backbone_update.lin.weight, std=0.1)
    torch.nn.init.normal_(sm.ipa.out.weight, std=0.1)
    ca = sm(*_structure_module_inputs(1, 10, seed=4))["frames_trans"][:, -1]
    (ca[:, 1:] - ca[:, :-1]).norm(dim=-1).sum().backward()
    weight_grad = sm.backbone_update.lin.weight.grad
    assert weight_grad[:3].abs().max().item() == 0.0  # quaternion (b, c, d)
    assert weight_grad[3:].abs().max().item() > 0.0  # translation
