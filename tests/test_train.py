"""Trainer: tiny fits on real mirror chains (outputs, determinism, resume, EMA, non-finite guard)
and the data pipeline (crops, weighted/bucketed/sharded sampling) it is built on."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from _features_fixture import build_feature_cache
from foldworks.constants import CA_INDEX
from foldworks.models import register_model
from foldworks.models.common import pairwise_distances
from foldworks.provenance import code_hash, config_hash
from foldworks.train.__main__ import main as train_main
from foldworks.train.checkpoint import load_checkpoint, model_from_checkpoint
from foldworks.train.config import resolve_config, run_hash
from foldworks.train.data import ChainDataset, load_feature_file, make_example, select_targets
from foldworks.train.sampling import TrainBatchSampler, ValBatchSampler

ENTRIES = ("1crn", "1ubq", "5pti", "2igd", "1l2y", "3pdz", "1fki", "1a8o", "1lcd", "1psm")
TINY = {"model": "distogram", "model_config": {"embed_dim": 8, "channels": 8, "n_blocks": 1, "refine_steps": 5},
        "data": {"crop_size": 24, "batch_size": 4, "max_msa_rows": 4},
        "trainer": {"max_steps": 6, "val_every_n_steps": 3, "warmup_steps": 2, "seed": 3}}


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("features")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


def _train(cache: Path, out: Path, params: dict = TINY, name: str = "tiny", extra: tuple[str, ...] = ()) -> int:
    return train_main(["--experiment", name, "--params", json.dumps(params), "--chains",
                       str(cache / "chains.parquet"), "--features-dir", str(cache / "features"),
                       "--out-dir", str(out), "--threads", "1", *extra])


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_fit_writes_outputs_and_is_deterministic(cache: Path, tmp_path: Path) -> None:
    assert _train(cache, tmp_path / "a") == 0
    assert _train(cache, tmp_path / "b") == 0
    out = tmp_path / "a"
    assert {p.name for p in out.iterdir()} >= {"best.ckpt", "last.ckpt", "metrics.csv", "config.json", "resume", "logs"}
    assert not [p for p in out.rglob(".*") if p.is_file()], "temp files left behind"
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["step"]) for r in rows] == [0, 3, 6]  # step 0: the untrained model, before any update
    assert rows[0]["train_loss"] == "" and all(0.0 <= float(r["val_lddt_ca"]) <= 1.0 for r in rows)
    assert all(float(r["train_loss"]) > 0 for r in rows[1:])
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["val_batch_size"] == 1 and config["trainer"]["lr"] == 1e-3  # defaults filled
    ckpt = load_checkpoint(out / "last.ckpt")  # weights_only=True
    assert ckpt["hyper_parameters"]["config"]["model_config"] == TINY["model_config"]
    assert ckpt["foldworks"]["versions"]["torch"] == torch.__version__ and ckpt["foldworks"]["seed"] == 3
    assert len(ckpt["foldworks"]["feature_set_hash"]) == 64 and ckpt["global_step"] == 6  # final weights
    assert ckpt["foldworks"]["run_hash"] == config["run_hash"]
    assert {"config_hash", "code_hash", "input_manifest_hash", "packages"} <= set(ckpt["provenance"])
    assert ckpt["provenance"]["code_parts"] == ["train", "models"] and ckpt["provenance"]["stage"] == "train"
    assert ckpt["provenance"]["config_hash"] == config_hash(TINY)  # the slice the rule passes in params:
    assert ckpt["provenance"]["code_hash"] == code_hash("train", "models")
    best = load_checkpoint(out / "best.ckpt")
    best_row = max(rows[1:], key=lambda r: float(r["val_lddt_ca"]))
    assert best["foldworks"]["metrics"]["val_lddt_ca"] == pytest.approx(float(best_row["val_lddt_ca"]), abs=1e-6)
    assert best["global_step"] == int(best_row["step"]) and "optimizer_states" not in best  # weights only
    assert best["provenance"] == ckpt["provenance"]
    assert _same_weights(ckpt["state_dict"], load_checkpoint(tmp_path / "b" / "last.ckpt")["state_dict"])
    assert sorted(p.name for p in (out / "resume").glob("step_*.ckpt")) == ["step_000003.ckpt", "step_000006.ckpt"]
    logged = list(csv.DictReader(open(out / "logs" / "csv" / "metrics.csv")))
    assert len([r for r in logged if r.get("val_lddt_ca")]) == 3  # Lightning's CSV logger (steps < log interval)
    model, _ = model_from_checkpoint(out / "best.ckpt")
    assert not model.training


def test_predict_uses_ema_weights(cache: Path, tmp_path: Path) -> None:
    params = {**TINY, "trainer": {**TINY["trainer"], "ema_decay": 0.9}}
    assert _train(cache, tmp_path / "e", params) == 0
    ckpt = load_checkpoint(tmp_path / "e" / "best.ckpt")
    raw = {k[len("model."):]: v for k, v in ckpt["state_dict"].items()}
    assert not _same_weights(raw, ckpt["ema_state_dict"])  # the average lags the raw weights
    model, _ = model_from_checkpoint(tmp_path / "e" / "best.ckpt")
    assert _same_weights(model.state_dict(), ckpt["ema_state_dict"])
    model_raw, _ = model_from_checkpoint(tmp_path / "e" / "best.ckpt", ema=False)
    assert _same_weights(model_raw.state_dict(), raw)


def test_different_seed_changes_weights(cache: Path, tmp_path: Path) -> None:
    params = {**TINY, "trainer": {**TINY["trainer"], "seed": 4, "max_steps": 3}}
    assert _train(cache, tmp_path / "c", params) == 0
    params["trainer"]["seed"] = 3
    assert _train(cache, tmp_path / "d", params) == 0
    a, b = (load_checkpoint(tmp_path / x / "last.ckpt")["state_dict"] for x in "cd")
    assert any(not torch.equal(a[k], b[k]) for k in a)


#: The design family at test size (same data/trainer sections as TINY).
TINY_MPNN = {"model": "mpnn", "model_config": {"hidden": 8, "n_encoder": 1, "n_decoder": 1, "k_neighbors": 8},
             "data": {**TINY["data"], "max_msa_rows": 1}, "trainer": TINY["trainer"]}


@pytest.mark.parametrize("family", [TINY, TINY_MPNN], ids=["structure", "design"])
def test_resume_from_mid_run_checkpoint_is_bitwise_identical(cache: Path, tmp_path: Path, family: dict) -> None:
    # design: backbone noise and decoding order come from the RNG too
    params = {**family, "model_config": {**family["model_config"], "dropout": 0.2},  # dropout: RNG state matters
              "data": {**family["data"], "spatial_crop_prob": 0.5},
              "trainer": {**family["trainer"], "accumulate_grad_batches": 2, "checkpoint_every_n_steps": 2,
                          "keep_resume_checkpoints": 10}}
    assert _train(cache, tmp_path / "full", params) == 0
    for step in (2, 3):  # 2: saved after a training step (mid-interval); 3: saved after validation
        out = tmp_path / f"from{step}"
        (out / "resume").mkdir(parents=True)
        shutil.copy(tmp_path / "full" / "resume" / f"step_{step:06d}.ckpt", out / "resume")
        for best in (tmp_path / "full" / "resume").glob("best_step_*.ckpt"):  # as an interrupted run left it
            if int(best.stem.rsplit("_", 1)[1]) <= step:
                shutil.copy(best, out / "resume")
        assert _train(cache, out, params) == 0
        a, b = (load_checkpoint(d / "last.ckpt") for d in (tmp_path / "full", out))
        assert _same_weights(a["state_dict"], b["state_dict"]) and _same_weights(a["ema_state_dict"], b["ema_state_dict"])
        assert (out / "metrics.csv").read_text() == (tmp_path / "full" / "metrics.csv").read_text()


def test_changed_config_starts_fresh_and_finished_run_resumes_at_end(cache: Path, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "m"
    assert _train(cache, out) == 0
    first = load_checkpoint(out / "last.ckpt")
    caplog.set_level(logging.INFO)
    assert _train(cache, out) == 0  # same config: the final step checkpoint is resumed, nothing retrained
    assert "resuming from" in caplog.text and "step_000006.ckpt" in caplog.text
    assert _same_weights(first["state_dict"], load_checkpoint(out / "last.ckpt")["state_dict"])
    assert len(list(csv.DictReader(open(out / "metrics.csv")))) == 3
    caplog.clear()
    changed = {**TINY, "trainer": {**TINY["trainer"], "lr": 5e-3}}
    assert _train(cache, out, changed) == 0
    assert "starting fresh" in caplog.text and "another config" in caplog.text
    new_hash = json.loads((out / "config.json").read_text())["run_hash"]
    assert all(load_checkpoint(p)["foldworks"]["run_hash"] == new_hash for p in (out / "resume").glob("*.ckpt"))


def test_nonfinite_steps_are_skipped_then_stop_the_run(cache: Path, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(cache, broken)
    chains = pd.read_parquet(broken / "chains.parquet")
    train = select_targets(chains, ["train"], broken / "features")
    target, path = train[0]
    feats = load_feature_file(path)
    feats["deletion_matrix"] = np.full_like(feats["deletion_matrix"], np.nan)  # a corrupted feature file
    np.savez_compressed(path, **feats)
    assert _train(broken, tmp_path / "skip", {**TINY, "trainer": {**TINY["trainer"], "max_nonfinite_steps": 100}}) == 0
    last = load_checkpoint(tmp_path / "skip" / "last.ckpt")
    skipped = last["train_state"]["nonfinite_steps"]
    assert 1 <= skipped < 6 and all(torch.isfinite(v).all() for v in last["state_dict"].values())
    caplog.clear()
    assert _train(broken, tmp_path / "stop", {**TINY, "trainer": {**TINY["trainer"], "max_nonfinite_steps": 0}}) == 1
    assert "non-finite" in caplog.text and "max_nonfinite_steps=0" in caplog.text and not (tmp_path / "stop" / "last.ckpt").exists()


@register_model("test_toy_family")
class ToyFamily(nn.Module):
    """A family defined outside the package: embedding → Cα coordinates, distance loss (registry contract)."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.embed, self.out = nn.Embedding(21, hidden), nn.Linear(hidden, 3)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = self.out(self.embed(batch["aatype"])) * 10.0 + batch["residue_index"][..., None].float() * 0.1
        return {"ca_coords": x, "plddt": torch.sigmoid(x.sum(-1)) * batch["mask"]}

    def loss(self, batch: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        both = batch["residue_mask"][:, :, None] & batch["residue_mask"][:, None]
        err = (pairwise_distances(outputs["ca_coords"]) - pairwise_distances(batch["ca_coords"])).abs()
        value = (err * both).sum() / both.sum().clamp(min=1)
        return value, {"distance_error": float(value.detach())}


def test_registered_family_trains_through_the_same_trainer(cache: Path, tmp_path: Path) -> None:
    params = {"model": "test_toy_family", "model_config": {"hidden": 4}, "data": TINY["data"],
              "trainer": {"max_steps": 2, "val_every_n_steps": 2}}
    assert _train(cache, tmp_path / "toy", params) == 0
    model, config = model_from_checkpoint(tmp_path / "toy" / "best.ckpt")
    assert isinstance(model, ToyFamily) and config["model_config"] == {"hidden": 4}


def test_crops_depend_only_on_seed_epoch_index(cache: Path) -> None:
    targets = select_targets(pd.read_parquet(cache / "chains.parquet"), ["train"], cache / "features")
    ds = ChainDataset(targets, crop_size=20, max_msa_rows=4, seed=0, train=True)
    long_index = max(range(len(targets)), key=lambda i: ds[(0, i)]["residue_index"][-1])
    starts = {int(ds[(e, long_index)]["residue_index"][0]) for e in range(8)}
    assert len(starts) > 1  # crops move between epochs
    assert (ds[(5, 3, long_index)]["residue_index"] == ds[(5, 3, long_index)]["residue_index"]).all()
    assert len(ds[(0, long_index)]["aatype"]) == 20


def test_crop_size_min_draws_crop_lengths_per_item_reproducibly(cache: Path) -> None:
    targets = select_targets(pd.read_parquet(cache / "chains.parquet"), ["train"], cache / "features")
    ds = ChainDataset(targets, crop_size=40, max_msa_rows=4, seed=0, train=True, crop_size_min=10)
    fixed = ChainDataset(targets, crop_size=40, max_msa_rows=4, seed=0, train=True)
    long_index = max(range(len(targets)), key=lambda i: fixed[(0, i)]["residue_index"][-1])
    sizes = [len(ds[(e, long_index)]["aatype"]) for e in range(12)]
    assert all(10 <= n <= 40 for n in sizes) and len(set(sizes)) > 3  # drawn per item in [min, max]
    assert sizes == [len(ds[(e, long_index)]["aatype"]) for e in range(12)]  # a function of (seed, epoch, slot)
    assert len(fixed[(0, long_index)]["aatype"]) == 40  # default (null): every crop has crop_size residues
    val = ChainDataset(targets, crop_size=40, max_msa_rows=4, seed=0, train=False, crop_size_min=10)
    assert len(val[(0, long_index)]["aatype"]) > 40  # validation keeps whole chains
    assert resolve_config({"model": "distogram", "data": {"crop_size_min": 16}})["data"]["crop_size_min"] == 16
    with pytest.raises(ValueError, match="crop_size_min"):
        resolve_config({"model": "distogram", "data": {"crop_size": 32, "crop_size_min": 64}})

def test_spatial_crop_keeps_the_residues_nearest_an_anchor(cache: Path) -> None:
    targets = select_targets(pd.read_parquet(cache / "chains.parquet"), ["train"], cache / "features")
    feats = load_feature_file(max((p for _, p in targets), key=lambda p: load_feature_file(p)["aatype"].shape[0]))
    ca, resolved = feats["atom_positions"][:, CA_INDEX], feats["residue_mask"].astype(bool)
    gapped = 0
    for seed in range(6):
        ex = make_example(feats, 24, 4, np.random.default_rng(seed), spatial_crop_prob=1.0)
        index = ex["residue_index"]
        assert len(index) == 24 and (np.diff(index) > 0).all() and np.allclose(ex["ca_coords"], ca[index])
        inside = np.zeros(len(ca), bool)
        inside[index] = True
        # some chosen residue is the anchor: every chosen resolved residue is nearer it than any left-out one
        left_out = ~inside & resolved
        ok = [np.linalg.norm(ca[index] - ca[a], axis=-1)[resolved[index]].max()
              <= np.linalg.norm(ca[left_out] - ca[a], axis=-1).min() + 1e-4 for a in index if resolved[a]]
        assert any(ok)
        gapped += int((np.diff(index) > 1).any())
    assert gapped > 0  # not contiguous windows
    contiguous = make_example(feats, 24, 4, np.random.default_rng(0), spatial_crop_prob=0.0)["residue_index"]
    assert (np.diff(contiguous) == 1).all()


def test_train_sampler_weights_buckets_shards_and_resumes() -> None:
    lengths = np.array([20, 200, 35, 64, 64, 90, 30, 120, 48, 64])
    weights = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    full = TrainBatchSampler(lengths, weights, 3, 2, seed=7, weighted=True, total=200)
    batches = list(full)
    drawn = np.bincount([i for b in batches for _, _, i in b], minlength=10)
    assert drawn[3] == 0 and drawn[5] > 2 * drawn[[0, 1, 2, 4, 6]].max()  # ∝ sample_weight
    assert all(len(b) <= 3 for b in batches) and sum(len(b) == 3 for b in batches) > 0.7 * len(batches)
    unbucketed = TrainBatchSampler(lengths, weights, 3, 1, seed=7, weighted=True, total=200)
    def padding(sampler: TrainBatchSampler) -> int:  # padded residues over the run
        return sum(max(lengths[k[2]] for k in b) * len(b) - sum(lengths[k[2]] for k in b) for b in sampler)

    assert padding(full) < 0.8 * padding(unbucketed)  # windows of 2 batches sorted by length: less padding
    resumed = TrainBatchSampler(lengths, weights, 3, 2, seed=7, weighted=True, total=200, start=57)
    assert list(resumed) == batches[57:] and len(resumed) == 200
    ranks = [list(TrainBatchSampler(lengths, weights, 3, 2, seed=7, weighted=True, total=100, rank=r, world_size=2))
             for r in (0, 1)]
    assert [b for pair in zip(*ranks) for b in pair] == batches  # rank r takes stream batch k·W + r
    uniform = TrainBatchSampler(lengths, weights, 3, 2, seed=7, weighted=False, total=4)
    assert sorted(i for b in uniform for _, _, i in b) == list(range(10))  # one epoch = a permutation


def test_val_sampler_gives_each_chain_to_exactly_one_rank() -> None:
    lengths = [50, 10, 300, 20, 20, 75, 33]
    shares = [[k[2] for b in ValBatchSampler(lengths, 2, r, 3) for k in b] for r in range(3)]
    assert sorted(i for share in shares for i in share) == list(range(7))
    assert [k[2] for b in ValBatchSampler(lengths, 2) for k in b] == list(np.argsort(lengths, kind="stable"))


def test_cli_refuses_bad_experiment_and_config(cache: Path, tmp_path: Path) -> None:
    assert _train(cache, tmp_path / "x", name="../evil") == 2
    assert _train(cache, tmp_path / "y", params={**TINY, "trainer": {"max_steps": 5, "val_every_n_steps": 3}}) == 1
    assert _train(cache, tmp_path / "z", params={**TINY, "data": {"sampler": "random"}}) == 1
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="unknown data keys"):
        resolve_config({"model": "distogram", "data": {"crop": 3}})
    with pytest.raises(ValueError, match="spatial_crop_prob"):
        resolve_config({"model": "distogram", "data": {"spatial_crop_prob": 1.5}})


def test_run_hash_ignores_hardware_but_not_computation() -> None:
    base = resolve_config(TINY)
    same = resolve_config({**TINY, "trainer": {**TINY["trainer"], "devices": 4, "strategy": "ddp",
                                               "keep_resume_checkpoints": 5}})
    other = resolve_config({**TINY, "trainer": {**TINY["trainer"], "lr": 0.5}})
    assert run_hash(base, "f") == run_hash(same, "f") != run_hash(other, "f")
    assert run_hash(base, "f") != run_hash(base, "g")  # another feature set
