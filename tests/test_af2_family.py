"""The ``evoformer`` family (AlphaFold2) end to end: DeepMind weights → ``import_weights`` →
``init_from`` (the imported checkpoint, or the raw ``.npz``) → a few training steps on real cached
features → ``predict`` (all-atom mmCIF, pLDDT in B-factors, PAE JSON, pTM); the memory guard,
inference precision and the training recycle draw on CPU."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import gemmi
import numpy as np
import pytest
import torch

from _features_fixture import build_feature_cache
from conftest import _shared_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REFERENCE = _shared_path("FOLDWORKS_AF2_REFERENCE", "af2_reference")
CASES = sorted(p.name for p in REFERENCE.iterdir() if (p / "params.npz").is_file()) if REFERENCE else []
ENTRIES = ("1crn", "5pti", "2igd", "1l2y", "1ubq", "1fki")
TINY = {"preset": "cpu_small", "templates": False, "num_recycle": 1, "num_evoformer_blocks": 1,
        "data": {"max_msa_clusters": 8, "max_extra_msa": 8}}


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("af2_family")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


def _case(case: str) -> Path:
    if REFERENCE is None:
        pytest.skip("AF2 reference fixtures not found: set FOLDWORKS_AF2_REFERENCE or provide ../shared/af2_reference")
    return REFERENCE / case


def _data_sizes(case_dir: Path) -> dict[str, int]:
    """The case's input-pipeline sizes (its AF2 ``config.data``, eval mode)."""
    from foldworks.features.af2 import Af2DataConfig

    cfg = Af2DataConfig.from_af2_config(json.loads((case_dir / "config.json").read_text()), "eval")
    return {"max_msa_clusters": cfg.max_msa_clusters, "max_extra_msa": cfg.max_extra_msa,
            "max_templates": cfg.max_templates}


def _metrics(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(out / "metrics.csv")))


@pytest.mark.parametrize("case", CASES or [pytest.param("none", marks=pytest.mark.skip("no AF2 reference cases"))])
def test_imported_deepmind_weights_train_and_predict(case: str, cache: Path, tmp_path: Path) -> None:
    from foldworks.models.weights.registry import import_weights
    from foldworks.predict.__main__ import main as predict_main
    from foldworks.train.__main__ import main as train_main
    from foldworks.train.checkpoint import model_weights
    from foldworks.train.init_from import parent_weights

    case_dir = _case(case)
    imported = tmp_path / "imported.ckpt"
    ckpt = import_weights(case_dir / "params.npz", imported)
    raw = parent_weights(case_dir / "params.npz")  # the raw file converts to the same weights
    assert raw.keys() == model_weights(ckpt).keys()
    assert all(torch.equal(raw[k], model_weights(ckpt)[k]) for k in raw)
    params = {"model": "evoformer", "init_from": str(imported),
              "model_config": {**ckpt["model_config"], "num_recycle": 0, "data": _data_sizes(case_dir)},
              "data": {"crop_size": 32, "batch_size": 2, "max_msa_rows": 8},
              "trainer": {"max_steps": 6, "val_every_n_steps": 6, "warmup_steps": 1, "lr": 1e-3, "ema_decay": 0.0}}
    out = tmp_path / "ckpt"
    assert train_main(["--experiment", "ft", "--params", json.dumps(params), "--chains", str(cache / "chains.parquet"),
                       "--features-dir", str(cache / "features"), "--out-dir", str(out), "--threads", "1"]) == 0
    report = json.loads((out / "config.json").read_text())["init_report"]
    assert not report["missing"] and not report["unexpected"] and len(report["matched"]) == len(raw)
    rows = _metrics(out)
    assert [int(r["step"]) for r in rows] == [0, 6]
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])

    pred = tmp_path / "pred"
    assert predict_main(["--checkpoint", str(out / "best.ckpt"), "--chains", str(cache / "chains.parquet"),
                         "--features-dir", str(cache / "features"), "--out-dir", str(pred), "--splits", "test"]) == 0
    index = list(csv.DictReader(open(pred / "index.tsv"), delimiter="\t"))
    assert index
    for row in index:
        structure = gemmi.read_structure(str(pred / f"{row['target']}.cif"))
        atoms = [a for r in structure[0][0] for a in r]
        assert len(atoms) == int(row["n_atoms"]) > 4 * int(row["length"])  # all-atom, not Cα
        b = np.array([a.b_iso for a in atoms])
        assert 0.0 <= b.min() and b.max() <= 100.0 and abs(b.mean() - float(row["mean_plddt"])) < 15.0
        pae = json.loads((pred / f"{row['target']}_pae.json").read_text())[0]
        assert np.asarray(pae["predicted_aligned_error"]).shape == (int(row["length"]),) * 2
        assert 0.0 < float(row["ptm"]) <= 1.0


