"""Where the sharded DAG's no-op `snakemake -n` spends its time (issue 16, task 16c).

Usage:
  nice -n 10 .venv/bin/python bench/bench_noop.py setup N DIR     # build the no-op state once (minutes)
  nice -n 10 .venv/bin/python bench/bench_noop.py run N DIR LABEL [--profile OUT.prof]

``setup`` builds the no-op state of bench/bench_shards.py in ``DIR`` (synthetic IDs, placeholder
divided mirror, synthetic chain table, every output of the after-chains plan touched in pipeline
order, data/msa/index.tsv with one row per sequence) but skips its `snakemake --touch` step (210-308 s per size): no job has Snakemake
metadata, so the params/code triggers read nothing and the plan is Nothing to be done while the
code changes. The state stays, so ``run`` can time the same no-op before and after a workflow
edit (``git stash``), which bench_shards.py cannot (it rebuilds everything per call). ``run``
prints wall and CPU seconds and peak RSS of the Snakemake process (os.wait4), optionally under
cProfile (``python -m cProfile``: 2-15x slower, use it for the shape, not the times).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_shards as shards  # noqa: E402
from bench_dryrun import SITE_ENV  # noqa: E402


def setup(n: int, scratch: Path) -> None:
    """The no-op state for ``n`` entries in ``scratch`` (``w<n>/``, ``mirror<n>/``)."""
    workdir, mirror = scratch / f"w{n}", scratch / f"mirror{n}"
    workdir.mkdir(parents=True)
    ids = shards.synthetic_ids(n)
    t0 = time.time() - 7200
    shards.make_mirror(mirror, ids, t0)
    entries = scratch / f"entries_{n}.txt"
    entries.write_text("\n".join(ids) + "\n")
    config = yaml.safe_load((shards.REPO / "config/config.yaml").read_text())
    config["pdb"].update(entries=str(entries), source=str(mirror), shard_chars=2)  # full-PDB keys
    config["msa"]["shard_chars"] = 2
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    shards.fake_upstream(workdir, ids, t0)
    after = shards.dry_run(workdir, scratch, "after-chains", n)
    print(f"after-chains N={n}: wall {after['wall_s']:.1f} s, CPU {after['cpu_s']:.1f} s, "
          f"{after['rss_mb']:.0f} MB, {after['jobs']} jobs", flush=True)
    base = time.time() + 1
    for key in sorted({e[1:3] for e in ids}):
        shards.touch(workdir / f"data/parsed/shards/{key}.tsv", base)
    for name in ("data/chains.parquet", "data/chains.fasta", "data/parsed/failures.tsv"):
        shards.touch(workdir / name, base + 1)
    shards.touch_plan(workdir, after["log"], base - 8)
    shards.fill_msa_index(workdir)  # the features shards' `msa` params read it (a real index's rows)
    time.sleep(max(0.0, base + len(shards.RANK) + 12 - time.time()))  # no output mtime in the future


def run(n: int, scratch: Path, label: str, profile: Path | None) -> None:
    workdir = scratch / f"w{n}"
    bin_dir = Path(sys.executable).parent
    prefix = [sys.executable, "-m", "cProfile", "-o", str(profile)] if profile else []
    cmd = [*prefix, str(bin_dir / "snakemake"), "--profile", "profiles/slurm", "-n", "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml")]
    env = {**os.environ, **SITE_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "XDG_CACHE_HOME": str(scratch / "cache")}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=shards.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"snakemake -n failed:\n{log[-3000:]}")
    print(f"{label} N={n}: wall {time.monotonic() - start:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} s, "
          f"peak RSS {usage.ru_maxrss / 1024:.0f} MB, nothing to be done: {'Nothing to be done' in log}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["setup", "run"])
    parser.add_argument("n", type=int)
    parser.add_argument("dir", type=Path)
    parser.add_argument("label", nargs="?", default="no-op")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile output file (run)")
    args = parser.parse_args()
    if args.command == "setup":
        setup(args.n, args.dir)
    else:
        run(args.n, args.dir, args.label, args.profile)


if __name__ == "__main__":
    main()
