"""The artifact groups DVC versions, and ``dvc add`` / ``push`` / ``pull`` around them.

One ``.dvc`` file per group, next to it (``data/raw`` -> ``data/raw.dvc``); the repository's
``.gitignore`` ignores ``/data/?*`` and ``/results/?*`` but not ``*.dvc`` there. The groups are
every declared Snakemake output (plus the undeclared query FASTAs the ``chains`` checkpoint
writes), so a clone that pulls them has the whole DAG and ``snakemake -n`` has nothing to do.

Why one ``.dvc`` file per directory, not per entry shard (``data/parsed/<xy>/``, ~1,300): DVC
reads every ``.dvc`` file of the repository for every command, even one aimed at a single
target, so per-shard files add a fixed ~20 ms x 1,300 to each ``add``/``status``/``push``/``pull``
while the per-file work (stat, hash on change, copy) is the same either way. bench/dvc_scale.md
measures both: per-shard tracking was 6-30x slower at 2,000 files; at 100,000 files 2.9x slower
to add, 2.2x for a no-op status and ~9x for push (it only wins re-adding one changed shard).

Resume checkpoints (``results/checkpoints/*/resume/``) are excluded by ``.dvcignore``.
``dvc add`` re-links files it caches (fresh mtimes), which would make Snakemake see outputs
newer than their consumers: :func:`add` puts every mtime back afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: (path relative to the repository root, what it holds), in workflow order.
ARTIFACT_GROUPS: tuple[tuple[str, str], ...] = (
    ("data/raw", "raw entries, fetch records, manifest.tsv"),
    ("data/failures", "failure records per stage and item"),
    ("data/parsed", "parsed structures, failures.tsv"),
    ("data/chains.parquet", "chain table, clusters, splits"),
    ("data/chains.fasta", "sequences of the kept chains"),
    ("data/sequences", "hhblits query FASTA per sequence hash"),
    ("data/msa_db", "the built HH-suite database"),
    ("data/msa", "MSAs per sequence hash"),
    ("data/features", "feature file per chain"),
    ("data/templates", "template database, hits per sequence hash, selected.tsv, template features"),
    ("results/checkpoints", "checkpoints (with provenance), training curves"),
    ("results/predictions", "predicted structures"),
    ("results/metrics", "metrics tables with provenance sidecars"),
    ("results/summary.tsv", "summary table"),
    ("results/design_summary.tsv", "design summary table (design families)"),
    ("results/plots", "report plots"),
    ("results/failures.tsv", "failures report"),
)


class DvcError(RuntimeError):
    """A DVC command failed; the message carries its output."""


def dvc_file(group: str) -> str:
    """``data/raw`` -> ``data/raw.dvc``."""
    return f"{group}.dvc"


def present_groups(repo: Path) -> list[str]:
    """The groups that exist in the working tree (e.g. no ``data/msa_db`` with ``msa.database``)."""
    return [group for group, _ in ARTIFACT_GROUPS if (repo / group).exists()]


def tracked_groups(repo: Path) -> list[str]:
    """The groups whose ``.dvc`` file exists in this checkout."""
    return [group for group, _ in ARTIFACT_GROUPS if (repo / dvc_file(group)).exists()]


def run_dvc(repo: Path, args: list[str]) -> str:
    """``python -m dvc ARGS`` in ``repo``; returns stdout+stderr; raises :class:`DvcError` on failure."""
    result = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise DvcError(f"dvc {' '.join(args)} failed (exit {result.returncode}):\n{output[-4000:]}")
    return output


def snapshot_times(repo: Path, groups: list[str]) -> dict[Path, tuple[int, int]]:
    """``{path: (atime_ns, mtime_ns)}`` of every file and directory in ``groups`` (not following links)."""
    times: dict[Path, tuple[int, int]] = {}
    for group in groups:
        root = repo / group
        paths = [root]
        if root.is_dir():
            for directory, dirs, files in os.walk(root):
                paths.extend(Path(directory) / name for name in dirs + files)
        for path in paths:
            stat = path.lstat()
            times[path] = (stat.st_atime_ns, stat.st_mtime_ns)
    return times


def restore_times(times: dict[Path, tuple[int, int]]) -> int:
    """Put back the mtimes of :func:`snapshot_times` (files first, then directories deepest first);
    returns how many paths had changed."""
    changed = 0
    ordered = sorted(times, key=lambda p: (p.is_dir(), -len(p.parts)))
    for path in ordered:
        if path.exists() and path.lstat().st_mtime_ns != times[path][1]:
            os.utime(path, ns=times[path], follow_symlinks=False)
            changed += 1
    return changed


def add(repo: Path, groups: list[str]) -> int:
    """``dvc add`` the groups (one ``.dvc`` file each), keeping every mtime; returns mtimes restored."""
    times = snapshot_times(repo, groups)
    try:
        run_dvc(repo, ["add", "--quiet", *groups])
    finally:
        restored = restore_times(times)
    return restored


def push(repo: Path, groups: list[str], remote: str | None = None) -> str:
    """``dvc push`` the groups' ``.dvc`` files to ``remote`` (default: the config's default remote)."""
    return run_dvc(repo, ["push", *(["-r", remote] if remote else []), *map(dvc_file, groups)])


def pull(repo: Path, remote: str | None = None) -> list[str]:
    """``dvc pull`` every group this checkout has a ``.dvc`` file for; returns those groups."""
    groups = tracked_groups(repo)
    if not groups:
        raise DvcError("no artifact .dvc files (data/raw.dvc, results/metrics.dvc, ...) in this checkout: "
                       "nothing to pull. Were the files `make push` listed committed?")
    run_dvc(repo, ["pull", *(["-r", remote] if remote else []), *map(dvc_file, groups)])
    return groups


def remote_url(repo: Path, remote: str | None = None) -> str:
    """``name (url)`` of ``remote`` or of the default remote, for messages."""
    name = remote or run_dvc(repo, ["remote", "default"]).strip()
    for line in run_dvc(repo, ["remote", "list"]).splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == name:
            return f"{name} ({fields[1]})"
    return name


def uncommitted(repo: Path, paths: list[str]) -> list[str]:
    """Those of ``paths`` (files or directories) that git shows as new or modified."""
    result = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *paths],
                            cwd=repo, capture_output=True, text=True, check=True)
    return sorted({line[3:].strip().strip('"') for line in result.stdout.splitlines() if line.strip()})


def files_to_commit(repo: Path, groups: list[str]) -> list[str]:
    """The ``.dvc`` files (and any ``.gitignore`` or DVC config DVC changed) a commit must include."""
    candidates = [dvc_file(g) for g in groups] + [".gitignore", "data/.gitignore", "results/.gitignore",
                                                  ".dvc/config", ".dvcignore"]
    return uncommitted(repo, [path for path in candidates if (repo / path).exists()])
