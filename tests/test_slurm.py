"""`snakemake --profile slurm` end to end on a real single-node Slurm cluster (a few minutes).

The fixture starts munged, slurmctld and slurmd as root from a temp directory
(tests/slurm_cluster.py; `make test` installs them via workflow/scripts/ensure_slurm.sh), points
the site variables at its partitions (cpu, gpu with two fake GPUs), runs the tiny config through
the Slurm executor plugin and records every job from `scontrol show job`. The assertions come
from Slurm itself: the partition and GRES each job got, and the environment the jobs logged.

Then, in the same working directory, one more experiment trains as DDP over two Slurm tasks
(`mpi="srun"`, `tasks=2`: two ranks, gloo on CPU; the fake GPUs only exercise the GRES request),
and is requeued with `scontrol requeue` while it trains: Slurm SIGTERMs the ranks, they save a
resume checkpoint and exit, Slurm starts the job again and it resumes from that checkpoint.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from conftest import REPO_ROOT, demo_entry_key, require_tool
from test_train_resume import SNAKEFILE as TRAIN_SNAKEFILE
from slurm_cluster import CPU_PARTITION, GPU_PARTITION, SlurmCluster, unavailable_reason
from foldworks.train.data import select_rows

pytestmark = pytest.mark.slow

GPU_RULES = {"train", "predict"}
# Four homolog pairs and two singletons: enough clusters for non-empty train/val/test splits.
SLURM_ENTRIES = ["1aki", "4lzt", "1crn", "3u7t", "1stp", "2rtg", "1ubq", "5pti", "2igd", "1fki"]
RUN_TIMEOUT_S = 900
FAST_ARGS = ["--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2"]
# Validation fraction: 3 of the 12 chains (the default 0.15 leaves 1), so both DDP ranks get a share.
VAL_FRACTION = 0.25

DDP_EXPERIMENT = "ddp"
DDP_STEPS = 100
# Validation and periodic checkpoints only at the last step: a resume checkpoint of an earlier step
# can only come from the SIGTERM handler.
DDP_PARAMS = {"model": "distogram", "data": {"crop_size": 32, "batch_size": 4, "max_msa_rows": 16},
              "trainer": {"max_steps": DDP_STEPS, "val_every_n_steps": DDP_STEPS,
                          "checkpoint_every_n_steps": DDP_STEPS, "log_every_n_steps": 5, "seed": 0}}
# Two ranks as two Slurm tasks, one (fake) GPU each. A --set-resources list on the command line
# replaces the profiles' list, so memory and runtime are repeated here.
DDP_ARGS = ["--slurm-requeue", "--set-resources", "train:mpi='srun'", "train:tasks=2", "train:tasks_per_gpu=1",
            "train:gpu=2", "train:mem_mb=4000", "train:runtime=30"]
DDP_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    test_cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), cpus=16, mem_mb=128000)
    test_cluster.start()
    try:
        yield test_cluster
    finally:
        test_cluster.stop()


def parse_jobs(scontrol_output: str) -> list[dict[str, str]]:
    """`scontrol -d -o show job` lines -> one dict per job (Key=Value fields)."""
    jobs = []
    for line in scontrol_output.splitlines():
        fields = dict(re.findall(r"(\w+(?:/\w+)?)=(\S*)", line))
        if "JobId" in fields:
            jobs.append(fields)
    return jobs


def rules_of(job: dict[str, str]) -> set[str]:
    """Rule names from the job's Slurm log path: .../slurm_logs/rule_<rule>[/<wildcards>]/ or group_<group>_<rules>/."""
    for part in Path(job.get("StdOut", "")).parts:
        if part.startswith("rule_"):
            return {part.removeprefix("rule_")}
        if part.startswith("group_"):
            return {part.split("_", 3)[-1]}
    return set()


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory, pdb_mirror):
    for tool in ("hhblits", "mmseqs", "ffindex_build"):
        require_tool(tool)
    workdir = tmp_path_factory.mktemp("tiny_slurm")
    config = yaml.safe_load((REPO_ROOT / "tests" / "tiny_config.yaml").read_text())
    config["pdb"]["source"] = str(pdb_mirror)
    # Fewer entries than the local end-to-end test: each Slurm job pays a nested Snakemake start-up.
    config["pdb"]["entries"] = SLURM_ENTRIES
    config["chains"]["splits"]["val"] = VAL_FRACTION
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    bin_dir = Path(sys.executable).parent
    env = {**cluster.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "FOLDWORKS_SLURM_CPU_PARTITION": CPU_PARTITION, "FOLDWORKS_SLURM_GPU_PARTITION": GPU_PARTITION}
    env.pop("FOLDWORKS_SLURM_ACCOUNT", None)
    # `--profile slurm` as typed from the repository root (./slurm -> profiles/slurm).
    cmd = ["timeout", "-k", "20", str(RUN_TIMEOUT_S), str(bin_dir / "snakemake"), "--profile", "slurm",
           "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"), *FAST_ARGS]
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    wall_s = time.monotonic() - started
    shown = subprocess.run(["scontrol", "-d", "-o", "show", "job"], env=cluster.env,
                           capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, (
        f"rc {result.returncode} after {wall_s:.0f} s\n{result.stderr[-6000:]}\n{cluster.logs()}"
    )
    return workdir, parse_jobs(shown.stdout), result.stderr


def test_every_job_completed_in_slurm(slurm_run):
    workdir, jobs, _ = slurm_run
    assert jobs, "scontrol recorded no jobs"
    assert {job["JobState"] for job in jobs} == {"COMPLETED"}
    ran = set().union(*(rules_of(job) for job in jobs))
    assert {"ingest", "chains", "msa_db", "msa", "features", "train", "predict",
            "evaluate", "evaluate_baseline"} <= ran
    # `localrule: True`: small aggregation jobs run in the submitting Snakemake, not as Slurm jobs
    assert not {"msa_index", "failures_report", "report", "report_design"} & ran
    assert (workdir / "results/summary.tsv").stat().st_size > 0


def test_gpu_steps_ran_in_gpu_partition_with_a_gpu(slurm_run):
    _, jobs, _ = slurm_run
    gpu_jobs = [job for job in jobs if rules_of(job) & GPU_RULES]
    assert {rule for job in gpu_jobs for rule in rules_of(job)} == GPU_RULES
    for job in gpu_jobs:
        assert job["Partition"] == GPU_PARTITION, job
        # A device was allocated: JOB_GRES (kept on the record after completion) or, while the
        # job runs, the detailed GRES index.
        allocated = re.fullmatch(r"gpu(?::\w+)?:1", job.get("JOB_GRES", "")) or re.search(
            r"gpu:1\(IDX:\d\)", job.get("GRES", ""))
        assert allocated, job


def test_cpu_steps_ran_in_cpu_partition_without_gpu(slurm_run):
    _, jobs, _ = slurm_run
    cpu_jobs = [job for job in jobs if not rules_of(job) & GPU_RULES]
    assert cpu_jobs
    for job in cpu_jobs:
        assert job["Partition"] == CPU_PARTITION, job
        assert "gpu" not in job.get("GRES", "") + job.get("JOB_GRES", ""), job


def test_per_item_stages_ran_one_slurm_job_per_shard(slurm_run):
    """No group jobs: one Slurm job per entry shard (the ID's middle two characters) running both
    fetch and parse (rule ingest)."""
    _, jobs, stderr = slurm_run
    folders = [part for job in jobs for part in Path(job["StdOut"]).parts if part.startswith(("rule_", "group_"))]
    shards = {demo_entry_key(entry) for entry in SLURM_ENTRIES}
    assert folders.count("rule_ingest") == len(shards)
    assert not {"rule_fetch", "rule_parse"} & set(folders)
    assert not [name for name in folders if name.startswith("group_")]
    assert "Group job" not in stderr


def _context(log: Path) -> dict[str, str]:
    """The `start <stage> on <host> KEY=VALUE ...` line foldworks.logutil writes first."""
    for line in log.read_text(errors="replace").splitlines():
        if " start " in line and "SLURM_JOB_PARTITION=" in line:
            return dict(re.findall(r"(SLURM_JOB_PARTITION|CUDA_VISIBLE_DEVICES|SLURM_JOB_ID)=(\S+)", line))
    return {}


def test_rule_logs_show_the_jobs_environment(slurm_run):
    """Jobs log SLURM_JOB_PARTITION and CUDA_VISIBLE_DEVICES (foldworks.logutil.setup_logging)."""
    workdir, _, _ = slurm_run
    for rule in ("fetch", "parse", "train", "predict"):
        logs = sorted((workdir / "logs" / rule).glob("*.log"))
        assert logs, f"no logs for {rule}"
        for log in logs:
            context = _context(log)
            assert context, f"{log} has no execution-context line"
            want = GPU_PARTITION if rule in GPU_RULES else CPU_PARTITION
            assert context["SLURM_JOB_PARTITION"] == want, (log, context)
            assert context["SLURM_JOB_ID"] != "-", (log, context)
            has_gpu = context["CUDA_VISIBLE_DEVICES"] not in {"-", ""}
            assert has_gpu == (rule in GPU_RULES), (log, context)


# ---- DDP over two Slurm tasks, requeued while it trains -----------------------------------------

def _wait_for_line(log: Path, pattern: str, proc: subprocess.Popen, timeout_s: float) -> str:
    """The log's text once a line matches ``pattern`` (fails if the run ends or time runs out first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        if re.search(pattern, text, re.MULTILINE):
            return text
        assert proc.poll() is None, f"snakemake ended (rc {proc.returncode}) before {pattern!r} in {log}:\n{text}"
        assert time.monotonic() < deadline, f"no {pattern!r} in {log} after {timeout_s} s:\n{text}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ddp_requeue_run(slurm_run, cluster):
    """Train DDP_EXPERIMENT over 2 Slurm tasks; `scontrol requeue` it after its first progress line.

    Returns the working directory, the train log as the preempted attempt left it, the final train
    log, the job's `scontrol` record and Snakemake's stderr."""
    workdir = slurm_run[0]
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["experiments"][DDP_EXPERIMENT] = DDP_PARAMS
    (workdir / "ddp_config.yaml").write_text(yaml.safe_dump(config))
    bin_dir = Path(sys.executable).parent
    env = {**cluster.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "FOLDWORKS_SLURM_CPU_PARTITION": CPU_PARTITION, "FOLDWORKS_SLURM_GPU_PARTITION": GPU_PARTITION}
    env.pop("FOLDWORKS_SLURM_ACCOUNT", None)
    target = f"results/checkpoints/{DDP_EXPERIMENT}/last.ckpt"
    cmd = ["timeout", "-k", "20", str(DDP_TIMEOUT_S), str(bin_dir / "snakemake"), target, "--profile", "slurm",
           "--directory", str(workdir), "--configfile", str(workdir / "ddp_config.yaml"), *FAST_ARGS, *DDP_ARGS]
    log = workdir / "logs" / "train" / f"{DDP_EXPERIMENT}.log"
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        started = _wait_for_line(log, rf"^\d+: .* {DDP_EXPERIMENT}: step \d+/{DDP_STEPS} ", proc, DDP_TIMEOUT_S / 2)
        job_id = re.search(r"SLURM_JOB_ID=(\d+)", started).group(1)
        subprocess.run(["scontrol", "requeue", job_id], env=cluster.env, check=True, timeout=30)
        # Slurm holds the requeued job for a while (slurm_cluster.CRED_EXPIRE_S) before it starts it
        # again and the new attempt truncates the log: read the preempted attempt's lines first.
        preempted = _wait_for_line(log, r"rerun the same command to resume", proc, 90)
        time.sleep(1)  # the other rank's last lines
        preempted = log.read_text(errors="replace")
        _, stderr = proc.communicate(timeout=DDP_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    shown = subprocess.run(["scontrol", "-d", "-o", "show", "job", job_id], env=cluster.env,
                           capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{stderr[-6000:]}\n{cluster.logs()}"
    (job,) = parse_jobs(shown.stdout)
    return workdir, preempted, log.read_text(errors="replace"), job, stderr


def _rank_lines(text: str, pattern: str) -> dict[int, list[str]]:
    """Lines matching ``pattern`` by the rank label `srun --label` put in front of them."""
    found: dict[int, list[str]] = {}
    for line in text.splitlines():
        label = re.match(r"^(\d+): ", line)
        if label and re.search(pattern, line):
            found.setdefault(int(label.group(1)), []).append(line)
    return found


def test_ddp_training_ran_as_two_ranks_over_two_slurm_tasks(ddp_requeue_run):
    workdir, _, final, job, stderr = ddp_requeue_run
    # only this training job ran: everything upstream was up to date
    assert re.search(r"^train\s+1\n^total\s+1$", stderr, re.MULTILINE), stderr[-3000:]
    assert rules_of(job) == {"train"} and job["Partition"] == GPU_PARTITION, job
    assert job["NumTasks"] == "2" and re.fullmatch(r"gpu(?::\w+)?:2", job.get("JOB_GRES", "")), job
    # one rank per Slurm task: world size = SLURM_NTASKS = devices x nodes = 2
    starts = _rank_lines(final, r" start train on ")
    assert set(starts) == {0, 1}, final
    for (line,) in starts.values():
        assert f"SLURM_JOB_ID={job['JobId']}" in line and "SLURM_NTASKS=2" in line, line
        assert re.search(r"CUDA_VISIBLE_DEVICES=\d", line), line
    trainer = json.loads((workdir / f"results/checkpoints/{DDP_EXPERIMENT}/config.json").read_text())["trainer"]
    assert (trainer["devices"], trainer["num_nodes"]) == (2, 1)
    # validation gathered: each rank scores every 2nd validation chain, both report the total
    val = select_rows(pd.read_parquet(workdir / "data/chains.parquet"), ["val"], workdir / "data/features")
    assert len(val) >= 3
    validated = _rank_lines(final, rf" {DDP_EXPERIMENT}: step {DDP_STEPS} epoch \d+: .*\((\d+) chains\)")
    assert set(validated) == {0, 1}, final
    for (line,) in validated.values():
        assert line.endswith(f"({len(val)} chains)"), line
    rows = list(csv.DictReader(open(workdir / f"results/checkpoints/{DDP_EXPERIMENT}/metrics.csv")))
    assert [int(row["step"]) for row in rows] == [0, DDP_STEPS]


def test_requeued_training_resumed_from_its_sigterm_checkpoint(ddp_requeue_run):
    workdir, preempted, final, job, _ = ddp_requeue_run
    assert job["JobState"] == "COMPLETED" and job["Requeue"] == "1" and job["Restarts"] == "1", job
    # the preempted attempt: both ranks got Slurm's SIGTERM, finished the step, saved and exited
    assert set(_rank_lines(preempted, r"received SIGTERM: saving a resume checkpoint")) == {0, 1}, preempted
    saved = re.findall(rf"stopped by signal SIGTERM; resume checkpoint (results/checkpoints/{DDP_EXPERIMENT}/resume/"
                       r"step_(\d{6})\.ckpt)", preempted)
    assert saved and len(set(saved)) == 1, preempted
    checkpoint, step = saved[0][0], int(saved[0][1])
    assert 0 < step < DDP_STEPS  # not a periodic checkpoint (those are at DDP_STEPS only)
    # the requeued attempt continued from it instead of step 0
    assert f"resuming from {checkpoint}" in final and "starting fresh" not in final, final
    assert _rank_lines(final, rf"train loader resumes at micro-batch {step} ").keys() == {0, 1}, final
    last = torch.load(workdir / f"results/checkpoints/{DDP_EXPERIMENT}/last.ckpt", map_location="cpu",
                      weights_only=True)
    assert last["global_step"] == DDP_STEPS


# ---- the train rule's launch line (dry run, no cluster) -------------------------------------------

# The mini Snakefile around train.smk that tests/test_train_resume.py uses, with one experiment.
LAUNCH_EXPERIMENT = json.dumps({"model": "distogram"})


@pytest.mark.parametrize("resources, launch, devices", [
    ((), "", "--devices 1 --num-nodes 1"),  # the local executor: one process, no srun
    (("train:gpu=2",), "", "--devices 2 --num-nodes 1"),  # one machine: Lightning starts 2 processes
    (("train:mpi='srun'", "train:tasks=8", "train:tasks_per_gpu=1", "train:gpu=8"),  # 1 node x 8 GPUs
     "srun --label --kill-on-bad-exit=1 --nodes=1 --ntasks=8 --ntasks-per-node=8 --cpus-per-task=2 ",
     "--devices 8 --num-nodes 1"),
    (("train:mpi='srun'", "train:tasks=16", "train:tasks_per_gpu=1", "train:gpu=16", "train:nodes=2"),  # 2 x 8
     "srun --label --kill-on-bad-exit=1 --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=2 ",
     "--devices 8 --num-nodes 2"),
    (("train:tasks=2",), "error: train: tasks=2, nodes=1 need mpi='srun'", None),
    (("train:mpi='srun'", "train:tasks=3", "train:nodes=2"), "error: train: tasks=3 is not a multiple of nodes=2", None),
], ids=["local", "one-machine-2-gpus", "1-node-x-8-gpus", "2-nodes-x-8-gpus", "tasks-without-mpi", "uneven-nodes"])
def test_train_rule_launches_srun_only_for_multi_task_jobs(tmp_path, resources, launch, devices):
    (tmp_path / "data" / "features").mkdir(parents=True)
    pd.DataFrame({"entry": ["1crn", "1ubq"], "chain": ["A", "A"], "split": ["train", "val"]}).to_parquet(
        tmp_path / "data" / "chains.parquet")
    for name in ("1crn_A", "1ubq_A"):
        (tmp_path / "data" / "features" / f"{name}.npz").write_bytes(b"")
    (tmp_path / "Snakefile").write_text(TRAIN_SNAKEFILE.format(
        src=str(REPO_ROOT / "src"), experiment=LAUNCH_EXPERIMENT, rule=str(REPO_ROOT / "workflow" / "rules" / "train.smk")))
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "snakemake"), "results/checkpoints/tiny/last.ckpt", "-n", "-p", "--cores", "4"]
    if resources:
        cmd += ["--set-resources", *resources]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    if devices is None:
        assert result.returncode != 0 and launch.removeprefix("error: ") in output, output[-3000:]
        return
    assert result.returncode == 0, output[-3000:]
    (shell,) = re.findall(r"^Shell command: (.*)$", output, re.MULTILINE)
    assert shell.startswith(f"{launch}python -m foldworks.train "), shell
    assert f" --threads 2 {devices} 2> logs/train/tiny.log" in shell, shell
