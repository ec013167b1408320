"""Provenance helpers: content hashes of code and config slices, tool and package versions.

Snakemake tracks ``script:`` files by mtime and imported package code not at all. Rules pass
:func:`code_hash` of the sub-packages they run in ``params:``, so editing
``src/foldworks/<stage>/`` reruns exactly the rules that use that code.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parent
#: Modules every stage imports.
SHARED_MODULES: tuple[str, ...] = ("__init__.py", "constants.py", "ids.py", "fsutil.py", "logutil.py")


@lru_cache(maxsize=None)
def code_hash(*parts: str, root: str | Path | None = None) -> str:
    """SHA-256 (16 hex chars) over the source of the named sub-packages/modules plus shared modules.

    ``code_hash("parse")`` covers ``src/foldworks/parse/**/*.py`` and :data:`SHARED_MODULES`;
    ``root`` is another checkout's ``src/foldworks`` (default: this package's directory).
    """
    base = Path(root) if root is not None else PACKAGE_ROOT
    digest = hashlib.sha256()
    files: list[Path] = [base / name for name in SHARED_MODULES]
    for part in parts:
        target = base / part
        files.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")])
    for path in files:
        digest.update(str(path.relative_to(base)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def config_hash(config_slice: Any) -> str:
    """SHA-256 (16 hex chars) of a config slice's canonical JSON."""
    canonical = json.dumps(config_slice, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


#: Python packages whose versions go into every provenance record.
TRACKED_PACKAGES: tuple[str, ...] = ("torch", "lightning", "numpy", "gemmi", "pandas", "snakemake")


def git_sha(repo_dir: str | Path | None = None) -> str:
    """The checked-out commit (40 hex), ``"<sha>-dirty"`` with uncommitted changes, or ``"unknown"``."""
    cwd = Path(repo_dir) if repo_dir else PACKAGE_ROOT
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (``"absent"`` for a package that is not installed)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 (64 hex) of a file's bytes, read in ``chunk``-byte blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def input_manifest_hash(paths: list[str | Path]) -> str:
    """SHA-256 (16 hex) over the sorted ``(path, content sha256)`` pairs of the inputs."""
    digest = hashlib.sha256()
    for path in sorted(str(p) for p in paths):
        digest.update(f"{path}\t{file_sha256(path)}\n".encode())
    return digest.hexdigest()[:16]


def provenance_record(stage: str, config_slice: Any, code_parts: tuple[str, ...],
                      inputs: list[str | Path] = (), tools: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything needed to tell whether an artifact still matches the checked-out code and config.

    ``config_hash`` and ``code_hash`` are the same values the rules pass in ``params:``;
    ``git_sha`` is informational (a new commit need not change the artifact).
    """
    return {
        "stage": stage,
        "git_sha": git_sha(),
        "config_hash": config_hash(config_slice),
        "code_hash": code_hash(*code_parts),
        "code_parts": list(code_parts),
        "packages": package_versions(),
        "tools": dict(tools or {}),
        "input_manifest_hash": input_manifest_hash(list(inputs)),
    }


#: A metrics table ``x.tsv`` carries its provenance in ``x.provenance.json`` beside it.
SIDECAR_SUFFIX = ".provenance.json"


def sidecar_path(path: str | Path) -> Path:
    """``results/metrics/x.tsv`` -> ``results/metrics/x.provenance.json``."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(path.suffix) + SIDECAR_SUFFIX)


def write_sidecars(outputs: list[str | Path], record: dict[str, Any]) -> list[Path]:
    """Write ``record`` (see :func:`provenance_record`) beside each output file, atomically."""
    from foldworks.fsutil import write_json_atomic  # numpy; not needed by the Snakefile's imports

    written = []
    for output in outputs:
        written.append(sidecar_path(output))
        write_json_atomic(written[-1], record)
    return written
