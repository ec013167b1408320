"""Full resume: a training job killed mid-run (SIGKILL under Snakemake, or SIGTERM as Slurm preemption)
and rerun ends with weights bitwise identical to an uninterrupted run with the same seed (CPU).

The Snakemake runs use the real ``workflow/rules/train.smk`` rule, included from a minimal Snakefile
over a prepared feature cache (no fetch/parse/MSA stages).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from _features_fixture import build_feature_cache

pytestmark = pytest.mark.slow  # ~4 Snakemake/trainer start-ups plus short training runs
REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
ENTRIES = ("1crn", "1ubq", "5pti", "2igd", "1l2y", "3pdz", "1fki", "1a8o", "1lcd", "1psm")
EXPERIMENT = {"model": "distogram",
              "model_config": {"embed_dim": 8, "channels": 8, "n_blocks": 1, "refine_steps": 5, "dropout": 0.1},
              "data": {"crop_size": 24, "batch_size": 3, "max_msa_rows": 4, "spatial_crop_prob": 0.5},
              "trainer": {"max_steps": 60, "val_every_n_steps": 10, "checkpoint_every_n_steps": 5,
                          "warmup_steps": 3, "seed": 11, "accumulate_grad_batches": 2}}
SNAKEFILE = """
import json, sys
sys.path.insert(0, {src!r})
import pandas as pd
from foldworks.provenance import code_hash
shell.prefix("set -euo pipefail; export PYTHONPATH={src}; ")
config["experiments"] = {{"tiny": json.loads({experiment!r})}}

def features_of(splits):
    table = pd.read_parquet("data/chains.parquet")
    chosen = table[table["split"].isin(splits)]
    return sorted(f"data/features/{{e}}_{{c}}.npz" for e, c in zip(chosen["entry"], chosen["chain"]))

def template_manifests_of(experiment, splits):  # no template stage here
    return []

def templates_arg(experiment):
    return ""

wildcard_constraints:
    experiment="tiny"

include: {rule!r}
"""
TARGET = "results/checkpoints/tiny/last.ckpt"


@pytest.fixture(scope="module")
def cache(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cache")
    build_feature_cache(pdb_mirror, out, ENTRIES)
    return out


def _workdir(base: Path, cache: Path) -> Path:
    (base / "data").mkdir(parents=True)
    shutil.copy(cache / "chains.parquet", base / "data" / "chains.parquet")
    shutil.copytree(cache / "features", base / "data" / "features")
    (base / "Snakefile").write_text(SNAKEFILE.format(src=str(REPO / "src"), experiment=json.dumps(EXPERIMENT),
                                                     rule=str(REPO / "workflow" / "rules" / "train.smk")))
    return base


def _snakemake(workdir: Path) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    return subprocess.Popen([str(VENV_BIN / "snakemake"), "--cores", "1", "--rerun-incomplete", TARGET],
                            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _trainer_pid(workdir: Path) -> int | None:
    """PID of the ``python -m foldworks.train`` process running in ``workdir`` (read from /proc)."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if b"foldworks.train" in cmdline and Path(os.readlink(proc / "cwd")).resolve() == workdir.resolve():
                return int(proc.name)
        except (OSError, ValueError):
            continue
    return None


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"run ended before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def _weights(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    return {"state_dict": ckpt["state_dict"], "ema": ckpt["ema_state_dict"], "step": ckpt["global_step"]}


def _assert_bitwise_equal(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa["step"] == wb["step"] == EXPERIMENT["trainer"]["max_steps"]
    for key in ("state_dict", "ema"):
        assert wa[key].keys() == wb[key].keys()
        differing = [k for k in wa[key] if not torch.equal(wa[key][k], wb[key][k])]
        assert not differing, f"{key}: {differing}"


@pytest.fixture(scope="module")
def reference(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run of the same target."""
    workdir = _workdir(tmp_path_factory.mktemp("reference"), cache)
    proc = _snakemake(workdir)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return workdir


def test_sigkilled_training_resumes_bitwise_under_snakemake(cache: Path, reference: Path, tmp_path: Path) -> None:
    workdir = _workdir(tmp_path / "killed", cache)
    resume_dir = workdir / "results/checkpoints/tiny/resume"
    proc = _snakemake(workdir)
    _wait_for(resume_dir / "step_000010.ckpt", proc)
    pid = _trainer_pid(workdir)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, out[-3000:]
    assert not (workdir / TARGET).exists() and not (workdir / "results/checkpoints/tiny/metrics.csv").exists()
    survivors = sorted(p.name for p in resume_dir.glob("step_*.ckpt"))  # not an output: Snakemake kept it
    assert survivors and survivors[-1] < "step_000060.ckpt", survivors

    rerun = _snakemake(workdir)
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out[-3000:]
    log = (workdir / "logs/train/tiny.log").read_text()
    assert f"resuming from results/checkpoints/tiny/resume/{survivors[-1]}" in log
    _assert_bitwise_equal(reference / TARGET, workdir / TARGET)
    for name in ("metrics.csv", "config.json"):
        assert (workdir / "results/checkpoints/tiny" / name).read_text() == (
            reference / "results/checkpoints/tiny" / name).read_text()
    assert torch.equal(*(torch.load(d / "results/checkpoints/tiny/best.ckpt", weights_only=True)["ema_state_dict"][
        "head.weight"] for d in (workdir, reference)))


def test_sigterm_saves_a_checkpoint_exits_143_and_resumes_bitwise(cache: Path, reference: Path, tmp_path: Path) -> None:
    workdir = _workdir(tmp_path / "preempted", cache)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "foldworks.train", "--experiment", "tiny", "--params", json.dumps(EXPERIMENT),
               "--chains", "data/chains.parquet", "--features-dir", "data/features",
               "--out-dir", "results/checkpoints/tiny", "--threads", "1", "--devices", "1"]
    resume_dir = workdir / "results/checkpoints/tiny/resume"
    proc = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(resume_dir / "step_000005.ckpt", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "received SIGTERM" in err and "rerun the same command to resume" in err
    saved = max(p.name for p in resume_dir.glob("step_*.ckpt"))
    assert saved > "step_000005.ckpt" and f"resume checkpoint results/checkpoints/tiny/resume/{saved}" in err
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from results/checkpoints/tiny/resume/{saved}" in result.stderr
    _assert_bitwise_equal(reference / TARGET, workdir / TARGET)
