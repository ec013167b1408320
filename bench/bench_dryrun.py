"""`snakemake --profile profiles/slurm -n` at N synthetic entries: wall time, peak memory, jobs and
Slurm submissions. Writes bench/dryrun.md.

Usage: .venv/bin/python bench/bench_dryrun.py [--sizes 500 1000 2000 10000]
       [--scenarios fresh after-chains] [--upstream-groups] [--out bench/dryrun.md]

Entries are synthetic PDB-style IDs (9a00, 9a01, ...); a dry run executes nothing, so they need
not exist. Scenarios:

* ``fresh``: an empty working directory. The DAG holds fetch and parse per entry, the ``chains``
  checkpoint and what follows it (MSA and feature jobs are unknown until the checkpoint ran).
* ``after-chains``: fetch, parse and chains outputs exist (empty placeholders, plus a synthetic
  data/chains.parquet with one chain and one unique sequence per entry), so the DAG holds one
  ``msa`` and one ``features`` job per entry.

Submissions are counted from the dry-run log: each ``Group job`` block is one sbatch call, and
so is every job outside a group, except jobs without a command (``rule all``), which Snakemake
runs itself. ``--upstream-groups`` runs Snakemake's own group handling instead of the one in
workflow/rules/common.smk, to measure what that fixes (fresh scenario, N <= 2000 only: after the
checkpoint its group checks are quadratic, 46 s CPU at N = 250 against 5 s).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
SITE_ENV = {"FOLDWORKS_SLURM_CPU_PARTITION": "bench_cpu", "FOLDWORKS_SLURM_GPU_PARTITION": "bench_gpu",
            "FOLDWORKS_SLURM_ACCOUNT": "bench_account"}
# Runs Snakemake with its own DAG._update_group_components: common.smk patches a stand-in class.
UPSTREAM_WRAPPER = (
    "import sys, snakemake.api, snakemake.dag as dag\n"
    "class StandIn(dag.DAG): pass\n"
    "dag.DAG = StandIn\n"
    "from snakemake.cli import main\n"
    "sys.argv = ['snakemake'] + sys.argv[1:]\n"
    "main()\n"
)
ID_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
# Linux limit on one argument string: Snakemake runs a job as `bash -c "<command>"`, so a longer
# command fails with E2BIG ("Argument list too long") however high ARG_MAX is.
MAX_ARG_STRLEN = 128 * 1024


def synthetic_ids(n: int) -> list[str]:
    """``n`` distinct 4-character IDs matching the entry wildcard: 9a00, 9a01, ... 9zzz, 8000, ..."""
    ids = []
    for i in range(n):
        value = 10 * 36 * 36 + i
        lead, value = 9 - value // 36**3, value % 36**3
        ids.append(f"{lead}{ID_DIGITS[value // 1296]}{ID_DIGITS[value // 36 % 36]}{ID_DIGITS[value % 36]}")
    return ids


def sequence_hash(entry: str) -> str:
    return hashlib.sha256(entry.encode()).hexdigest()[:20]


def touch(path: Path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path, (mtime, mtime))


def fake_upstream_outputs(workdir: Path, ids: list[str]) -> None:
    """Placeholders for everything up to the chains checkpoint, oldest first (mtimes 1 s apart)."""
    t0 = time.time() - 3600
    for entry in ids:
        touch(workdir / f"data/raw/{entry}.json", t0)
        touch(workdir / f"data/parsed/{entry}.json", t0 + 1)
        touch(workdir / f"data/parsed/{entry}.npz", t0 + 1)
        seqhash = sequence_hash(entry)
        touch(workdir / f"data/sequences/{seqhash[:2]}/{seqhash}.fasta", t0 + 2)
    touch(workdir / "data/raw/entries.txt", t0)  # rule entry_list (the chains' input list)
    touch(workdir / "data/raw/manifest.tsv", t0 + 1)
    splits = ["train", "val", "test"]
    table = pd.DataFrame({"entry": ids, "chain": "A", "passed_filters": True,
                          "split": [splits[i % 3] for i in range(len(ids))],
                          "sequence_hash": [sequence_hash(e) for e in ids]})
    table.to_parquet(workdir / "data/chains.parquet")
    os.utime(workdir / "data/chains.parquet", (t0 + 2, t0 + 2))
    for name in ("data/chains.fasta", "data/parsed/failures.tsv"):
        touch(workdir / name, t0 + 2)


def count_submissions(log: str) -> tuple[Counter, Counter, int]:
    """(group jobs per group, jobs per rule, submissions) from a dry-run log.

    A ``Group job <name>`` line opens a group; its jobs follow as indented ``rule`` blocks. An
    unindented ``rule``/``checkpoint`` block is a job of its own; ``Shell command: None`` marks
    one without a command."""
    groups, rules = Counter(), Counter()
    standalone, last_standalone = 0, False
    for line in log.splitlines():
        header = re.search(r"\] Group job (\S+)", line)
        job = re.match(r"^( *)(?:local)?(?:rule|checkpoint) (\w+):$", line)
        if header:
            groups[header.group(1)] += 1
            last_standalone = False
        elif job:
            rules[job.group(2)] += 1
            last_standalone = not job.group(1)
            standalone += last_standalone
        elif line.startswith("Shell command: None") and last_standalone:
            standalone -= 1
            last_standalone = False
    return groups, rules, sum(groups.values()) + standalone


def long_commands(log: str, limit: int = MAX_ARG_STRLEN) -> dict[str, int]:
    """Rule -> length (bytes) of its longest shell command, for commands over ``limit``."""
    found, rule = {}, None
    for line in log.splitlines():
        job = re.match(r"^ *(?:local)?(?:rule|checkpoint) (\w+):$", line)
        if job:
            rule = job.group(1)
        elif line.startswith("Shell command: ") and rule:
            size = len(line.removeprefix("Shell command: ").encode())
            if size > limit:
                found[rule] = max(size, found.get(rule, 0))
    return found


def run_dry(n: int, scenario: str, upstream: bool, scratch: Path) -> dict:
    workdir = scratch / f"{scenario}_{n}"
    workdir.mkdir(parents=True)
    ids = synthetic_ids(n)
    entries = scratch / f"entries_{n}.txt"
    entries.write_text("\n".join(ids) + "\n")
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["pdb"].update(entries=str(entries), shard_chars=2)  # full-PDB keys (the demo config: 1)
    config["msa"]["shard_chars"] = 2
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    if scenario == "after-chains":
        fake_upstream_outputs(workdir, ids)
    bin_dir = Path(sys.executable).parent
    runner = [sys.executable, "-c", UPSTREAM_WRAPPER] if upstream else [str(bin_dir / "snakemake")]
    cmd = [*runner, "--profile", "profiles/slurm", "-n", "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml")]
    env = {**os.environ, **SITE_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "XDG_CACHE_HOME": str(scratch / "cache")}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time and peak RSS
    wall_s = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"dry run N={n} {scenario} failed:\n{log[-4000:]}")
    groups, rules, submissions = count_submissions(log)
    return {"n": n, "scenario": scenario, "upstream": upstream, "wall_s": wall_s,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024, "jobs": job_total(log), "groups": groups,
            "rules": rules, "submissions": submissions, "too_long": long_commands(log)}


def job_total(log: str) -> int:
    match = re.search(r"^total\s+(\d+)", log, flags=re.M)
    return int(match.group(1)) if match else 0


NOTES = """
## What made the grouped dry run slow, and what changed

