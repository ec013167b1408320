"""predict: whole-chain mmCIF outputs from a tiny trained checkpoint, read back with gemmi."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import gemmi
import numpy as np
import pandas as pd
import pytest

from _features_fixture import build_feature_cache
from foldworks.constants import RESTYPE_1TO3
from foldworks.predict.__main__ import main as predict_main
from foldworks.train.__main__ import main as train_main

ENTRIES = ("1crn", "1ubq", "5pti", "2igd", "1l2y", "3pdz", "1fki", "1a8o", "1lcd", "1psm", "1aki")


@pytest.fixture(scope="module")
def trained(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    cache = tmp_path_factory.mktemp("cache")
    build_feature_cache(pdb_mirror, cache, ENTRIES)
    out = cache / "ckpt"
    params = {"model": "msa_trunk", "model_config": {"c_m": 8, "c_z": 8, "c_s": 8, "n_layers": 1, "n_struct_layers": 1},
              "data": {"crop_size": 24, "batch_size": 4, "max_msa_rows": 4},
              "trainer": {"max_steps": 2, "val_every_n_steps": 2, "warmup_steps": 1}}
    assert train_main(["--experiment", "tiny", "--params", json.dumps(params), "--chains",
                       str(cache / "chains.parquet"), "--features-dir", str(cache / "features"),
                       "--out-dir", str(out), "--threads", "1"]) == 0
    return cache, out / "best.ckpt"


@pytest.mark.parametrize("subset", [2])
def test_predict_writes_valid_mmcif(trained: tuple[Path, Path], tmp_path: Path, subset: int) -> None:
    cache, checkpoint = trained
    out = tmp_path / "pred"
    assert predict_main(["--checkpoint", str(checkpoint), "--chains", str(cache / "chains.parquet"),
                         "--features-dir", str(cache / "features"), "--out-dir", str(out),
                         "--splits", "test", "--train-subset", str(subset), "--threads", "1"]) == 0
    chains = pd.read_parquet(cache / "chains.parquet")
    test_rows = chains[chains["split"] == "test"]
    index = list(csv.DictReader(open(out / "index.tsv"), delimiter="\t"))
    assert sorted(r["target"] for r in index if r["split"] == "test") == sorted(
        f"{e}_{c}" for e, c in zip(test_rows["entry"], test_rows["chain"]))
    assert len([r for r in index if r["split"] == "train"]) == subset
    assert len(list((out / "train").glob("*.cif"))) == subset
    for row in index:
        path = out / ("train" if row["split"] == "train" else "") / f"{row['target']}.cif"
        structure = gemmi.read_structure(str(path))
        sequence = chains.set_index(chains["entry"] + "_" + chains["chain"]).loc[row["target"], "sequence"]
        assert len(structure) == 1 and [ch.name for ch in structure[0]] == ["A"]
        residues = list(structure[0]["A"])
        assert len(residues) == len(sequence) == int(row["length"])
        assert [r.seqid.num for r in residues] == list(range(1, len(sequence) + 1))
        assert [r.name for r in residues] == [RESTYPE_1TO3.get(a, "UNK") for a in sequence]
        assert all(len(r) == 1 and r[0].name == "CA" for r in residues)
        b = np.array([r[0].b_iso for r in residues])
        assert (b >= 0).all() and (b <= 100).all()
        assert float(row["mean_plddt"]) == pytest.approx(b.mean(), abs=0.05)
        assert np.ptp(np.array([r[0].pos.tolist() for r in residues]), axis=0).max() > 1.0


def test_predict_refuses_unknown_split(trained: tuple[Path, Path], tmp_path: Path) -> None:
    cache, checkpoint = trained
    assert predict_main(["--checkpoint", str(checkpoint), "--chains", str(cache / "chains.parquet"),
                         "--features-dir", str(cache / "features"), "--out-dir", str(tmp_path),
                         "--splits", "holdout"]) == 2
