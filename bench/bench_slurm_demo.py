"""The demo under `snakemake --profile slurm` against the same run with the local executor.

Usage (root, Debian slurm-wlm + munge installed: `bash workflow/scripts/ensure_slurm.sh`):

    nice -n 5 .venv/bin/python bench/bench_slurm_demo.py \
        --source ../shared/pdb_mirror --extra-fasta ../shared/seqdb/seqdb.fasta

Both runs start from nothing in their own temporary directory and run the same config
(default config/config.yaml, the demo) to the `all` target; the local run uses
`--cores <cpus>`, the Slurm run a throw-away single-node cluster (tests/slurm_cluster.py) that
advertises the same ``<cpus>`` CPUs, with the repository's `profiles/slurm` and its status
polling. The runs go one after the other (local first), so they see the same machine.

Where the time goes, from Snakemake's own log of each run (job start and "Finished jobid"
timestamps, 1 s resolution) and, for Slurm, `scontrol show job` polled every 15 s (submit,
start and end times of every Slurm job):

* wall time, jobs per rule, summed job time per rule (start → finished, as Snakemake saw it);
* Slurm only: queue wait (submit → start), time inside the Slurm job (start → end: the
  jobstep's nested Snakemake start-up + the rule's command), and detection lag (Slurm end →
  Snakemake's "Finished", the status polling).

Writes bench/slurm_demo.md (figures copied to BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from slurm_cluster import CPU_PARTITION, GPU_PARTITION, SlurmCluster, unavailable_reason  # noqa: E402

_STAMP = r"\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]"
_START = re.compile(_STAMP + r"\n(?:local)?(?:rule|checkpoint) (\w+):\n(?:    .*\n)*?    jobid: (\d+)\n")
_DONE = re.compile(_STAMP + r"\nFinished jobid: (\d+) \(Rule: (\w+)\)")
_SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")


def _stamp(text: str) -> float:
    return dt.datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").timestamp()


def job_times(log: str) -> dict[int, tuple[str, float, float]]:
    """Snakemake log → ``{jobid: (rule, start, finished)}`` (epoch seconds, 1 s resolution)."""
    starts = {int(m[3]): (m[2], _stamp(m[1])) for m in _START.finditer(log)}
    done = {int(m[2]): _stamp(m[1]) for m in _DONE.finditer(log)}
    return {j: (rule, t0, done[j]) for j, (rule, t0) in starts.items() if j in done}


def per_rule(times: dict[int, tuple[str, float, float]]) -> dict[str, tuple[int, float]]:
    """``{rule: (jobs, summed start→finished seconds)}``."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for rule, t0, t1 in times.values():
        out[rule][0] += 1
        out[rule][1] += t1 - t0
    return {rule: (int(n), s) for rule, (n, s) in out.items()}


class ScontrolPoller:
    """Collects ``scontrol -o show job`` records every ``every_s`` (jobs vanish after MinJobAge)."""

    def __init__(self, env: dict[str, str], every_s: float = 15.0) -> None:
        self.env, self.every_s, self.jobs = env, every_s, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self) -> None:
        shown = subprocess.run(["scontrol", "-o", "show", "job"], env=self.env, capture_output=True, text=True)
        for line in shown.stdout.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if "JobId" in fields:
                self.jobs[fields["JobId"]] = fields

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._poll()

    def __enter__(self) -> "ScontrolPoller":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()


def _slurm_time(value: str) -> float | None:
    try:
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def slurm_breakdown(jobs: dict[str, dict], log: str, times: dict) -> dict[str, float]:
    """Mean queue wait, mean time inside Slurm, mean detection lag, over the Slurm jobs (s)."""
    to_snake = {slurm: int(snake) for snake, slurm in _SUBMITTED.findall(log)}
    wait, inside, lag = [], [], []
    for job_id, fields in jobs.items():
        submit, start, end = (_slurm_time(fields.get(k, "")) for k in ("SubmitTime", "StartTime", "EndTime"))
        if None in (submit, start, end) or fields.get("JobState") != "COMPLETED":
            continue
        wait.append(start - submit)
        inside.append(end - start)
        snake = to_snake.get(job_id)
        if snake in times:
            lag.append(times[snake][2] - end)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return {"slurm_jobs": len(inside), "queue_wait_s": mean(wait), "inside_slurm_s": mean(inside),
            "detection_lag_s": mean(lag), "inside_slurm_total_s": sum(inside)}