def test_init_from_rejects_an_unknown_weights_file(tmp_path: Path) -> None:
    from foldworks.train.init_from import InitError, parent_weights

    bad = tmp_path / "weights.npz"
    np.savez(bad, something=np.zeros(3))
    with pytest.raises(InitError, match="weights.npz"):
        parent_weights(bad)


def _batch(cache: Path, model, target: str = "1ubq_A") -> dict[str, torch.Tensor]:
    from foldworks.predict.run import model_batch
    from foldworks.train.data import load_feature_file

    return model_batch(model, load_feature_file(cache / "features" / f"{target}.npz"), 1)


def test_training_draws_the_recycle_count_and_eval_runs_all(cache: Path) -> None:
    from foldworks.models import build_model

    torch.manual_seed(0)
    model = build_model("evoformer", {**TINY, "num_recycle": 3})
    batch = _batch(cache, model)
    assert batch["aatype"].shape[1] == 4
    model.eval()
    with torch.no_grad():
        assert int(model(batch)["num_cycles"]) == 4
    model.train()
    with torch.no_grad():
        drawn = {int(model(batch)["num_cycles"]) for _ in range(12)}
    assert drawn <= {1, 2, 3, 4} and len(drawn) >= 3


def test_loss_is_finite_and_backpropagates_in_fp32(cache: Path) -> None:
    from foldworks.models import build_model

    torch.manual_seed(0)
    model = build_model("evoformer", TINY)
    model.train()
    batch = _batch(cache, model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs = model(batch)
        loss, logs = model.loss(batch, outputs)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert {"fape", "supervised_chi", "distogram", "masked_msa", "plddt_loss"} <= set(logs)
    loss.backward()
    assert model.structure_module.bb_update.linear.weight.grad.abs().sum() > 0


def test_bf16_inference_on_cpu_matches_fp32_roughly(cache: Path) -> None:
    from foldworks.models import build_model
    from foldworks.predict.run import predict_chain
    from foldworks.train.data import load_feature_file

    torch.manual_seed(0)
    model = build_model("evoformer", TINY).eval()
    feats = load_feature_file(cache / "features" / "1crn_A.npz")
    fp32 = predict_chain(model, feats, 1, "fp32")
    bf16 = predict_chain(model, feats, 1, "bf16")
    assert fp32["atom37_coords"].shape == bf16["atom37_coords"].shape == (46, 37, 3)
    assert 0.0 <= bf16["plddt"].min() and bf16["plddt"].max() <= 1.0
    assert np.abs(fp32["ca_coords"] - bf16["ca_coords"]).max() < 1.0  # Å
    with pytest.raises(ValueError, match="fp16"):
        predict_chain(model, feats, 1, "fp16")


def test_chunking_gives_the_same_prediction(cache: Path) -> None:
    from foldworks.models import build_model
    from foldworks.predict.run import predict_chain
    from foldworks.train.data import load_feature_file

    torch.manual_seed(0)
    model = build_model("evoformer", TINY).eval()
    feats = load_feature_file(cache / "features" / "1crn_A.npz")
    whole = predict_chain(model, feats, 1)
    model.set_chunk_size(4)
    chunked = predict_chain(model, feats, 1)
    np.testing.assert_allclose(chunked["atom37_coords"], whole["atom37_coords"], atol=1e-4)


def test_memory_guard_estimates_the_af2_model_and_names_the_chain() -> None:
    from foldworks.models import build_model
    from foldworks.predict.memory import ChainTooLarge, check_memory, estimate_inference_bytes

    small = build_model("evoformer", TINY)
    short, long = estimate_inference_bytes(small, 100, 8), estimate_inference_bytes(small, 1000, 8)
    assert long / short > 100  # at least L² (pair) growth
    small.chunk_size = 16
    assert estimate_inference_bytes(small, 1000, 8) < long
    with pytest.raises(ChainTooLarge, match=r"9big_B: .*3000 residues"):
        check_memory(small, "9big_B", 3000, 8, 0.5)
