"""Atomic file writing: every output appears complete or not at all.

A killed job never leaves a partial file behind: we write to a temporary name in the same
directory, flush and fsync, then ``os.replace`` it onto the final name (and fsync the directory).
A SIGKILL before the rename can leave only the hidden temp ``.<name>.<random>.tmp[<suffix>]``,
which no stage reads; ``find data results -name '.*.tmp*' -delete`` removes such leftovers
(when no run is active).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

import numpy as np


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    ``suffix`` keeps an extension on the temp name for writers that insist on one
    (``np.savez`` appends ``.npz`` otherwise). On any exception the temp file is removed.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=f".tmp{suffix}", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path`` for writing; rename it onto ``path`` when closed cleanly."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as handle:
            yield handle


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON (stable bytes for identical content)."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=1, sort_keys=True, default=_json_default)
        handle.write("\n")


def write_npz_atomic(path: str | os.PathLike[str], arrays: dict[str, np.ndarray]) -> None:
    """Save ``arrays`` with ``np.savez_compressed`` atomically (keys may contain ``/``).

    Written through a file handle, so the temp name ends in ``.tmp`` (a path would get ``.npz``
    appended, and a temp left by a killed job would then match ``*.npz``)."""
    with atomic_open(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)


def write_tsv_atomic(path: str | os.PathLike[str], header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Write a tab-separated table with a header row atomically."""
    with atomic_open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (best effort: some file systems refuse fsync on directories)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
