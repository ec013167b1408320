"""Provenance helpers: content hashes of code and config slices, tool and package versions.

Snakemake tracks ``script:`` files by mtime and imported package code not at all. Rules pass
:func:`code_hash` of the sub-packages they run in ``params:``, so editing
``src/foldworks/<stage>/`` reruns exactly the rules that use that code. Only code counts
(:func:`code_text`): editing a comment, a docstring or blank lines reruns nothing.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import subprocess
import tempfile
import tokenize
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parent
#: Modules every stage imports.
SHARED_MODULES: tuple[str, ...] = ("__init__.py", "constants.py", "ids.py", "fsutil.py", "logutil.py")


def _docstring_starts(tree: ast.AST) -> set[tuple[int, int]]:
    """(line, column) of every module, class and function docstring in ``tree``."""
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                starts.add((first.lineno, first.col_offset))
    return starts


def code_text(source: bytes) -> bytes:
    """What of a Python source is code: the source with comments and docstrings blanked out, trailing
    spaces and blank lines dropped. Everything else (indentation, every other string) stays, and the
    result does not depend on the Python version (only comment and docstring spans are cut, which every
    version's tokenizer finds alike). Source that does not tokenize is returned unchanged."""
    try:
        docstrings = _docstring_starts(ast.parse(source))
        text = source.decode("utf-8")
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, UnicodeDecodeError, ValueError):
        return source
    lines = [line.rstrip("\r\n") for line in io.StringIO(text).readlines()]  # the rows tokenize saw
    cuts = [(tok.start, tok.end) for tok in tokens
            if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start in docstrings)]
    for (row0, col0), (row1, col1) in reversed(cuts):  # 1-based rows, 0-based columns
        head, tail = lines[row0 - 1][:col0], lines[row1 - 1][col1:]
        lines[row0 - 1:row1] = [head + tail] + [""] * (row1 - row0)
    return "\n".join(line.rstrip() for line in lines if line.strip()).encode()


@lru_cache(maxsize=None)
def code_hash(*parts: str, root: str | Path | None = None) -> str:
    """SHA-256 (16 hex chars) over the code (:func:`code_text`) of the named sub-packages/modules
    plus shared modules.

    ``code_hash("parse")`` covers ``src/foldworks/parse/**/*.py`` and :data:`SHARED_MODULES`;
    ``root`` is another checkout's ``src/foldworks`` (default: this package's directory). Comments,
    docstrings and blank lines do not count; renaming or moving a file does.
    """
    base = Path(root) if root is not None else PACKAGE_ROOT
    digest = hashlib.sha256()
    files: list[Path] = [base / name for name in SHARED_MODULES]
    for part in parts:
        target = base / part
        files.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")])
    for path in files:
        stat = path.stat()
        digest.update(str(path.relative_to(base)).encode())
        digest.update(_file_code_digest(str(path), stat.st_mtime_ns, stat.st_size))
    return digest.hexdigest()[:16]


#: Bump when :func:`code_text` changes what it keeps: it names the on-disk cache of code digests.
CODE_TEXT_VERSION = 1


def code_digest_cache_dir() -> Path:
    """Where code digests are cached: ``$FOLDWORKS_CACHE_DIR``, else ``$XDG_CACHE_HOME/foldworks``, else
    ``~/.cache/foldworks``; a sub-folder per :data:`CODE_TEXT_VERSION`."""
    base = os.environ.get("FOLDWORKS_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or
                                                          Path.home() / ".cache") / "foldworks"
    return Path(base) / f"code_text-v{CODE_TEXT_VERSION}"


@lru_cache(maxsize=4096)
def _file_code_digest(path: str, mtime_ns: int, size: int) -> bytes:
    """SHA-256 of one file's :func:`code_text`, cached in memory per (path, mtime, size) and on disk per
    SHA-256 of the file's bytes (:func:`code_digest_cache_dir`).

    Tokenizing is the slow part (~0.4 s for the 16 rule hashes, paid at every Snakemake start-up and
    twice per cluster job); a cached digest costs one small file read. The disk entry is keyed by the
    bytes, so it cannot go stale; a missing, unreadable or malformed entry is recomputed, and an
    unwritable cache folder only costs the time.
    """
    source = Path(path).read_bytes()
    entry = code_digest_cache_dir() / hashlib.sha256(source).hexdigest()
    try:
        cached = entry.read_text().strip()
        if len(cached) == 64:
            return bytes.fromhex(cached)
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256(code_text(source)).digest()
    _store(entry, digest.hex())
    return digest


def _store(entry: Path, text: str) -> None:
    """Write ``text`` to ``entry`` atomically (temp name, then rename); give up silently on OSError."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=f".{entry.name}.")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, entry)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


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
