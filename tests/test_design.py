"""Design family (mpnn) through the shared trainer, task-aware predict/evaluate/report, experiment
chaining (init_from / freeze) and the config-load checks, on real mirror chains."""

from __future__ import annotations

import json
import math
import logging
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from _features_fixture import build_feature_cache
from conftest import REPO_ROOT
from foldworks.constants import ATOM_ORDER, RESTYPES
from foldworks.design.fasta import read_design_fasta
from foldworks.evaluate.design import main as evaluate_design_main
from foldworks.models import build_model, model_task
from foldworks.models.mpnn import batch_inputs, knn_graph
from foldworks.predict.__main__ import main as predict_main
from foldworks.predict.design import design_chain, fasta_text
from foldworks.report.design import main as report_design_main
from foldworks.train import run as train_run
from foldworks.train.__main__ import main as train_main
from foldworks.train.checkpoint import load_checkpoint
from foldworks.train.data import collate, load_feature_file, make_example
from foldworks.train.experiments import ExperimentConfigError, experiment_tasks
from foldworks.train.init_from import InitError, freeze_parameters, init_report
from foldworks.train.module import StructureModule

ENTRIES = ("1crn", "1ubq", "5pti", "2igd", "1l2y", "3pdz", "1fki", "1a8o", "1lcd", "1psm")
DATA = {"crop_size": 24, "batch_size": 4, "max_msa_rows": 1}
TRAINER = {"max_steps": 6, "val_every_n_steps": 3, "warmup_steps": 2, "seed": 3, "lr": 0.005}
MPNN = {"model": "mpnn", "model_config": {"hidden": 8, "n_encoder": 1, "n_decoder": 1, "k_neighbors": 8},
        "data": DATA, "trainer": TRAINER}
DISTOGRAM = {"model": "distogram", "model_config": {"embed_dim": 8, "channels": 8, "n_blocks": 1, "refine_steps": 5},
             "data": {**DATA, "max_msa_rows": 4}, "trainer": TRAINER}
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("features")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


def _train(cache: Path, out: Path, params: dict, name: str = "design", extra: tuple[str, ...] = ()) -> int:
    return train_main(["--experiment", name, "--params", json.dumps(params), "--chains",
                       str(cache / "chains.parquet"), "--features-dir", str(cache / "features"),
                       "--out-dir", str(out), "--threads", "1", *extra])


