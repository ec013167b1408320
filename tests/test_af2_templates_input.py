"""Template features of the template stage reach the AF2 family: the dataset reads
``{target}.npz`` from the templates directory (a random subset in training, the top hits at
inference, cropped like the residues), the model runs on them, and the train/predict rules take
the template manifests only for an experiment whose model uses templates."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from _features_fixture import build_feature_cache
from foldworks.features.af2 import Af2DataConfig
from foldworks.templates.features import empty_features, template_aatype
from foldworks.train.data import Af2ChainDataset, Af2FeatureDataModule, collate_af2, load_feature_file

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[1]
ENTRIES = ("1crn", "1l2y")
CFG = Af2DataConfig(max_msa_clusters=8, max_extra_msa=8, max_templates=2, num_recycle=1, crop_size=16)
SUM_PROBS = (90.0, 80.0, 70.0)


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("af2_templates")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


def _targets(cache: Path) -> list[tuple[str, Path]]:
    table = pd.read_parquet(cache / "chains.parquet")
    return sorted((f"{e}_{c}", cache / "features" / f"{e}_{c}.npz") for e, c in zip(table["entry"], table["chain"]))


def _write_templates(templates_dir: Path, target: str, feats: dict[str, np.ndarray], count: int) -> None:
    """``count`` templates in the template stage's layout: the chain's own atoms shifted by
    ``10 k`` Å along x for template ``k`` (so a slot tells which hit it holds), ranked by sum_probs."""
    templates_dir.mkdir(parents=True, exist_ok=True)
    n_res = len(feats["aatype"])
    arrays = empty_features(n_res)
    if count:
        mask = feats["atom_mask"].astype(np.float32)
        shift = np.array([10.0, 0.0, 0.0], np.float32)
        arrays["template_all_atom_positions"] = np.stack(
            [(feats["atom_positions"] + k * shift) * mask[..., None] for k in range(count)]).astype(np.float32)
        arrays["template_all_atom_masks"] = np.stack([mask] * count)
        arrays["template_aatype"] = np.stack([template_aatype(str(feats["sequence"]))] * count)
        arrays["template_sum_probs"] = np.asarray(SUM_PROBS[:count], np.float32)[:, None]
        arrays["template_domain_names"] = np.array([f"9xy{k}_A".encode() for k in range(count)])
        arrays["template_sequence"] = np.array([str(feats["sequence"]).encode()] * count)
    np.savez(templates_dir / f"{target}.npz", **arrays)


def _hit_of_slot(item: dict[str, np.ndarray], feats: dict[str, np.ndarray], slot: int) -> int:
    """Which written hit (0, 1, 2) template slot ``slot`` of recycle 0 holds, from its x shift."""
    index = item["residue_index"][0]
    mask = item["template_all_atom_masks"][0, slot] > 0
    assert mask.any()
    shift = item["template_all_atom_positions"][0, slot][mask] - feats["atom_positions"][index][mask]
    assert np.allclose(shift[:, 1:], 0.0, atol=1e-4)
    return int(round(float(shift[:, 0].mean()) / 10.0))


def test_training_items_carry_a_random_subset_of_templates_on_the_crop(cache: Path, tmp_path: Path) -> None:
    target, path = _targets(cache)[0]
    feats = load_feature_file(path)
    _write_templates(tmp_path, target, feats, count=3)
    train = Af2ChainDataset([(target, path)], CFG, seed=5, train=True, templates_dir=tmp_path)
    subsets = set()
    for slot in range(40):
        item = train[(0, slot, 0)]
        index = item["residue_index"][0]
        assert len(index) == 16 and item["template_all_atom_positions"].shape == (2, 2, 16, 37, 3)
        assert item["template_aatype"].shape == (2, 2, 16) and np.array_equal(item["aatype"][0], feats["aatype"][index])
        k = int(item["template_mask"][0].sum())
        assert item["template_mask"][0].tolist() == [1.0] * k + [0.0] * (2 - k)  # T <= max_templates, real first
        hits = tuple(_hit_of_slot(item, feats, t) for t in range(k))
        assert len(set(hits)) == k and all(item["template_sum_probs"][0, t, 0] == SUM_PROBS[h]
                                           for t, h in enumerate(hits))
        if k:  # the template's residues are the crop's
            assert np.array_equal(item["template_aatype"][0, 0], template_aatype(str(feats["sequence"]))[index])
        again = train[(0, slot, 0)]
        assert all(np.array_equal(item[key], again[key]) for key in item)  # seeded: a resumed run redraws it
        subsets.add(hits)
    assert {len(h) for h in subsets} == {0, 1, 2} and len(subsets) >= 6  # AF2's k = min(U{0..T}, max)

    val = Af2ChainDataset([(target, path)], dataclasses.replace(CFG, crop_size=None), seed=5, train=False,
                          templates_dir=tmp_path)
    whole = val[(0, 0)]
    assert whole["template_all_atom_positions"].shape[2] == len(feats["aatype"])
    assert [_hit_of_slot(whole, feats, t) for t in range(2)] == [0, 1]  # inference: the top hits


def test_zero_templates_give_empty_template_inputs(cache: Path, tmp_path: Path) -> None:
    target, path = _targets(cache)[0]
    _write_templates(tmp_path, target, load_feature_file(path), count=0)
    item = Af2ChainDataset([(target, path)], CFG, seed=5, train=True, templates_dir=tmp_path)[(0, 1, 0)]
    assert item["template_all_atom_positions"].shape == (2, 2, 16, 37, 3)
    assert item["template_mask"].sum() == 0 and item["template_pseudo_beta_mask"].sum() == 0


def test_a_chain_without_template_features_is_named(cache: Path, tmp_path: Path) -> None:
    targets = _targets(cache)
    feats = load_feature_file(targets[0][1])
    _write_templates(tmp_path / "templates", targets[0][0], feats, count=1)
    chains = pd.read_parquet(cache / "chains.parquet").assign(split=["train", "val"])
    chains.to_parquet(tmp_path / "chains.parquet")
    with pytest.raises(ValueError, match=targets[1][0]):
        Af2FeatureDataModule(tmp_path / "chains.parquet", cache / "features", {"sampler": "uniform"}, seed=1,
                             af2_config=CFG, templates_dir=tmp_path / "templates")
    with pytest.raises(ValueError, match=targets[1][0]):
        Af2ChainDataset(targets, CFG, seed=1, train=True, templates_dir=tmp_path / "templates")[(0, 0, 1)]
    no_templates = dataclasses.replace(CFG, use_templates=False)  # a model without templates reads none
    plain = Af2FeatureDataModule(tmp_path / "chains.parquet", cache / "features", {"sampler": "uniform"}, seed=1,
                                 af2_config=no_templates, templates_dir=tmp_path / "templates")
    _write_templates(tmp_path / "templates", targets[1][0], load_feature_file(targets[1][1]), count=0)
    module = Af2FeatureDataModule(tmp_path / "chains.parquet", cache / "features", {"sampler": "uniform"}, seed=1,
                                  af2_config=CFG, templates_dir=tmp_path / "templates")
    before = module.feature_set_hash()
    assert before != plain.feature_set_hash()  # template features enter the run hash
    _write_templates(tmp_path / "templates", targets[1][0], load_feature_file(targets[1][1]), count=2)
    assert module.feature_set_hash() != before


def test_model_runs_on_template_features_and_reads_them(cache: Path, tmp_path: Path) -> None:
    from foldworks.models import build_model
    from foldworks.predict.run import model_batch

    torch.manual_seed(0)
    model = build_model("evoformer", {"preset": "cpu_small", "num_recycle": 1, "num_evoformer_blocks": 1,
                                      "data": {"max_msa_clusters": 8, "max_extra_msa": 8}}).eval()
    with torch.no_grad():  # AF2 zero-initialises its output layers: perturb so templates can show
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    target, path = _targets(cache)[0]
    feats = load_feature_file(path)
    _write_templates(tmp_path, target, feats, count=3)
    cfg = model.af2_data_config(False)  # inference: the top hits
    item = Af2ChainDataset([(target, path)], cfg, seed=2, train=False, templates_dir=tmp_path)[(0, 0)]
    batch = collate_af2([item])
    assert batch["template_mask"].shape == (1, 2, cfg.max_templates) and batch["template_mask"].all()
    with torch.no_grad():
        out = model(batch)
        empty = model({**batch, "template_mask": torch.zeros_like(batch["template_mask"])})
    assert torch.isfinite(out["final_atom_positions"]).all()
    assert not torch.allclose(out["final_atom_positions"], empty["final_atom_positions"])

    from foldworks.train.templates import load_templates, pick_templates
    top = pick_templates(load_templates(tmp_path, target), cfg.max_templates, None)
    whole = model_batch(model, feats, 1, top)
    assert whole["template_sum_probs"][0, 0, :, 0].tolist() == list(SUM_PROBS[:cfg.max_templates])


MINI_SNAKEFILE = """
import functools, json, sys
sys.path.insert(0, {src!r})
from foldworks.provenance import code_hash
config["experiments"] = json.loads({experiments!r})
config["predict"] = {{"splits": ["test"], "train_subset": 0}}
TEMPLATES_ENABLED = {enabled!r}
EXPERIMENT_TASKS = {{name: "structure" for name in config["experiments"]}}