def run_workflow(mode: str, config: Path, overrides: Path, cpus: int, env: dict[str, str], extra: list[str]) -> dict:
    """One full run from nothing in a fresh directory; returns wall time, log and job times."""
    workdir = Path(tempfile.mkdtemp(prefix=f"foldworks-{mode}-"))
    snakemake = str(Path(sys.executable).parent / "snakemake")
    cmd = [snakemake, "--directory", str(workdir), "--configfile", str(config), str(overrides), *extra]
    cmd += ["--profile", "slurm"] if mode == "slurm" else ["--cores", str(cpus)]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    (workdir / f"snakemake-{mode}.log").write_text(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed (rc {done.returncode}), log in {workdir}:\n{done.stderr[-4000:]}")
    return {"wall_s": wall, "log": done.stderr, "times": job_times(done.stderr), "workdir": workdir}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument("--source", type=Path, required=True, help="local PDB mirror")
    parser.add_argument("--extra-fasta", type=Path, help="FASTA for the embedded HH-suite database")
    parser.add_argument("--cpus", type=int, default=os.cpu_count())
    parser.add_argument("--set", action="append", default=[], metavar="YAML",
                        help="extra config overrides as YAML (e.g. a shorter training for a trial)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "slurm_demo.md")
    args = parser.parse_args()
    if (reason := unavailable_reason()):
        raise SystemExit(f"no test cluster: {reason}")
    overrides = Path(tempfile.mkdtemp(prefix="foldworks-bench-")) / "overrides.yaml"
    over: dict = {"pdb": {"source": str(args.source.resolve())}}
    if args.extra_fasta:
        over["msa"] = {"databases": [{"name": "foldworks", "fasta": [str(args.extra_fasta.resolve())]}]}
    for text in args.set:
        over = _merge(over, yaml.safe_load(text))
    overrides.write_text(yaml.safe_dump(over))
    base_env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    local = run_workflow("local", args.config, overrides, args.cpus, base_env, [])
    print(f"local: {local['wall_s']:.0f} s", flush=True)
    with SlurmCluster(Path(tempfile.mkdtemp(prefix="foldworks-slurm-")), cpus=args.cpus, mem_mb=64000) as cluster:
        env = {**cluster.env, "PATH": base_env["PATH"], "FOLDWORKS_SLURM_CPU_PARTITION": CPU_PARTITION,
               "FOLDWORKS_SLURM_GPU_PARTITION": GPU_PARTITION}
        env.pop("FOLDWORKS_SLURM_ACCOUNT", None)
        with ScontrolPoller(cluster.env) as poller:
            slurm = run_workflow("slurm", args.config, overrides, args.cpus, env, [])
    print(f"slurm: {slurm['wall_s']:.0f} s", flush=True)
    breakdown = slurm_breakdown(poller.jobs, slurm["log"], slurm["times"])
    args.out.write_text(report(args, over, local, slurm, breakdown))
    print(args.out.read_text())


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in (extra or {}).items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def report(args: argparse.Namespace, over: dict, local: dict, slurm: dict, breakdown: dict) -> str:
    """Markdown: walls, ratio, per-rule job counts and summed job time, the Slurm breakdown."""
    rules_l, rules_s = per_rule(local["times"]), per_rule(slurm["times"])
    lines = [f"# Demo: `--profile slurm` vs local ({dt.date.today()}, {args.cpus} CPUs, `{args.config.name}`)", "",
             f"Overrides: `{yaml.safe_dump({k: v for k, v in over.items() if k not in ('pdb', 'msa')}).strip()}`", "",
             "| run | wall (s) | jobs |", "|---|---:|---:|",
             f"| local `--cores {args.cpus}` | {local['wall_s']:.0f} | {len(local['times'])} |",
             f"| `--profile slurm` (single-node test cluster) | {slurm['wall_s']:.0f} | {len(slurm['times'])} |",
             f"| ratio slurm / local | {slurm['wall_s'] / local['wall_s']:.2f}x | |", "",
             "| rule | jobs | local job-s | slurm job-s |", "|---|---:|---:|---:|"]
    for rule in sorted(set(rules_l) | set(rules_s), key=lambda r: -rules_s.get(r, (0, 0))[1]):
        n, ls = rules_l.get(rule, (0, 0.0))
        lines.append(f"| {rule} | {n} | {ls:.0f} | {rules_s.get(rule, (0, 0.0))[1]:.0f} |")
    lines += ["", "Slurm jobs (scontrol, means per job): "
              f"{breakdown['slurm_jobs']} jobs, queue wait {breakdown['queue_wait_s']:.1f} s, inside Slurm "
              f"{breakdown['inside_slurm_s']:.1f} s (sum {breakdown['inside_slurm_total_s']:.0f} s), "
              f"detection lag {breakdown['detection_lag_s']:.1f} s.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