@pytest.fixture(scope="module")
def trained(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mpnn")
    assert _train(cache, out, MPNN) == 0
    return out


def test_same_trainer_trains_a_structure_and_the_design_family(cache: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    make_trainer = train_run._make_trainer

    def spy(config, out_dir, accelerator, precision, callbacks):  # records what fit() built, then builds it
        seen.append((config["model"], [type(c).__name__ for c in callbacks]))
        return make_trainer(config, out_dir, accelerator, precision, callbacks)

    modules = []
    monkeypatch.setattr(train_run, "_make_trainer", spy)
    monkeypatch.setattr(train_run, "StructureModule",
                        lambda *a, **k: modules.append(StructureModule(*a, **k)) or modules[-1])
    for name, params, column in (("structure", DISTOGRAM, "val_lddt_ca"), ("design", MPNN, "val_recovery")):
        assert _train(cache, tmp_path / name, params, name) == 0
        header = (tmp_path / name / "metrics.csv").read_text().splitlines()[0]
        assert header == f"step,epoch,train_loss,val_loss,{column}"
        ckpt = load_checkpoint(tmp_path / name / "best.ckpt")
        assert column in ckpt["foldworks"]["metrics"] and "ema_state_dict" in ckpt
    assert [m for m, _ in seen] == ["distogram", "mpnn"] and seen[0][1] == seen[1][1]
    assert [(type(m).__name__, m.task, m.monitor) for m in modules] == [
        ("StructureModule", "structure", "val_lddt_ca"), ("StructureModule", "design", "val_recovery")]
    rows = (tmp_path / "design" / "metrics.csv").read_text().splitlines()[1:]
    losses = [float(r.split(",")[3]) for r in rows]
    assert losses[-1] < losses[0]  # the design family learns (validation CE falls) on the shared path


def test_design_predict_evaluate_report_on_mirror_chains(cache: Path, trained: Path, tmp_path: Path) -> None:
    pred = tmp_path / "pred"
    assert predict_main(["--checkpoint", str(trained / "best.ckpt"), "--chains", str(cache / "chains.parquet"),
                         "--features-dir", str(cache / "features"), "--out-dir", str(pred), "--splits", "test",
                         "--train-subset", "2", "--design", '{"n_samples": 3, "temperature": 0.5}']) == 0
    table = pd.read_parquet(cache / "chains.parquet")
    test = sorted(f"{e}_{c}" for e, c, s in zip(table["entry"], table["chain"], table["split"]) if s == "test")
    assert sorted(p.stem for p in pred.glob("*.fasta")) == test and len(list((pred / "train").glob("*.fasta"))) == 2
    header_recovery = {}
    for target in test:
        feats = load_feature_file(cache / "features" / f"{target}.npz")
        native_rec, samples = read_design_fasta(pred / f"{target}.fasta")
        native = native_rec["sequence"]
        assert native_rec["header"].startswith(f"{target}, score=") and len(native) == len(str(feats["sequence"]))
        assert float(native_rec["score"]) > 0 and native_rec["designed_chains"] == f"['{target.rsplit('_', 1)[1]}']"
        assert len(samples) == 3
        backbone = [ATOM_ORDER[a] for a in ("N", "CA", "C", "O")]
        designed = [i for i, ok in enumerate(feats["atom_mask"][:, backbone].all(-1)) if ok]
        values = []
        for index, record in enumerate(samples):
            seq = record["sequence"]
            assert record["sample"] == str(index + 1) and record["T"] == "0.5" and float(record["score"]) > 0
            assert "X" not in "".join(seq[i] for i in designed)  # X is never sampled
            identity = sum(seq[i] == native[i] for i in designed) / len(designed)
            assert float(record["seq_recovery"]) == pytest.approx(identity, abs=1e-4)
            values.append(identity)
        header_recovery[target] = float(np.mean(values))
        assert index_table_recovery(pred, target) == pytest.approx(np.mean(values), abs=1e-4)

    out = tmp_path / "metrics" / "design.tsv"
    assert evaluate_design_main(["--predictions", str(pred), "--checkpoint", str(trained / "best.ckpt"),
                                 "--chains", str(cache / "chains.parquet"), "--features-dir",
                                 str(cache / "features"), "--out", str(out),
                                 "--train-out", str(tmp_path / "metrics" / "train" / "design.tsv")]) == 0
    metrics = pd.read_csv(out, sep="\t").set_index("target")
    assert sorted(metrics.index) == test
    train_seqs = "".join(table.loc[table["split"] == "train", "sequence"])
    counts = Counter(train_seqs)
    freq = np.array([counts[a] for a in RESTYPES], float) / sum(counts[a] for a in RESTYPES)
    mode = RESTYPES[int(freq.argmax())]
    for target, row in metrics.iterrows():
        native = str(load_feature_file(cache / "features" / f"{target}.npz")["sequence"])
        atoms = load_feature_file(cache / "features" / f"{target}.npz")["atom_mask"]
        designed = [i for i, ok in enumerate(atoms[:, [ATOM_ORDER[a] for a in ("N", "CA", "C", "O")]].all(-1)) if ok]
        assert row["recovery"] == pytest.approx(header_recovery[target], abs=1e-4)
        assert row["baseline_mode_recovery"] == pytest.approx(np.mean([native[i] == mode for i in designed]), abs=1e-4)
        assert row["baseline_background_recovery"] == pytest.approx(
            np.mean([freq[RESTYPES.index(native[i])] for i in designed]), abs=1e-4)
        assert 1.0 < row["perplexity"] < 40.0
    summary, plot = tmp_path / "design_summary.tsv", tmp_path / "design_recovery.png"
    assert report_design_main(["--metrics", str(out), "--train-logs", str(trained / "metrics.csv"),
                               "--summary", str(summary), "--plot", str(plot)]) == 0
    row = pd.read_csv(summary, sep="\t").iloc[0]
    assert row["experiment"] == "design" and row["recovery_mean"] == pytest.approx(metrics["recovery"].mean(), abs=1e-4)
    assert plot.stat().st_size > 1000

    (pred / f"{test[0]}.fasta").unlink()  # a missing design is an error naming the target
    assert evaluate_design_main(["--predictions", str(pred), "--checkpoint", str(trained / "best.ckpt"),
                                 "--chains", str(cache / "chains.parquet"), "--features-dir",
                                 str(cache / "features"), "--out", str(tmp_path / "x.tsv")]) == 1


def index_table_recovery(pred: Path, target: str) -> float:
    return float(pd.read_csv(pred / "index.tsv", sep="\t").set_index("target").loc[target, "mean_recovery"])


def test_missing_backbone_atoms_are_masked_and_counted(cache: Path, trained: Path) -> None:
    feats = load_feature_file(cache / "features" / "1ubq_A.npz")
    feats["atom_mask"] = feats["atom_mask"].copy()
    feats["atom_mask"][5:8, ATOM_ORDER["O"]] = False  # resolved residues without their carbonyl O
    feats["atom_mask"][12, ATOM_ORDER["N"]] = False
    model = build_model("mpnn", MPNN["model_config"]).eval()
    batch = collate([make_example(feats, None, 1, None)])
    outputs = model(batch)
    node = outputs["node_mask"][0]
    assert not node[[5, 6, 7, 12]].any() and int(node.sum()) == int(batch["residue_mask"][0].sum()) - 4
    _, logs = model.loss(batch, outputs)
    assert logs["masked_backbone_residues"] == 4.0
    x = batch_inputs(batch)
    _, e_idx = knn_graph(x["X"][:, :, 1], x["mask"], model.k)
    nodes = int(x["mask"][0].sum())
    assert not torch.isin(e_idx[0, :, : min(model.k, nodes)][x["mask"][0] > 0], torch.tensor([5, 6, 7, 12])).any()
    result = design_chain(model, feats, 2, 0.1, 0)
    assert result["masked_backbone"] == 4 and not result["designed"][[5, 6, 7, 12]].any()
    text = fasta_text("1ubq_A", result, 0.1, 0)
    sample = text.splitlines()[3]
    native = text.splitlines()[1]
    assert all(sample[i] == native[i] for i in (5, 6, 7, 12))  # not designed: native kept


def test_chain_shorter_than_k_uses_all_residues(cache: Path) -> None:
    feats = load_feature_file(cache / "features" / "1l2y_A.npz")
    length = len(str(feats["sequence"]))
    assert length < 48
    model = build_model("mpnn", {"hidden": 8, "n_encoder": 1, "n_decoder": 1}).eval()  # k = 48 (default)
    batch = collate([make_example(feats, None, 1, None)])
    x = batch_inputs(batch)
    _, e_idx = knn_graph(x["X"][:, :, 1], x["mask"], model.k)
    assert e_idx.shape == (1, length, length)  # K = min(k, L)
    assert all(sorted(row) == list(range(length)) for row in e_idx[0].tolist())  # every residue sees every one
    loss, _ = model.loss(batch, model(batch))
    assert torch.isfinite(loss)
    result = design_chain(model, feats, 2, 0.1, 0)
    assert result["tokens"].shape == (2, length) and np.all(result["scores"] > 0)
    dist, idx = knn_graph(torch.randn(1, 5, 3), torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]]), 48)
    assert idx.shape == (1, 5, 5) and set(idx[0, 0, :4].tolist()) == {0, 1, 3, 4}  # masked residue ranks last


