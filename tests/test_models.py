"""Model families: registry, geometry helpers and short optimisation on real mirror chains."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from _features_fixture import build_feature_cache
from foldworks.models import MODEL_REGISTRY, build_model, ideal_helix_ca, kabsch_align, lddt_ca
from foldworks.models.distogram import classical_mds, fix_handedness
from foldworks.train.data import ChainDataset, collate, select_targets

ENTRIES = ("1crn", "1ubq", "5pti", "2igd", "1l2y")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("features")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


@pytest.fixture(scope="module")
def batch(cache: Path) -> dict[str, torch.Tensor]:
    chains = pd.read_parquet(cache / "chains.parquet")
    targets = select_targets(chains, ["train", "val", "test"], cache / "features")
    dataset = ChainDataset(targets, crop_size=32, max_msa_rows=8, seed=0, train=True)
    return collate([dataset[(0, i)] for i in range(min(4, len(dataset)))])


def test_registry_has_both_families_and_refuses_unknown() -> None:
    assert {"distogram", "msa_trunk"} <= set(MODEL_REGISTRY)
    with pytest.raises(KeyError, match="unknown model"):
        build_model("nope", {})
    with pytest.raises(TypeError):
        build_model("distogram", {"no_such_option": 1})


def test_lddt_ca_perfect_rigid_and_perturbed(batch: dict[str, torch.Tensor]) -> None:
    ca, mask = batch["ca_coords"], batch["residue_mask"]
    rot, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(0)))
    moved = ca @ rot + 5.0
    assert torch.allclose(lddt_ca(moved, ca, mask)[0], torch.ones(ca.shape[0]), atol=1e-5)
    noisy = ca + torch.randn(ca.shape, generator=torch.Generator().manual_seed(1)) * 3.0
    score = lddt_ca(noisy, ca, mask)[0]
    assert (score < 0.6).all() and (score > 0.05).all()


def test_lddt_ca_hand_computed_pair() -> None:
    true = torch.tensor([[[0.0, 0, 0], [3.8, 0, 0], [30.0, 0, 0]]])
    pred = torch.tensor([[[0.0, 0, 0], [5.3, 0, 0], [0.0, 30, 0]]])  # error 1.5 Å: passes 2 and 4
    score, per_res = lddt_ca(pred, true, torch.ones(1, 3, dtype=torch.bool))
    assert math.isclose(float(score), 0.5, abs_tol=1e-6)  # only the 0-1 pair is within 15 Å
    assert math.isclose(float(per_res[0, 2]), 0.0, abs_tol=1e-6)


def test_kabsch_and_mds_recover_structure(batch: dict[str, torch.Tensor]) -> None:
    ca, mask = batch["ca_coords"][:1], batch["residue_mask"][:1]
    x = ca[0][mask[0]].double()
    dist = torch.cdist(x, x)
    rebuilt = classical_mds(dist)
    assert torch.allclose(torch.cdist(rebuilt, rebuilt), dist, atol=1e-4)
    rot, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(2)))
    rot = rot * torch.sign(torch.linalg.det(rot))
    aligned = kabsch_align(ca @ rot + 7.0, ca, mask)
    assert torch.allclose(aligned[mask], ca[mask], atol=1e-3)


def test_fix_handedness_makes_helix_right_handed() -> None:
    index = torch.arange(20)
    helix = ideal_helix_ca(index).double()
    mirrored = helix * torch.tensor([-1.0, 1.0, 1.0], dtype=torch.double)
    assert torch.allclose(fix_handedness(mirrored, index), helix)
    assert torch.allclose(fix_handedness(helix, index), helix)


@pytest.mark.parametrize("name,config,steps,lr", [
    ("distogram", {"embed_dim": 16, "channels": 16, "n_blocks": 2}, 30, 3e-3),
    ("msa_trunk", {"c_m": 16, "c_z": 8, "c_s": 16, "n_layers": 1, "n_struct_layers": 2}, 40, 3e-3),
])
def test_optimisation_reduces_loss(batch: dict[str, torch.Tensor], name: str, config: dict, steps: int,
                                   lr: float) -> None:
    torch.manual_seed(0)
    model = build_model(name, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        outputs = model(batch)
        loss, logs = model.loss(batch, outputs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        assert all(math.isfinite(v) for v in logs.values())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.9 * first, (name, losses)
    model.eval()
    with torch.no_grad():
        outputs = model(batch)
    b, length = batch["aatype"].shape
    assert outputs["ca_coords"].shape == (b, length, 3) and torch.isfinite(outputs["ca_coords"]).all()
    assert outputs["plddt"].shape == (b, length)
    assert float(outputs["plddt"].min()) >= 0.0 and float(outputs["plddt"].max()) <= 1.0
