"""The run's entry list file (``data/raw/entries.txt``): one validated PDB ID per line, sorted.

The rules that read one file per entry of the whole run (``chains``, ``fetch_manifest``,
``failures_report``) hand their CLI this file plus a folder instead of one path per entry: Linux
limits one argument string, and Snakemake runs a job as ``bash -c "<command>"``, to 128 KiB
(MAX_ARG_STRLEN), which one path per entry exceeds from ~5,900 entries ("Argument list too
long"). The file is written by the local rule ``entry_list`` (workflow/rules/fetch.smk) whenever
the set of entries changes; it lives in ``data/raw`` so DVC versions it with the fetch records.

Format: ASCII, one lower-case 4-character PDB ID per line, sorted, no duplicates, ``\\n`` after
every line (also the last). Readers refuse anything else, naming the file and line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from foldworks import fsutil
from foldworks.ids import ENTRY_PATTERN, normalize_entry

#: Where the workflow keeps the list (relative to the working directory).
ENTRY_LIST = "data/raw/entries.txt"


class EntryListError(ValueError):
    """An entry list file is missing, empty or malformed; the message names the file and line."""


def entry_list_bytes(entries: Iterable[str]) -> bytes:
    """The file content for ``entries``: normalised, de-duplicated, sorted, one per line."""
    unique = sorted({normalize_entry(entry) for entry in entries})
    return "".join(f"{entry}\n" for entry in unique).encode("ascii")


def entry_list_digest(entries: Iterable[str]) -> str:
    """SHA-256 (64 hex) of :func:`entry_list_bytes`: the same for any order of the same entries."""
    return hashlib.sha256(entry_list_bytes(entries)).hexdigest()


def write_entry_list(entries: Iterable[str], path: str | Path) -> str:
    """Write the list atomically, only if its bytes change (an unchanged file keeps its mtime, so
    Snakemake does not rerun its consumers); returns a one-line log message."""
    data = entry_list_bytes(entries)
    if not data:
        raise EntryListError(f"entry list {path}: no entries to write")
    path = Path(path)
    count = data.count(b"\n")
    digest = hashlib.sha256(data).hexdigest()
    if path.is_file() and path.read_bytes() == data:
        return f"entry list {path}: {count} entries (sha256 {digest}), unchanged"
    fsutil.write_bytes_atomic(path, data)
    return f"entry list {path}: {count} entries (sha256 {digest}) written"


def read_entry_list(path: str | Path) -> list[str]:
    """The entries of a list file, in file order; raises :class:`EntryListError` for a missing or
    empty file, a line that is not a lower-case PDB ID, or an entry listed twice."""
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise EntryListError(f"entry list {path}: unreadable: {exc}") from exc
    entries: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not ENTRY_PATTERN.fullmatch(line):
            raise EntryListError(f"entry list {path}, line {number}: {line[:40]!r} is not a lower-case PDB ID")
        if line in seen:
            raise EntryListError(f"entry list {path}, line {number}: entry {line} listed twice")
        seen.add(line)
        entries.append(line)
    if not entries:
        raise EntryListError(f"entry list {path}: no entries")
    return entries


def entry_files(entries: Iterable[str], directory: str | Path, suffix: str = ".json") -> list[Path]:
    """``<directory>/<entry><suffix>`` for each entry (IDs checked again: they become paths)."""
    return [Path(directory) / f"{normalize_entry(entry)}{suffix}" for entry in entries]
