"""Trainer: a tiny full fit on real mirror chains writes checkpoints/metrics/config, deterministically."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from _features_fixture import build_feature_cache
from foldworks.train.__main__ import main as train_main
from foldworks.train.checkpoint import load_checkpoint, model_from_checkpoint
from foldworks.train.config import resolve_config
from foldworks.train.data import ChainDataset, select_targets

ENTRIES = ("1crn", "1ubq", "5pti", "2igd", "1l2y", "3pdz", "1fki", "1a8o", "1lcd", "1psm")
TINY = {"model": "distogram", "model_config": {"embed_dim": 8, "channels": 8, "n_blocks": 1, "refine_steps": 5},
        "data": {"crop_size": 24, "batch_size": 4, "max_msa_rows": 4},
        "trainer": {"max_steps": 6, "val_every_n_steps": 3, "warmup_steps": 2, "seed": 3}}


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("features")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


def _train(cache: Path, out: Path, params: dict = TINY, name: str = "tiny") -> int:
    return train_main(["--experiment", name, "--params", json.dumps(params), "--chains",
                       str(cache / "chains.parquet"), "--features-dir", str(cache / "features"),
                       "--out-dir", str(out), "--threads", "1"])


def test_fit_writes_outputs_and_is_deterministic(cache: Path, tmp_path: Path) -> None:
    assert _train(cache, tmp_path / "a") == 0
    assert _train(cache, tmp_path / "b") == 0
    out = tmp_path / "a"
    assert {p.name for p in out.iterdir()} >= {"best.ckpt", "last.ckpt", "metrics.csv", "config.json"}
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temp files left behind"
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["step"]) for r in rows] == [0, 3, 6]  # step 0: the untrained model, before any update
    assert rows[0]["train_loss"] == "" and all(0.0 <= float(r["val_lddt_ca"]) <= 1.0 for r in rows)
    assert all(float(r["train_loss"]) > 0 for r in rows[1:])
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["val_batch_size"] == 1 and config["trainer"]["lr"] == 1e-3  # defaults filled
    ckpt = load_checkpoint(out / "last.ckpt")  # weights_only=True
    assert ckpt["hyper_parameters"]["config"]["model_config"] == TINY["model_config"]
    assert ckpt["foldworks"]["versions"]["torch"] == torch.__version__
    assert len(ckpt["foldworks"]["feature_set_hash"]) == 64 and ckpt["global_step"] == 6  # final weights
    best = load_checkpoint(out / "best.ckpt")
    assert max(float(r["val_lddt_ca"]) for r in rows[1:]) == pytest.approx(float(best["callbacks"][
        next(k for k in best["callbacks"] if k.startswith("ModelCheckpoint"))]["best_model_score"]), abs=1e-5)
    assert best["global_step"] == int(max(rows[1:], key=lambda r: float(r["val_lddt_ca"]))["step"])
    other = load_checkpoint(tmp_path / "b" / "last.ckpt")
    for key, value in ckpt["state_dict"].items():
        assert torch.equal(value, other["state_dict"][key]), key
    model, _ = model_from_checkpoint(out / "best.ckpt")
    assert not model.training


def test_different_seed_changes_weights(cache: Path, tmp_path: Path) -> None:
    params = {**TINY, "trainer": {**TINY["trainer"], "seed": 4, "max_steps": 3}}
    assert _train(cache, tmp_path / "c", params) == 0
    params["trainer"]["seed"] = 3
    assert _train(cache, tmp_path / "d", params) == 0
    a, b = (load_checkpoint(tmp_path / x / "last.ckpt")["state_dict"] for x in "cd")
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_crops_depend_only_on_seed_epoch_index(cache: Path) -> None:
    import pandas as pd

    targets = select_targets(pd.read_parquet(cache / "chains.parquet"), ["train"], cache / "features")
    ds = ChainDataset(targets, crop_size=20, max_msa_rows=4, seed=0, train=True)
    long_index = max(range(len(targets)), key=lambda i: ds[(0, i)]["residue_index"][-1])
    starts = {int(ds[(e, long_index)]["residue_index"][0]) for e in range(8)}
    assert len(starts) > 1  # crops move between epochs
    assert (ds[(5, long_index)]["residue_index"] == ds[(5, long_index)]["residue_index"]).all()
    assert len(ds[(0, long_index)]["aatype"]) == 20


def test_cli_refuses_bad_experiment_and_config(cache: Path, tmp_path: Path) -> None:
    assert _train(cache, tmp_path / "x", name="../evil") == 2
    assert _train(cache, tmp_path / "y", params={**TINY, "trainer": {"max_steps": 5, "val_every_n_steps": 3}}) == 1
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="unknown data keys"):
        resolve_config({"model": "distogram", "data": {"crop": 3}})