def features_of(splits):
    return ["data/features/shards/a.tsv"]

def manifests(stage_dir, keys):
    return [f"{{stage_dir}}/shards/{{key}}.tsv" for key in keys]

class _Index:
    shards_of_split = {{"train": ["a"], "val": ["b"], "test": ["c"]}}

def _chain_index():
    return _Index()

def design_params(config, tasks, name):
    return "{{}}"

{functions}

wildcard_constraints:
    experiment="plain|tmpl"

include: {train!r}
include: {predict!r}
"""


def _common_functions() -> str:
    """The template input functions of workflow/rules/common.smk, verbatim."""
    text = (REPO / "workflow" / "rules" / "common.smk").read_text()
    start = text.index("#: Where the template stage writes")
    return text[start:text.index("def all_msas", start)]


def _jobs(workdir: Path, enabled: bool) -> dict[tuple[str, str], tuple[set[str], str]]:
    """Dry run of both experiments' predictions: ``(rule, experiment)`` → (inputs, shell command)."""
    experiments = {"plain": {"model": "evoformer", "model_config": {"preset": "cpu_small", "templates": False}},
                   "tmpl": {"model": "evoformer", "model_config": {"preset": "cpu_small"}}}
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "Snakefile").write_text(MINI_SNAKEFILE.format(
        src=str(REPO / "src"), experiments=json.dumps(experiments), enabled=enabled,
        functions=_common_functions(), train=str(REPO / "workflow/rules/train.smk"),
        predict=str(REPO / "workflow/rules/predict.smk")))
    for name in ("data/chains.parquet", "data/features/shards/a.tsv",
                 *(f"data/templates/features/shards/{key}.tsv" for key in "abc")):
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text("x")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([str(bin_dir / "snakemake"), "-n", "-p", "--cores", "1", "--forceall",
                             "results/predictions/plain", "results/predictions/tmpl"], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = {}
    for block in (result.stdout + result.stderr).split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        inputs = set(re.search(r"^\s+input: (.*)$", block, flags=re.M).group(1).split(", "))
        experiment = re.search(r"wildcards: experiment=(\w+)", block).group(1)
        jobs[rule, experiment] = (inputs, re.search(r"^Shell command: (.*)$", block, flags=re.M).group(1))
    return jobs


def test_rules_take_template_manifests_only_for_a_template_experiment(tmp_path: Path) -> None:
    on, off = _jobs(tmp_path / "on", True), _jobs(tmp_path / "off", False)
    assert set(on) == set(off) == {(r, e) for r in ("train", "predict") for e in ("plain", "tmpl")}
    manifest = "data/templates/features/shards/{}.tsv".format
    for rule, shards in (("train", "ab"), ("predict", "ac")):  # train + val / train + test shards
        assert on[rule, "plain"] == off[rule, "plain"]  # inputs and command as without the stage
        assert "--templates-dir" not in on[rule, "plain"][1] and "--templates-dir" not in off[rule, "tmpl"][1]
        assert " --templates-dir data/templates/features " in on[rule, "tmpl"][1]
        assert on[rule, "tmpl"][0] - off[rule, "tmpl"][0] == {manifest(s) for s in shards}
        assert not any("templates" in path for path in on[rule, "plain"][0] | off[rule, "tmpl"][0])


def test_train_and_predict_clis_read_templates(pdb_mirror: Path, tmp_path: Path, caplog) -> None:
    from foldworks.predict.__main__ import main as predict_main
    from foldworks.train.__main__ import main as train_main

    cache = tmp_path / "cache"
    build_feature_cache(pdb_mirror, cache, ("1crn", "1l2y", "5pti", "2igd", "1ubq"))
    table = pd.read_parquet(cache / "chains.parquet")
    targets = [f"{e}_{c}" for e, c in zip(table["entry"], table["chain"])]
    lacking = targets[int(np.flatnonzero(table["split"].isin(["train", "val"]).to_numpy())[0])]

    def write(target: str, count: int) -> None:
        _write_templates(tmp_path / "templates", target, load_feature_file(cache / "features" / f"{target}.npz"),
                         count)

    for count, target in enumerate(t for t in targets if t != lacking):  # 0, 1, 2, 3 templates
        write(target, count)
    params = {"model": "evoformer", "model_config": {"preset": "cpu_small", "num_recycle": 0,
                                                      "num_evoformer_blocks": 1,
                                                      "data": {"max_msa_clusters": 8, "max_extra_msa": 8}},
              "data": {"crop_size": 16, "batch_size": 2, "max_msa_rows": 8},
              "trainer": {"max_steps": 2, "val_every_n_steps": 2, "warmup_steps": 1}}
    out = tmp_path / "ckpt"
    args = ["--experiment", "tm", "--params", json.dumps(params), "--chains", str(cache / "chains.parquet"),
            "--features-dir", str(cache / "features"), "--out-dir", str(out), "--threads", "1",
            "--templates-dir", str(tmp_path / "templates")]
    assert train_main(args) == 1 and lacking in caplog.text and not (out / "best.ckpt").exists()
    write(lacking, 3)
    assert train_main(args) == 0
    pred = tmp_path / "pred"
    predict_args = ["--checkpoint", str(out / "best.ckpt"), "--chains", str(cache / "chains.parquet"),
                    "--features-dir", str(cache / "features"), "--out-dir", str(pred), "--splits", "train,val,test",
                    "--templates-dir", str(tmp_path / "templates")]
    (tmp_path / "templates" / f"{lacking}.npz").unlink()
    caplog.clear()
    assert predict_main(predict_args) == 1 and lacking in caplog.text and not (pred / "index.tsv").exists()
    write(lacking, 3)
    assert predict_main(predict_args) == 0
    assert len(pd.read_csv(pred / "index.tsv", sep="\t")) == len(targets)


def test_which_experiments_use_templates() -> None:
    from foldworks.train.run import uses_templates

    assert not uses_templates({"model": "distogram", "model_config": {}})
    assert not uses_templates({"model": "evoformer", "model_config": {"preset": "cpu_small", "templates": False}})
    assert not uses_templates({"model": "evoformer", "model_config": {"preset": "model_3"}})
    assert uses_templates({"model": "evoformer", "model_config": {"preset": "model_1"}})
    assert uses_templates({"model": "evoformer", "model_config": {"preset": "initial_training"}})
