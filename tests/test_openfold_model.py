"""evoformer family end to end on real cached features (query-only MSA): heads, memory options,
optimisation, checkpoints, bad input (backbone-only chains, X residues), bf16 autocast. CPU, one thread."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from _features_fixture import build_feature_cache
from foldworks.constants import ATOM_ORDER, UNK_INDEX
from foldworks.models import MODEL_REGISTRY, build_model
from foldworks.models.common import distance_bins, lddt_ca
from foldworks.models.openfold import PRESETS, all_atom, losses
from foldworks.models.openfold.heads import DISTOGRAM_BINS
from foldworks.train.__main__ import main as train_main
from foldworks.train.checkpoint import model_from_checkpoint
from foldworks.train.data import ChainDataset, collate, select_targets

ENTRIES = ("1crn", "5pti", "1ubq")
TINY = {"n_blocks": 1, "c_m": 16, "c_z": 16, "c_s": 32, "n_struct_layers": 2, "c_hidden_mul": 16,
        "c_hidden_opm": 8, "c_hidden_msa": 8, "c_hidden_tri": 8, "n_heads_ipa": 4, "c_resnet": 32, "c_plddt": 32}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("of_model")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


@pytest.fixture(scope="module")
def batch(cache: Path) -> dict[str, torch.Tensor]:
    table = pd.read_parquet(cache / "chains.parquet")
    targets = select_targets(table, ["train", "val", "test"], cache / "features")
    dataset = ChainDataset(targets, crop_size=24, max_msa_rows=4, seed=0, train=True)
    return collate([dataset[(0, i)] for i in range(3)])


def _model(**kw) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("evoformer", {**TINY, **kw})


def test_registered_with_task_and_refuses_unknown_options() -> None:
    assert MODEL_REGISTRY["evoformer"].task == "structure"
    with pytest.raises(TypeError, match="unknown option"):
        build_model("evoformer", {"no_such_option": 1})
    with pytest.raises(ValueError, match="unknown preset"):
        build_model("evoformer", {"preset": "huge"})


def test_presets_default_to_af2_losses_and_refuse_removed_options() -> None:
    """Every preset trains AF2's eq. 7 losses by default (the Cα terms are opt-in), and an experiment
    config still naming a removed option fails at build time with the option's name."""
    for preset in PRESETS.values():
        weights = tuple(preset[k] for k in ("w_fape", "w_aux", "w_distogram", "w_msa", "w_plddt", "w_anglenorm"))
        assert weights == (0.5, 0.5, 0.3, 2.0, 0.01, 0.02)
        assert preset["w_ca_lddt"] == preset["w_ca_bond"] == preset["w_ca_fape"] == 0.0
    for removed in ("w_ca_far", "w_ca_dist", "w_ca_local", "init_frames", "detach_rotations", "length_signal",
                    "ca_fape_clamp"):
        with pytest.raises(TypeError, match=f"unknown option.*{removed}"):
            build_model("evoformer", {removed: 1})


def test_output_contract(batch) -> None:
    model = _model(use_pae_head=True).eval()
    with torch.no_grad():
        out = model(batch)
    b, l = batch["aatype"].shape
    assert out["ca_coords"].shape == (b, l, 3) and out["atom37_coords"].shape == (b, l, 37, 3)
    assert out["atom37_mask"].dtype == torch.bool and out["frames_rot"].shape == (b, l, 3, 3)
    assert ((out["plddt"] >= 0) & (out["plddt"] <= 1)).all()
    assert out["pae_logits"].shape == (b, l, l, 64) and out["pae_bin_centers"].shape == (64,)
    assert torch.allclose(out["ca_coords"], out["frames_trans"] * batch["mask"][..., None])
    # atom mask follows the residue type: glycine has no CB, every present residue has N, CA, C, O
    gly = (batch["aatype"] == 7) & batch["mask"]
    assert not out["atom37_mask"][gly][:, ATOM_ORDER["CB"]].any()
    assert out["atom37_mask"][batch["mask"]][:, [0, 1, 2, 4]].all()


def test_aux_losses_prefer_the_right_answer(batch) -> None:
    cb = all_atom.pseudo_beta(batch["all_atom_positions"], batch["aatype"])
    target = distance_bins(torch.cdist(cb, cb), *DISTOGRAM_BINS)
    right = F.one_hot(target, 64).float() * 10
    assert float(losses.distogram_loss(right, batch)) < 0.01 < float(losses.distogram_loss(torch.zeros_like(right), batch))
    msa = batch["msa"].long()
    bert = batch["msa_mask"][:, :, None] & batch["mask"][:, None]
    msa_right = F.one_hot(msa, 23).float() * 10
    assert float(losses.masked_msa_loss(msa_right, msa, bert)) < 0.01
    assert float(losses.masked_msa_loss(msa_right.roll(1, -1), msa, bert)) > 5
    ca = batch["ca_coords"]
    _, per_res = lddt_ca(ca, ca, batch["residue_mask"])
    bins = (per_res * 50).long().clamp(max=49)
    good = F.one_hot(bins, 50).float() * 10
    bad = F.one_hot((bins + 25) % 50, 50).float() * 10
    assert float(losses.plddt_loss(good, ca, batch, 50)) < 0.01 < float(losses.plddt_loss(bad, ca, batch, 50))