def test_init_from_reports_keys_freezes_and_refuses_shape_mismatch(cache: Path, trained: Path, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    parent = trained / "best.ckpt"
    child = {**MPNN, "init_from": str(parent), "freeze": ["encoder_layers", "features"],
             "model_config": {**MPNN["model_config"], "backbone_noise": 0.1}}
    assert _train(cache, tmp_path / "child", child, "child") == 0
    report = json.loads((tmp_path / "child" / "config.json").read_text())["init_report"]
    parent_ema = load_checkpoint(parent)["ema_state_dict"]
    assert report["matched"] == sorted(parent_ema) and not report["missing"] and not report["unexpected"]
    assert not report["shape_mismatched"] and report["checkpoint"] == str(parent)
    last = load_checkpoint(tmp_path / "child" / "last.ckpt")
    weights = {k[len("model."):]: v for k, v in last["state_dict"].items()}
    frozen = [k for k in weights if k.startswith(("encoder_layers", "features"))]
    assert frozen and all(torch.equal(weights[k], parent_ema[k]) for k in frozen)  # loaded, then never updated
    assert any(not torch.equal(weights[k], parent_ema[k]) for k in weights if k.startswith("decoder"))
    model = build_model("mpnn", MPNN["model_config"])
    trainable = len(list(model.parameters())) - len(freeze_parameters(model, ["encoder_layers", "features"]))
    assert sum(len(g["params"]) for g in last["optimizer_states"][0]["param_groups"]) == trainable

    caplog.set_level(logging.ERROR)
    wider = {**MPNN, "init_from": str(parent), "model_config": {**MPNN["model_config"], "hidden": 12}}
    assert _train(cache, tmp_path / "wider", wider, "wider") == 1
    assert "shape mismatch" in caplog.text and "features.edge_embedding.weight: (8, 416) -> (12, 416)" in caplog.text
    deeper = build_model("mpnn", {**MPNN["model_config"], "n_decoder": 2}).state_dict()
    keys = init_report(deeper, parent_ema, exclude=["W_out."])
    assert keys["missing"] and all(k.startswith("decoder_layers.1.") for k in keys["missing"])
    assert keys["excluded"] == ["W_out.bias", "W_out.weight"] and not keys["unexpected"]
    with pytest.raises(InitError, match="'decodr'"):
        freeze_parameters(build_model("mpnn", MPNN["model_config"]), ["decodr"], "child")


MINI_SNAKEFILE = """
import json, sys
sys.path.insert(0, {src!r})
from foldworks.provenance import code_hash
config["experiments"] = json.loads({experiments!r})

def features_of(splits):
    return ["data/features/a.npz"]

def template_manifests_of(experiment, splits):  # no template stage here
    return []

def templates_arg(experiment):
    return ""

wildcard_constraints:
    experiment="parent|child"

include: {rule!r}
"""


def _dry_run(workdir: Path, target: str) -> str:
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    result = subprocess.run([str(VENV_BIN / "snakemake"), "-n", "-p", "--cores", "1", target], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_init_from_is_a_dag_edge_and_a_new_parent_reruns_the_child(tmp_path: Path) -> None:
    experiments = {"parent": {"model": "mpnn"}, "child": {"model": "mpnn", "init_from": "parent"}}
    (tmp_path / "Snakefile").write_text(MINI_SNAKEFILE.format(
        src=str(REPO_ROOT / "src"), experiments=json.dumps(experiments),
        rule=str(REPO_ROOT / "workflow" / "rules" / "train.smk")))
    (tmp_path / "data" / "features").mkdir(parents=True)
    for path in ("data/chains.parquet", "data/features/a.npz"):
        (tmp_path / path).write_text("x")
    out = _dry_run(tmp_path, "results/checkpoints/child/last.ckpt")
    assert re.search(r"^train\s+2$", out, flags=re.M)  # the child's job needs the parent's
    assert "--init-from results/checkpoints/parent/best.ckpt" in out
    stamp = 1_700_000_000
    for offset, experiment in ((10, "parent"), (20, "child")):
        for name in ("best.ckpt", "last.ckpt", "metrics.csv", "config.json"):
            path = tmp_path / "results" / "checkpoints" / experiment / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
            os.utime(path, (stamp + offset, stamp + offset))
    for path in ("data/chains.parquet", "data/features/a.npz"):
        os.utime(tmp_path / path, (stamp, stamp))
    assert "Nothing to be done" in _dry_run(tmp_path, "results/checkpoints/child/last.ckpt")
    os.utime(tmp_path / "results/checkpoints/parent/best.ckpt", (stamp + 30, stamp + 30))  # parent retrained
    out = _dry_run(tmp_path, "results/checkpoints/child/last.ckpt")
    assert re.search(r"^train\s+1$", out, flags=re.M) and "wildcards: experiment=child" in out
    assert "updated input files" in out.split("Reasons:")[-1]  # i.e. the parent's best.ckpt


@pytest.mark.parametrize("experiments, message", [
    ({"a": {"model": "mpnn", "task": "folding"}}, "experiment a: unknown task 'folding'"),
    ({"a": {"model": "mpnn", "task": "structure"}}, "experiment a: task 'structure' declared, but model 'mpnn' is a design"),
    ({"a": {"model": "distogram", "predict": {"n_samples": 2}}}, "experiment a: 'predict' settings apply to design"),
    ({"a": {"model": "nope"}}, "experiment a: unknown model 'nope'"),
    ({"a": {"model": "mpnn", "init_from": "b"}}, "experiment a: init_from 'b' is neither an experiment"),
    ({"a": {"model": "mpnn", "init_from": "b"}, "b": {"model": "mpnn", "init_from": "a"}},
     "experiment a: init_from cycle a -> b -> a"),
])
def test_mismatched_experiments_fail_at_config_load(experiments: dict, message: str) -> None:
    with pytest.raises(ExperimentConfigError, match=re.escape(message)):
        experiment_tasks(experiments)


def test_config_load_accepts_the_demo_and_the_snakefile_refuses_a_mismatch(tmp_path: Path) -> None:
    import yaml

    demo = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    tasks = experiment_tasks(demo["experiments"])
    assert "design" in tasks.values() and "structure" in tasks.values()
    assert model_task("distogram") == "structure" and model_task("mpnn") == "design"
    bad = {**demo, "pdb": {**demo["pdb"], "entries": ["1crn"]},
           "experiments": {**demo["experiments"], "mpnn_bad": {"model": "mpnn", "task": "structure"}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(bad))
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    result = subprocess.run([str(VENV_BIN / "snakemake"), "-s", str(REPO_ROOT / "Snakefile"), "--directory",
                             str(tmp_path), "--configfile", str(tmp_path / "config.yaml"), "-n", "--cores", "1"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "experiment mpnn_bad: task 'structure' declared, but model 'mpnn' is a design family" in (
        result.stdout + result.stderr)


def test_torch_free_catalogue_matches_the_registry_and_the_config_check_stays_torch_free() -> None:
    """The Snakefile's experiment check reads foldworks.families, not the torch registry."""
    import subprocess
    import sys

    # A fresh interpreter: other test modules register their own toy families in this one.
    compare = ("from foldworks.models import MODEL_REGISTRY, model_task; "
               "from foldworks.families import FAMILY_TASKS; "
               "registry = {name: model_task(name) for name in MODEL_REGISTRY}; "
               "assert FAMILY_TASKS == registry, (FAMILY_TASKS, registry); print(sorted(registry))")
    done = subprocess.run([sys.executable, "-c", compare], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "evoformer" in done.stdout and "mpnn" in done.stdout
    code = ("import sys, yaml; from foldworks.train.experiments import experiment_tasks; "
            "tasks = experiment_tasks(yaml.safe_load(open('config/config.yaml'))['experiments']); "
            "print(sorted(set(tasks.values()))); assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['design', 'structure']"


def test_target_without_a_complete_backbone_is_reported_not_fatal(tmp_path: Path) -> None:
    """A Cα-only chain (as 1FFK's in the demo) has nothing to design: NaN metrics, the rest goes on."""
    import numpy as np

    from foldworks.evaluate.design import score_target

    fasta = tmp_path / "1ffk_A.fasta"
    fasta.write_text(">1ffk_A, score=nan, global_score=nan, fixed_chains=[], designed_chains=['A'], model_name=m, "
                     "seed=1\nAGKL\n>T=0.1, sample=1, score=2.0000, global_score=2.0000, seq_recovery=0.0000\nAAAA\n")
    composition = np.full(20, 0.05)
    args = ("1ffk_A", fasta, np.array([0, 7, 11, 10]), np.zeros(4, bool), np.ones(4), composition)
    row = score_target(*args, masked_backbone=4)
    assert row["designed"] == 0 and row["masked_backbone"] == 4 and math.isnan(row["recovery"])
    scored = score_target(*args[:3], np.array([True, True, False, False]), *args[4:], masked_backbone=2)
    assert scored["recovery"] == 0.5 and scored["designed"] == 2
    # The NaN row must survive the metrics TSV and the design summary (the demo's report_design
    # failed on "nan" cells read back as strings).
    from foldworks.evaluate.design import write_design_metrics
    from foldworks.report.design import summarise_design
    from foldworks.report.summary import read_metric_table

    write_design_metrics(tmp_path / "mpnn.tsv", [row, scored])
    table = read_metric_table(tmp_path / "mpnn.tsv")
    assert table["recovery"].isna().tolist() == [True, False]
    (summary,) = summarise_design({"mpnn": table}, {}, {})
    assert summary[0] == "mpnn" and summary[1] == 2 and summary[2] == 0.5
