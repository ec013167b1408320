"""`snakemake --profile slurm` end to end on a real single-node Slurm cluster (a few minutes).

The fixture starts munged, slurmctld and slurmd as root from a temp directory
(tests/slurm_cluster.py; `make test` installs them via workflow/scripts/ensure_slurm.sh), points
the site variables at its partitions (cpu, gpu with two fake GPUs), runs the tiny config through
the Slurm executor plugin and records every job from `scontrol show job`. The assertions come
from Slurm itself: the partition and GRES each job got, and the environment the jobs logged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT, require_tool
from slurm_cluster import CPU_PARTITION, GPU_PARTITION, SlurmCluster, unavailable_reason

pytestmark = pytest.mark.slow

GPU_RULES = {"train", "predict"}
# Four homolog pairs and two singletons: enough clusters for non-empty train/val/test splits.
SLURM_ENTRIES = ["1aki", "4lzt", "1crn", "3u7t", "1stp", "2rtg", "1ubq", "5pti", "2igd", "1fki"]
RUN_TIMEOUT_S = 900
# Small batches so the tiny run's group jobs overlap; the profile's batch sizes are for 10^4+ entries.
FAST_ARGS = ["--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2",
             "--group-components", "batch_fetch=6", "batch_parse=6", "batch_msa=8", "batch_features=8"]


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
    assert {"fetch", "parse", "chains", "msa_db", "msa", "features", "train", "predict",
            "evaluate", "evaluate_baseline", "report"} <= ran
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


def test_per_entry_stages_were_batched(slurm_run):
    _, jobs, stderr = slurm_run
    folders = [part for job in jobs for part in Path(job["StdOut"]).parts if part.startswith(("rule_", "group_"))]
    fetch_batches = [name for name in folders if name == "group_batch_fetch_fetch"]
    assert 1 <= len(fetch_batches) <= 3  # 10 entries in batches of <= 6 jobs
    assert not [name for name in folders if name in {"rule_fetch", "rule_parse"}]
    assert "Group job batch_fetch" in stderr


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