def _with_msa_rows(batch: dict[str, torch.Tensor], rows: int = 6) -> dict[str, torch.Tensor]:
    """The query-only batch with ``rows`` synthetic MSA rows (query with 30 % random substitutions and gaps)."""
    g = torch.Generator().manual_seed(0)
    query = batch["msa"][:, :1].long()
    msa = query.repeat(1, rows, 1)
    noise = torch.randint(0, 22, msa.shape, generator=g)
    msa = torch.where(torch.rand(msa.shape, generator=g) < 0.3, noise, msa)
    msa[:, 0] = query[:, 0]
    out = dict(batch, msa=msa, msa_mask=torch.ones(msa.shape[:2], dtype=torch.bool),
               deletion_matrix=torch.randint(0, 3, msa.shape, generator=g).float())
    out["msa_mask"][0, -2:] = False  # padded rows
    return out


def test_checkpointing_and_chunking_match_plain(batch) -> None:
    batch = _with_msa_rows(batch)
    plain = _model(max_recycles=1)
    state = plain.state_dict()
    variants = [_model(max_recycles=1, activation_checkpointing=True), _model(max_recycles=1, chunk_size=5),
                _model(max_recycles=1, chunk_size=2, activation_checkpointing=True)]
    results = []
    for model in [plain, *variants]:
        model.load_state_dict(state)
        model.train()
        torch.manual_seed(7)  # same BERT mask and recycle count
        out = model(batch)
        loss, _ = model.loss(batch, out)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((out["atom37_coords"].detach(), loss.detach(), grads))
    for coords, loss, grads in results[1:]:
        assert torch.allclose(coords, results[0][0], atol=1e-4)
        assert torch.allclose(loss, results[0][1], atol=1e-5)
        assert torch.allclose(grads, results[0][2], atol=1e-4, rtol=1e-3)


def test_few_adamw_steps_reduce_loss_and_checkpoint_round_trips(batch) -> None:
    model = _model(max_recycles=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def eval_loss() -> float:
        model.eval()
        with torch.no_grad():
            return float(model.loss(batch, model(batch))[0])

    before = eval_loss()
    model.train()
    for _ in range(8):
        loss, logs = model.loss(batch, model(batch))
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = eval_loss()
    assert after < before - 0.05, (before, after)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh = _model(max_recycles=0)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    model.eval(), fresh.eval()
    with torch.no_grad():
        assert torch.equal(model(batch)["atom37_coords"], fresh(batch)["atom37_coords"])


def test_backbone_only_chain_and_unknown_residues_train(batch) -> None:
    bb_only = dict(batch)
    keep = torch.zeros(37, dtype=torch.bool)
    keep[[ATOM_ORDER[a] for a in ("N", "CA", "C", "O")]] = True
    bb_only["all_atom_mask"] = batch["all_atom_mask"] & keep
    model = _model()
    model.train()
    loss, logs = model.loss(bb_only, model(bb_only))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    # X residues: atoms of X are backbone only; perturbing the reference side chain of X changes nothing
    with_x = dict(batch)
    aatype = batch["aatype"].clone()
    aatype[:, ::3] = UNK_INDEX
    with_x["aatype"] = aatype
    model.eval()
    with torch.no_grad():
        out = model(with_x)
        moved = dict(with_x)
        pos = batch["all_atom_positions"].clone()
        pos[:, ::3, 3] += 3.0  # CB and the other side-chain slots of the X residues
        pos[:, ::3, 5:] += 3.0
        moved["all_atom_positions"] = pos
        a, b = model.loss(with_x, out)[0], model.loss(moved, out)[0]
    assert out["atom37_mask"][:, ::3][batch["mask"][:, ::3]].sum(-1).eq(4).all()
    assert torch.isfinite(a) and torch.allclose(a, b)


def test_bf16_autocast_forward_gives_fp32_finite_losses(batch) -> None:
    model = _model()
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch)
        loss, logs = model.loss(batch, out)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(v == v for v in logs.values())
    loss.backward()


def test_trains_through_the_shared_trainer_and_reloads(cache: Path, tmp_path: Path) -> None:
    """Real Lightning trainer (EMA, fp32 on CPU): 3 steps, then the EMA checkpoint predicts finite atoms."""
    params = {"model": "evoformer", "model_config": {**TINY, "max_recycles": 1},
              "data": {"crop_size": 24, "batch_size": 2, "max_msa_rows": 4},
              "trainer": {"max_steps": 3, "val_every_n_steps": 3, "warmup_steps": 1}}
    code = train_main(["--experiment", "of_tiny", "--params", json.dumps(params), "--chains",
                       str(cache / "chains.parquet"), "--features-dir", str(cache / "features"),
                       "--out-dir", str(tmp_path), "--threads", "1"])
    assert code == 0
    model, config = model_from_checkpoint(tmp_path / "best.ckpt")
    assert type(model).__name__ == "EvoformerModel" and config["model_config"]["c_m"] == 16
    table = pd.read_parquet(cache / "chains.parquet")
    targets = select_targets(table, ["train", "val", "test"], cache / "features")
    whole = collate([ChainDataset(targets, None, 4, 0, train=False)[(0, 0)]])
    with torch.no_grad():
        out = model.eval()(whole)
    assert torch.isfinite(out["atom37_coords"]).all() and out["atom37_coords"].shape[1] == whole["aatype"].shape[1]


