"""DVC at scale: one ``.dvc`` file per data directory vs one per entry shard (``<dir>/<xy>/``).

Usage: nice -n 10 .venv/bin/python bench/bench_dvc_scale.py [--files 100000] [--layouts dir shards]
       [--workdir /tmp] [--out bench/dvc_scale.md]

Builds a throw-away git + DVC repository with ``--files`` small files (~200 bytes, distinct
contents) laid out as ``data/parsed/<xy>/<id>.json`` (``xy`` = the middle two characters of a
synthetic PDB ID: up to 36^2 = 1,296 shards, the wwPDB divided layout), then times, per layout:

* ``add``: ``dvc add data/parsed`` (layout ``dir``: one ``.dvc`` file, a ``.dir`` manifest of
  every file) or ``dvc add data/parsed/<xy>`` for every shard (layout ``shards``: one ``.dvc``
  file per shard);
* ``status``: ``dvc status`` with nothing changed;
* ``status-touch``: ``dvc status`` after touching one file (new mtime, same bytes);
* ``push``: ``dvc push`` to a local remote (a directory), everything;
* ``pull``: ``git clone`` + ``dvc pull`` in the clone (fresh cache);
* ``status-clone``: ``dvc status`` in the clone right after the pull;
* ``modify-add``, ``modify-push``: change one file's bytes, ``dvc add`` again (the one affected
  target), ``dvc push`` (incremental upload).

``--quick`` skips every step that needs the remote (push, pull, status-clone, modify-push).

Wall seconds and peak RSS (MB, the DVC process tree) per step; writes a Markdown table. DVC runs
with one job (``-j 1`` where it has the option) on the 2-core machine; ``nice`` it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DVC = [sys.executable, "-m", "dvc"]
ALPHABET = string.digits + string.ascii_lowercase


def synthetic_ids(count: int) -> list[str]:
    """``count`` distinct PDB-style IDs spread evenly over the 1,296 middle-character shards."""
    ids: list[str] = []
    shards = [a + b for a in ALPHABET for b in ALPHABET]
    per_shard = -(-count // len(shards))
    for index in range(count):
        shard = shards[index % len(shards)]
        serial = index // len(shards)
        first, last = 1 + serial // len(ALPHABET), ALPHABET[serial % len(ALPHABET)]
        if first > 9:
            raise ValueError(f"{count} files need more than {9 * 36} IDs per shard ({per_shard})")
        ids.append(f"{first}{shard}{last}")
    return ids


def make_tree(root: Path, ids: list[str]) -> None:
    """``root/<xy>/<id>.json``, ~200 bytes each, distinct contents."""
    for entry in ids:
        directory = root / entry[1:3]
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{entry}.json").write_text(
            f'{{"entry": "{entry}", "status": "ok", "n_chains": {len(entry)}, "pad": "{entry * 40}"}}\n')


def peak_rss_mb(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """Run ``cmd``; ``(wall seconds, peak RSS MB, output)``; raises on failure. ``os.wait4``
    reports this child's own peak RSS (the largest of it and the children it waited for)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-3000:]}")
    return wall, usage.ru_maxrss / 1024, output


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def init_repo(repo: Path, remote: Path) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "bench@example.invalid")
    git(repo, "config", "user.name", "bench")
    subprocess.run([*DVC, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*DVC, "remote", "add", "-d", "local", str(remote)], cwd=repo, check=True)
    subprocess.run([*DVC, "config", "core.analytics", "false"], cwd=repo, check=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")


def targets(repo: Path, layout: str) -> list[str]:
    if layout == "dir":
        return ["data/parsed"]
    return sorted(f"data/parsed/{d.name}" for d in (repo / "data/parsed").iterdir() if d.is_dir())


def dvc_files(repo: Path, layout: str) -> list[str]:
    return [f"{t}.dvc" for t in targets(repo, layout)]


def run_layout(layout: str, ids: list[str], base: Path, quick: bool = False) -> dict[str, tuple[float, float]]:
    """Every step for one layout (``quick``: only add, status and the one-file change, no
    remote); ``{step: (seconds, peak RSS MB)}``."""
    repo, remote, clone = base / f"{layout}-repo", base / f"{layout}-remote", base / f"{layout}-clone"
    init_repo(repo, remote)
    make_tree(repo / "data/parsed", ids)
    out: dict[str, tuple[float, float]] = {}
    out["add"] = peak_rss_mb([*DVC, "add", "-q", *targets(repo, layout)], repo)[:2]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "track data")
    out["status"] = peak_rss_mb([*DVC, "status", "-q"], repo)[:2]
    victim = repo / "data/parsed" / ids[len(ids) // 2][1:3] / f"{ids[len(ids) // 2]}.json"
    os.utime(victim)
    out["status-touch"] = peak_rss_mb([*DVC, "status", "-q"], repo)[:2]
    if not quick:
        out["push"] = peak_rss_mb([*DVC, "push", "-q", "-j", "1"], repo)[:2]
        start = time.perf_counter()
        git(base, "clone", "-q", str(repo), str(clone))
        clone_s = time.perf_counter() - start
        pull = peak_rss_mb([*DVC, "pull", "-q", "-j", "1"], clone)
        out["pull"] = (pull[0] + clone_s, pull[1])
        out["status-clone"] = peak_rss_mb([*DVC, "status", "-q"], clone)[:2]
    victim.write_text(victim.read_text() + "changed\n")
    affected = ["data/parsed"] if layout == "dir" else [f"data/parsed/{victim.parent.name}"]
    out["modify-add"] = peak_rss_mb([*DVC, "add", "-q", *affected], repo)[:2]
    if not quick:
        out["modify-push"] = peak_rss_mb([*DVC, "push", "-q", "-j", "1"], repo)[:2]
    out["dvc-files"] = (float(len(dvc_files(repo, layout))), 0.0)
    for path in (repo, remote, clone):
        shutil.rmtree(path, ignore_errors=True)
    return out


STEPS = ("add", "status", "status-touch", "push", "pull", "status-clone", "modify-add", "modify-push")


def table(files: int, results: dict[str, dict[str, tuple[float, float]]]) -> str:
    layouts = list(results)
    lines = [f"### {files:,} files (~200 B each, {len(set(i[1:3] for i in synthetic_ids(files)))} shards)", "",
             "| step | " + " | ".join(f"{lay}: s | {lay}: MB" for lay in layouts) + " |",
             "|---|" + "---:|---:|" * len(layouts)]
    for step in STEPS:
        cells = " | ".join(f"{results[lay][step][0]:.1f} | {results[lay][step][1]:.0f}" if step in results[lay]
                           else "— | —" for lay in layouts)
        lines.append(f"| {step} | {cells} |")
    lines.append("| .dvc files | " + " | ".join(f"{int(results[lay]['dvc-files'][0])} | " for lay in layouts) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[100_000])
    parser.add_argument("--layouts", nargs="+", default=["dir", "shards"], choices=["dir", "shards"])
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--quick", action="store_true", help="skip push/pull (no remote): add, status, one change")
    parser.add_argument("--out", default=str(REPO / "bench/dvc_scale.md"))
    args = parser.parse_args(argv)
    sections = [f"# DVC at scale (bench/bench_dvc_scale.py, dvc {subprocess.run([*DVC, '--version'], capture_output=True, text=True).stdout.strip()})\n"]
    for files in args.files:
        ids = synthetic_ids(files)
        results: dict[str, dict[str, tuple[float, float]]] = {}
        for layout in args.layouts:
            with tempfile.TemporaryDirectory(dir=args.workdir, prefix="dvcbench-") as tmp:
                results[layout] = run_layout(layout, ids, Path(tmp), args.quick)
            print(layout, files, results[layout], flush=True)
        sections.append(table(files, results))
        Path(args.out).write_text("\n".join(sections))
    print(Path(args.out).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