* **Group snowballing (Snakemake bug).** Snakemake merges each chunk of `group-components`
  components in place into a GroupJob that its factory caches under a one-job key; the DAG is
  postprocessed twice in a dry run (and again after finished jobs in a real run), and the second
  pass merges the merged groups again. Groups of 100 became one group of every entry ("Snakemake's
  own" rows: 1 group job per stage), and the readiness check, group validation and resource
  layering, all quadratic in a group's size, grew with N^2 (N = 10,000 did not finish in 15 min).
  A real run would have executed every fetch of the stage in one Slurm job.
* **Quadratic group validation after the checkpoint.** The cycle checks walked the whole upstream
  DAG (chains -> every parse -> every fetch) from every job of a group, once per member: at N = 250
  this took 46 s of CPU against 5 s; at 10,000 it would take hours.
* **Per-job chain-table reads.** `features_inputs` re-read data/chains.parquet and scanned it for
  every features job (O(N^2)); the table and a (entry, chain) -> hash index are now read once
  per file version.

workflow/rules/common.smk replaces Snakemake's `_update_group_components`, `_check_groups` and
`validate_group` (stable chunks of at most N components, one needrun-only walk per group), and
profiles/slurm sets `disk_mb` to a constant (Snakemake's default stats every input per job).
What remains is Snakemake's own per-job cost (job objects, params/resources evaluation, printing),
roughly linear in the number of jobs.
"""


def markdown(results: list[dict]) -> str:
    lines = [
        "# Dry run at scale: `snakemake --profile profiles/slurm -n`",
        "",
        f"Command: `.venv/bin/python bench/bench_dryrun.py {' '.join(sys.argv[1:])}`; "
        f"machine: {os.cpu_count()} cores, load average at the end "
        f"{os.getloadavg()[0]:.1f}; Snakemake {snakemake_version()}.",
        "CPU s is the dry run's own CPU time (less sensitive to other load than wall time).",
        "A submission is one sbatch call: a group job, or a job outside any group (`rule all`,",
        "which has no command, runs inside Snakemake). The last column lists shell commands longer",
        "than one Linux argument may be (128 KiB): such a job fails with \"Argument list too long\".",
        "",
        "| scenario | N entries | group handling | wall s | CPU s | peak RSS MB | jobs | submissions | group jobs | commands > 128 KiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mode = "Snakemake's own" if r["upstream"] else "common.smk (bounded)"
        sizes = ", ".join(f"{name}: {count}" for name, count in sorted(r["groups"].items()))
        too_long = ", ".join(f"{rule} ({size / 1024:.0f} KiB)" for rule, size in sorted(r["too_long"].items()))
        lines.append(f"| {r['scenario']} | {r['n']} | {mode} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['rss_mb']:.0f} | {r['jobs']} | {r['submissions']} | {sizes or '-'} | {too_long or '-'} |")
    return "\n".join(lines) + "\n" + NOTES


def snakemake_version() -> str:
    from importlib.metadata import version

    return version("snakemake")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 10000])
    parser.add_argument("--scenarios", nargs="+", default=["fresh", "after-chains"],
                        choices=["fresh", "after-chains"])
    parser.add_argument("--upstream-groups", action="store_true",
                        help="also run Snakemake's own group handling (fresh, N <= 2000)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "dryrun.md")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="foldworks-dryrun-") as tmp:
        for scenario in args.scenarios:
            for n in args.sizes:
                upstream_too = args.upstream_groups and scenario == "fresh" and n <= 2000
                for upstream in [False, True] if upstream_too else [False]:
                    label = f"{scenario} {n} upstream={upstream}"
                    result = run_dry(n, scenario, upstream, Path(tmp) / label.replace(" ", "_"))
                    results.append(result)
                    print(f"{label}: {result['wall_s']:.1f} s wall, {result['cpu_s']:.1f} s CPU, "
                          f"{result['jobs']} jobs, {result['submissions']} submissions, "
                          f"groups {dict(result['groups'])}, too long {result['too_long']}", flush=True)
    args.out.write_text(markdown(results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