def test_memory_estimate_scales_and_chunking_lowers_it() -> None:
    model = build_model("evoformer", {})
    full = model.estimate_inference_bytes(400)
    assert 1.5e9 < full < 3e9  # measured peak RSS 2.2 GB for this preset and length (package docstring)
    assert 7 < full / model.estimate_inference_bytes(200) <= 8.01  # cubic in length
    model.chunk_size = 32
    assert model.estimate_inference_bytes(400) < full / 5


def test_padding_does_not_change_the_valid_residues(batch) -> None:
    """A chain padded to a longer batch predicts the same atoms as alone (every op masks padding)."""
    model = _model(max_recycles=1).eval()
    keep = 17
    alone = {k: v[:1, :keep] if v.dim() >= 2 and k not in ("msa", "deletion_matrix", "msa_mask") else v[:1]
             for k, v in batch.items()}
    alone["msa"], alone["deletion_matrix"] = batch["msa"][:1, :, :keep], batch["deletion_matrix"][:1, :, :keep]
    padded = {k: v.clone() for k, v in batch.items()}
    for key in ("mask", "residue_mask", "all_atom_mask"):
        padded[key][0, keep:] = False
    padded["aatype"][0, keep:] = 0
    with torch.no_grad():
        a, b = model(alone), model(padded)
        loss = model.loss(padded, b)[0]
    assert torch.allclose(a["atom37_coords"][0], b["atom37_coords"][0, :keep], atol=1e-4)
    assert torch.allclose(a["plddt"][0], b["plddt"][0, :keep], atol=1e-5)
    assert torch.isfinite(loss)


def test_ca_only_chains_train_the_structure_module_only_through_the_ca_lddt_loss(batch) -> None:
    """Chains with Cα atoms only (a third of the demo's training samples, 1FFK) have no backbone frames,
    so FAPE and the torsion loss are 0 for them and the structure module's backbone updates got no
    gradient: with only such signal the demo's model collapsed. ``w_ca_lddt`` (AF3 smooth lDDT on
    the final Cα) must give them one; the AF2 default (0) leaves them without."""
    ca_only = dict(batch)
    keep = torch.zeros(37, dtype=torch.bool)
    keep[ATOM_ORDER["CA"]] = True
    ca_only["all_atom_mask"] = batch["all_atom_mask"] & keep
    norms = {}
    for weight in (0.0, 1.0):
        model = _model(max_recycles=0, w_ca_lddt=weight)
        torch.nn.init.normal_(model.structure.backbone_update.lin.weight, std=0.1)  # off the black hole
        model.train()
        loss, logs = model.loss(ca_only, model(ca_only))
        loss.backward()
        assert logs["fape_backbone"] == 0.0 and 0.0 < logs["ca_lddt_loss"] <= 1.0
        norms[weight] = float(model.structure.backbone_update.lin.weight.grad.abs().sum())
    assert norms[0.0] == 0.0 and norms[1.0] > 1e-4, norms


def test_ca_fape_trains_ca_only_chains_in_fp32_under_bf16(batch) -> None:
    """``w_ca_fape`` (Cα pseudo-frame FAPE) gives Cα-only chains a structure-module gradient, and its
    term stays fp32 and finite under bf16 autocast."""
    ca_only = dict(batch)
    keep = torch.zeros(37, dtype=torch.bool)
    keep[ATOM_ORDER["CA"]] = True
    ca_only["all_atom_mask"] = batch["all_atom_mask"] & keep
    model = _model(max_recycles=0, w_ca_fape=1.0)
    torch.nn.init.normal_(model.structure.backbone_update.lin.weight, std=0.1)  # off the black hole
    model.train()
    out = model(ca_only)
    assert out["sm_frames_trans"].shape[1] == model.cfg["n_struct_layers"]  # the term averages these layers
    term = losses.ca_fape_loss(out, ca_only).detach()
    assert term.dtype == torch.float32 and 0.0 < float(term) < 1.0 + 1e-6
    loss, logs = model.loss(ca_only, out)
    loss.backward()
    assert logs["fape_backbone"] == 0.0 and logs["ca_fape_loss"] == pytest.approx(float(term), rel=1e-5)
    assert float(model.structure.backbone_update.lin.weight.grad.abs().sum()) > 1e-4
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out16 = model(ca_only)
        loss16, logs16 = model.loss(ca_only, out16)
    assert loss16.dtype == torch.float32 and torch.isfinite(loss16) and logs16["ca_fape_loss"] > 0.0
