"""DDP: two CPU processes (gloo backend, started by Lightning) score validation over ALL chains.

The step-0 validation row scores the initial weights, which both runs share (same seed), so the
DDP value must equal the single-process value — and differ from what rank 0's share alone gives.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from _features_fixture import build_feature_cache
from foldworks.models import lddt_ca
from foldworks.train.config import resolve_config
from foldworks.train.data import ChainDataset, collate, select_rows
from foldworks.train.module import StructureModule

pytestmark = pytest.mark.slow  # two runs of ~10-20 s each (process start-up dominates)
REPO = Path(__file__).resolve().parents[1]
ENTRIES = ("1crn", "1ubq", "5pti", "2igd", "1l2y", "3pdz", "1fki", "1a8o", "1lcd", "1psm", "1aki", "2crb",
           "1stp", "1cyo", "1ql2")
PARAMS = {"model": "distogram", "model_config": {"embed_dim": 8, "channels": 8, "n_blocks": 1, "refine_steps": 5},
          "data": {"crop_size": 24, "batch_size": 2, "max_msa_rows": 4},
          "trainer": {"max_steps": 2, "val_every_n_steps": 2, "warmup_steps": 1, "seed": 5}}


MPNN_PARAMS = {"model": "mpnn", "model_config": {"hidden": 8, "n_encoder": 1, "n_decoder": 1, "k_neighbors": 8},
               "data": {**PARAMS["data"], "max_msa_rows": 1}, "trainer": PARAMS["trainer"]}


def _train(cache: Path, out: Path, *extra: str, launcher: tuple[str, ...] = (),
           env: dict[str, str] | None = None, params: dict = PARAMS) -> list[dict[str, str]]:
    env = {**(env or os.environ), "PYTHONPATH": str(REPO / "src")}
    command = [*launcher, sys.executable, "-m", "foldworks.train", "--experiment", "ddp", "--params",
               json.dumps(params), "--chains", str(cache / "chains.parquet"), "--features-dir",
               str(cache / "features"), "--out-dir", str(out), "--threads", "1", *extra]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return list(csv.DictReader(open(out / "metrics.csv")))


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cache")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


@pytest.fixture(scope="module")
def single(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """metrics.csv rows of the one-process run."""
    return _train(cache, tmp_path_factory.mktemp("single"))


def test_ddp_validation_is_gathered_over_all_ranks(cache: Path, single: list[dict[str, str]], tmp_path: Path) -> None:
    val = select_rows(pd.read_parquet(cache / "chains.parquet"), ["val"], cache / "features")
    assert len(val) >= 3
    ddp = _train(cache, tmp_path / "ddp", "--devices", "2", "--strategy", "ddp", "--accelerator", "cpu")
    assert float(ddp[0]["val_lddt_ca"]) == pytest.approx(float(single[0]["val_lddt_ca"]), abs=2e-6)
    assert float(ddp[0]["val_loss"]) == pytest.approx(float(single[0]["val_loss"]), abs=2e-6)
    logged = [r for r in csv.DictReader(open(tmp_path / "ddp" / "logs" / "csv" / "metrics.csv")) if r["val_chains"]]
    assert {float(r["val_chains"]) for r in logged} == {float(len(val))}
    assert [int(r["step"]) for r in ddp] == [0, 2] and torch.load(
        tmp_path / "ddp" / "last.ckpt", weights_only=True)["global_step"] == 2

    # the same initial weights scored here chain by chain: the mean over all chains is the DDP value,
    # the mean over rank 0's share (every 2nd chain by length) is not
    L.seed_everything(5, workers=True, verbose=False)
    model = StructureModule(resolve_config(PARAMS)).model.eval()
    dataset = ChainDataset(list(zip(val["target"], val["path"])), None, 4, 5, train=False)
    with torch.no_grad():
        scores = np.array([float(lddt_ca(model(b := collate([dataset[(0, i)]]))["ca_coords"], b["ca_coords"],
                                         b["residue_mask"])[0][0]) for i in range(len(val))])
    assert scores.mean() == pytest.approx(float(ddp[0]["val_lddt_ca"]), abs=2e-6)
    rank0 = np.argsort(val["length"].to_numpy(), kind="stable")[0::2]
    assert abs(scores[rank0].mean() - scores.mean()) > 1e-4


def test_srun_ranks_use_lightnings_slurm_environment(cache: Path, single: list[dict[str, str]], tmp_path: Path) -> None:
    """``srun -n 2 python -m foldworks.train --devices 2`` on a throw-away Slurm cluster: two ranks, one result."""
    from slurm_cluster import SlurmCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with SlurmCluster(tmp_path / "slurm", cpus=4) as cluster:
        rows = _train(cache, tmp_path / "srun", "--devices", "2", "--num-nodes", "1", "--strategy", "ddp",
                      "--accelerator", "cpu", launcher=("srun", "-n", "2", "-c", "1", "--mem-per-cpu=2000"),
                      env=cluster.env)
    assert float(rows[0]["val_lddt_ca"]) == pytest.approx(float(single[0]["val_lddt_ca"]), abs=2e-6)
    logged = [r for r in csv.DictReader(open(tmp_path / "srun" / "logs" / "csv" / "metrics.csv")) if r["val_chains"]]
    val = select_rows(pd.read_parquet(cache / "chains.parquet"), ["val"], cache / "features")
    assert {float(r["val_chains"]) for r in logged} == {float(len(val))}
    config = json.loads((tmp_path / "srun" / "config.json").read_text())
    assert config["trainer"]["devices"] == 2 and config["trainer"]["strategy"] == "ddp"


def test_ddp_design_family_validation_is_gathered_over_all_ranks(cache: Path, tmp_path: Path) -> None:
    """The design family through the same DDP path: step-0 val_recovery over all chains equals the
    one-process value and the chain-by-chain mean of the family's own validation_metrics."""
    val = select_rows(pd.read_parquet(cache / "chains.parquet"), ["val"], cache / "features")
    single = _train(cache, tmp_path / "single", params=MPNN_PARAMS)
    ddp = _train(cache, tmp_path / "ddp", "--devices", "2", "--strategy", "ddp", "--accelerator", "cpu",
                 params=MPNN_PARAMS)
    assert list(ddp[0]) == ["step", "epoch", "train_loss", "val_loss", "val_recovery"]
    assert float(ddp[0]["val_recovery"]) == pytest.approx(float(single[0]["val_recovery"]), abs=2e-6)
    assert float(ddp[0]["val_loss"]) == pytest.approx(float(single[0]["val_loss"]), abs=2e-6)
    logged = [r for r in csv.DictReader(open(tmp_path / "ddp" / "logs" / "csv" / "metrics.csv")) if r["val_chains"]]
    assert {float(r["val_chains"]) for r in logged} == {float(len(val))}
    L.seed_everything(5, workers=True, verbose=False)
    model = StructureModule(resolve_config(MPNN_PARAMS)).model.eval()
    dataset = ChainDataset(list(zip(val["target"], val["path"])), None, 1, 5, train=False)
    with torch.no_grad():
        scores = np.array([float(model.validation_metrics(b := collate([dataset[(0, i)]]), model(b))["recovery"][0])
                           for i in range(len(val))])
    assert scores.mean() == pytest.approx(float(ddp[0]["val_recovery"]), abs=2e-6)
