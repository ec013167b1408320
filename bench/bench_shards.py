"""The sharded DAG at full-PDB scale: `snakemake --profile profiles/slurm -n` on N synthetic
entries. Writes bench/shards.md (figures copied to BENCHMARKS.md).

Usage: nice -n 10 .venv/bin/python bench/bench_shards.py [--sizes 10000 50000 230000]

Nothing is computed: the entries are synthetic PDB-style IDs (bench_dryrun.synthetic_ids), the
source is a local "mirror" of empty placeholder files in the wwPDB divided layout
(``<xy>/<id>.cif.gz``; the ingest rule stats each one, as it would a real mirror), and the chain
table is synthetic: 3 passed chains per entry drawn from ``N * 120/230`` unique sequences (~690k
chains and 120k sequences at 230,000, as in today's PDB). Scenarios per N, in one directory:

* ``fresh``: nothing exists; the DAG ends at the ``chains`` checkpoint.
* ``after-chains``: fetch/parse manifests and the chains outputs exist (placeholders + the
  synthetic table): the DAG holds the msa and features shards and everything after them.
* ``no-op``: every output of the after-chains plan exists (touched in pipeline order): the
  check a user runs after each update. Must print "Nothing to be done". The first such call
  after `chains` ran builds foldworks.dagindex's cache (.snakemake/foldworks/); ``no-op again``
  is the same call once more, loading it.
* ``one-entry``: one mirror file changed (new mtime): its ingest (fetch + parse) shard + downstream.
* ``add-entry``: one new ID appended to pdb.entries (an incremental update).

Per scenario: wall and CPU seconds and peak RSS of the Snakemake process (os.wait4), jobs per
rule, and sbatch submissions (jobs outside `localrule`s: no groups any more).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dryrun import ID_DIGITS, SITE_ENV, long_commands, snakemake_version  # noqa: E402
from foldworks.shards import entry_key  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^(local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)+)", re.MULTILINE)
#: Pipeline order, for the mtimes of placeholder outputs (upstream older).
RANK = ["entry_list", "ingest", "fetch_manifest", "chains", "msa_db", "msa_db_external", "msa",
        "msa_index", "msa_summary", "features", "failures_report", "train", "predict", "evaluate", "evaluate_baseline",
        "report"]


def workflow_local_rules(rules_dir: Path = REPO / "workflow" / "rules") -> set[str]:
    """Rules declared `localrule: True` in workflow/rules/*.smk, plus `all` (no command): never
    submitted. Read from the workflow because a dry run prints them as plain rules."""
    local, current = {"all"}, None
    for path in sorted(rules_dir.glob("*.smk")):
        for line in path.read_text().splitlines():
            if (match := re.match(r"(?:rule|checkpoint) (\w+):", line)):
                current = match.group(1)
            elif line.strip().startswith("localrule: True") and current:
                local.add(current)
    return local


LOCAL_RULES = workflow_local_rules()


def synthetic_ids(n: int) -> list[str]:
    """``n`` distinct valid PDB-style IDs spread evenly over the 1,296 divided-layout keys (as a
    real subset of the PDB is): ID ``i`` has key ``i % 1296``, first digit and last character
    from ``i // 1296`` (9 x 36 IDs per key: up to 419,904)."""
    ids = []
    for i in range(n):
        key, rest = i % 1296, i // 1296
        ids.append(f"{1 + rest // 36}{ID_DIGITS[key // 36]}{ID_DIGITS[key % 36]}{ID_DIGITS[rest % 36]}")
    return ids


def touch(path: Path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path, (mtime, mtime))


def make_mirror(mirror: Path, ids: list[str], mtime: float) -> None:
    for entry in ids:
        touch(mirror / entry[1:3] / f"{entry}.cif.gz", mtime)


def synthetic_table(ids: list[str]) -> pd.DataFrame:
    """3 passed chains per entry over ``len(ids) * 120/230`` unique sequence hashes."""
    n_seq = max(1, len(ids) * 120 // 230)
    hashes = [hashlib.sha256(str(i).encode()).hexdigest()[:20] for i in range(n_seq)]
    rows = {"entry": [], "chain": [], "sequence_hash": [], "split": []}
    splits = ["train", "val", "test"]
    for i, entry in enumerate(ids):
        for j, chain in enumerate("ABC"):
            rows["entry"].append(entry)
            rows["chain"].append(chain)
            rows["sequence_hash"].append(hashes[(3 * i + j) % n_seq])
            rows["split"].append(splits[i % 3])
    table = pd.DataFrame(rows)
    table["passed_filters"] = True
    return table


def fake_upstream(workdir: Path, ids: list[str], t0: float, entry_chars: int = 2) -> None:
    """Placeholders up to the chains checkpoint, oldest first (entry shard keys of
    ``entry_chars`` characters, the config's ``pdb.shard_chars``)."""
    touch(workdir / "data/raw/entries.txt", t0)
    for key in sorted({entry_key(e, entry_chars) for e in ids}):
        touch(workdir / f"data/raw/shards/{key}.tsv", t0 + 1)
        touch(workdir / f"data/parsed/shards/{key}.tsv", t0 + 2)
    synthetic_table(ids).to_parquet(workdir / "data/chains.parquet")
    for name in ("data/chains.parquet", "data/chains.fasta", "data/parsed/failures.tsv"):
        touch(workdir / name, t0 + 3)


def outputs_by_rule(log: str) -> list[tuple[str, list[str]]]:
    found = []
    for _, rule, body in _BLOCK.findall(log):
        match = re.search(r"^    output: (.*)$", body, re.MULTILINE)
        if match:
            found.append((rule, [p.strip() for p in match.group(1).split(",")]))
    return found


def touch_plan(workdir: Path, log: str, t0: float) -> int:
    """Create every output of a dry run's plan, mtimes in pipeline order (directories for
    the predictions' directory outputs)."""
    count = 0
    for rule, paths in outputs_by_rule(log):
        mtime = t0 + 10 + (RANK.index(rule) if rule in RANK else len(RANK))
        for path in paths:
            target = workdir / path
            if rule == "predict":
                target.mkdir(parents=True, exist_ok=True)
                os.utime(target, (mtime, mtime))
            elif not target.exists() or rule not in ("chains",):
                touch(target, mtime)
            count += 1
    return count


def fill_msa_index(workdir: Path) -> int:
    """Give the touched (empty) data/msa/index.tsv one `ok` row per unique sequence of the chain
    table, as checkpoint msa_index writes it (the features shards' `msa` params read it at DAG
    time), keeping its mtime; returns the row count."""
    from foldworks.shards import Row, manifest_text

    index = workdir / "data/msa/index.tsv"
    stat = index.stat()
    hashes = sorted(set(pd.read_parquet(workdir / "data/chains.parquet")["sequence_hash"]))
    rows = [Row(h, "ok", hashlib.sha256(h.encode()).hexdigest(), "0" * 16,
                hashlib.sha256(h[::-1].encode()).hexdigest()) for h in hashes]
    index.write_text(manifest_text(rows))
    os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return len(rows)


def dry_run(workdir: Path, scratch: Path, scenario: str, n: int) -> dict:
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "snakemake"), "--profile", "profiles/slurm", "-n", "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml")]
    env = {**os.environ, **SITE_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "XDG_CACHE_HOME": str(scratch / "cache")}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"dry run {scenario} N={n} failed:\n{log[-4000:]}")
    rules = Counter(rule for _, rule, _ in _BLOCK.findall(log))
    return {"n": n, "scenario": scenario, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024, "rules": rules, "jobs": sum(rules.values()),
            "submissions": sum(c for rule, c in rules.items() if rule not in LOCAL_RULES), "log": log,
            "nothing": "Nothing to be done" in log, "too_long": long_commands(log)}


def run_size(n: int, scratch: Path) -> list[dict]:
    workdir, mirror = scratch / f"w{n}", scratch / f"mirror{n}"
    workdir.mkdir(parents=True)
    ids = synthetic_ids(n)
    t0 = time.time() - 7200
    make_mirror(mirror, ids, t0)
    entries = scratch / f"entries_{n}.txt"
    entries.write_text("\n".join(ids) + "\n")
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["pdb"].update(entries=str(entries), source=str(mirror), shard_chars=2)  # full-PDB keys
    config["msa"]["shard_chars"] = 2
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    results = [dry_run(workdir, scratch, "fresh", n)]
    fake_upstream(workdir, ids, t0)
    after = dry_run(workdir, scratch, "after-chains", n)
    results.append(after)
    results.append(record_fetch_metadata(workdir, ids, n))
    base = time.time() + 1  # everything downstream of the fetch shards: newer than them
    for key in sorted({e[1:3] for e in ids}):
        touch(workdir / f"data/parsed/shards/{key}.tsv", base)
    for name in ("data/chains.parquet", "data/chains.fasta", "data/parsed/failures.tsv"):
        touch(workdir / name, base + 1)
    touch_plan(workdir, after["log"], base - 8)
    fill_msa_index(workdir)
    time.sleep(max(0.0, base + len(RANK) + 12 - time.time()))  # no output mtime in the future
    results.append(dry_run(workdir, scratch, "no-op", n))  # first call after `chains`: builds the DAG cache
    results.append(dry_run(workdir, scratch, "no-op again", n))  # the weekly check: cache loaded
    changed = mirror / ids[n // 2][1:3] / f"{ids[n // 2]}.cif.gz"
    os.utime(changed, None)
    results.append(dry_run(workdir, scratch, "one-entry", n))
    os.utime(changed, (t0, t0))
    new_id = synthetic_ids(n + 1)[-1]
    touch(mirror / new_id[1:3] / f"{new_id}.cif.gz", t0)
    entries.write_text("\n".join(ids + [new_id]) + "\n")
    results.append(dry_run(workdir, scratch, "add-entry", n))
    return results


def record_fetch_metadata(workdir: Path, ids: list[str], n: int) -> dict:
    """`snakemake --touch` of the entry list and every ingest (fetch + parse) shard: Snakemake's metadata (params, code) for them,
    as after a real run, so that a changed mirror file's params change is seen. Setup, timed
    (~0.2 s per job here, so only the ingest shards: downstream outputs are placeholders)."""
    bin_dir = Path(sys.executable).parent
    targets = ["data/raw/entries.txt"] + [f"data/raw/shards/{key}.tsv" for key in sorted({e[1:3] for e in ids})]
    start = time.monotonic()
    done = subprocess.run([str(bin_dir / "snakemake"), "--touch", "--forcerun", "ingest", "entry_list", "--cores", "1", "--quiet",
                           "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"), "--", *targets],
                          cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"--touch N={n} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return {"n": n, "scenario": "setup: `--touch` of entry_list + ingest shards (local)", "wall_s": time.monotonic() - start,
            "cpu_s": float("nan"), "rss_mb": float("nan"), "rules": Counter(), "jobs": 0, "submissions": 0,
            "log": "", "nothing": False, "too_long": {}}


def row(r: dict) -> str:
    per_rule = ", ".join(f"{rule} {count}" for rule, count in sorted(r["rules"].items(), key=lambda kv: RANK.index(kv[0])
                                                                       if kv[0] in RANK else 99))
    note = "Nothing to be done" if r["nothing"] else per_rule
    return (f"| {r['scenario']} | {r['n']:,} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['rss_mb']:.0f} | "
            f"{r['jobs']} | {r['submissions']} | {note} |")


def markdown(results: list[dict]) -> str:
    lines = [
        "# Sharded DAG at scale: `snakemake --profile profiles/slurm -n`",
        "",
        f"Command: `bench/bench_shards.py {' '.join(sys.argv[1:])}` (niceness {os.nice(0)}); machine: "
        f"{os.cpu_count()} cores, load average at the end {os.getloadavg()[0]:.1f}; "
        f"Snakemake {snakemake_version()}. Scenarios: see the module docstring. Submissions = jobs outside "
        "`localrule`s (no groups: one shard job is one sbatch call).",
        "",
        "| scenario | N entries | wall s | CPU s | peak RSS MB | jobs | submissions | jobs per rule |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [row(r) for r in results]
    too_long = {k: v for r in results for k, v in r["too_long"].items()}
    lines += ["", f"Shell commands over 128 KiB: {too_long or 'none'}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 50000, 230000])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "shards.md")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="foldworks-shards-") as tmp:
        for n in args.sizes:
            for r in run_size(n, Path(tmp)):
                results.append(r)
                print(row(r), flush=True)
            args.out.write_text(markdown(results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
