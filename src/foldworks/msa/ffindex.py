"""Minimal reader/writer for HH-suite's ffindex container (``.ffdata`` + ``.ffindex``).

Format: ``.ffdata`` is the concatenation of entries, each terminated by one ``\\0`` byte;
``.ffindex`` has one line ``key<TAB>offset<TAB>length`` per entry (offset and length in
bytes, the length counting the trailing ``\\0``), byte-sorted by key (``LC_ALL=C`` order),
which HH-suite requires for its binary search. Keys are at most 31 characters: longer keys
are silently corrupted by the ffindex tools, so :func:`write_ffindex` refuses them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

#: Longest key the ffindex C library handles correctly (``FFINDEX_MAX_ENTRY_NAME_LENTH`` - 1).
MAX_KEY_LENGTH = 31
_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,31}$")


def _check_key(key: str) -> None:
    if not _KEY_PATTERN.fullmatch(key):
        raise ValueError(
            f"ffindex key {key!r}: must be 1-{MAX_KEY_LENGTH} characters of [A-Za-z0-9_.-]"
        )


def write_ffindex(data_path: Path, index_path: Path, entries: Iterable[tuple[str, bytes]]) -> int:
    """Write text ``entries`` (key, payload) sorted by key bytes; return the number written.

    Each payload gets its ``\\0`` terminator here, so it must not contain one. Duplicate keys
    raise ``ValueError``. Output bytes depend only on the set of entries.
    """
    terminated = []
    for key, payload in entries:
        if b"\0" in payload:
            raise ValueError(f"ffindex entry {key!r} contains a NUL byte")
        terminated.append((key, payload + b"\0"))
    return _write_raw(data_path, index_path, terminated)


def _write_raw(data_path: Path, index_path: Path, entries: Iterable[tuple[str, bytes]]) -> int:
    """Write already-terminated (possibly binary) payloads in key-byte order."""
    items = sorted(entries, key=lambda item: item[0].encode("ascii"))
    offset = 0
    lines: list[str] = []
    previous = None
    with open(data_path, "wb") as data:
        for key, raw in items:
            _check_key(key)
            if key == previous:
                raise ValueError(f"ffindex key {key!r} occurs twice")
            data.write(raw)
            lines.append(f"{key}\t{offset}\t{len(raw)}\n")
            offset += len(raw)
            previous = key
    index_path.write_text("".join(lines), encoding="ascii")
    return len(items)


def read_ffindex_raw(data_path: Path, index_path: Path) -> dict[str, bytes]:
    """Read every entry as ``{key: raw bytes}`` exactly as indexed (terminator included;
    binary entries such as ``cs219`` may contain further ``\\0`` bytes)."""
    blob = Path(data_path).read_bytes()
    out: dict[str, bytes] = {}
    for line_number, line in enumerate(Path(index_path).read_text(encoding="ascii").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(f"{index_path}:{line_number}: expected 'key<TAB>offset<TAB>length'")
        key, offset, length = fields[0], int(fields[1]), int(fields[2])
        raw = blob[offset:offset + length]
        if len(raw) != length:
            raise ValueError(f"{index_path}:{line_number}: entry {key!r} runs past the end of {data_path}")
        out[key] = raw
    return out


def read_ffindex(data_path: Path, index_path: Path) -> dict[str, bytes]:
    """Read text entries as ``{key: payload}`` (trailing ``\\0`` removed)."""
    return {key: raw.rstrip(b"\0") for key, raw in read_ffindex_raw(data_path, index_path).items()}


def rewrite_sorted(data_path: Path, index_path: Path) -> int:
    """Rewrite an ffindex pair in key-sorted entry order (stable bytes for identical content).

    Multi-threaded ``cstranslate`` writes entries in a varying order; this makes the output
    byte-identical between runs. Returns the number of entries.
    """
    entries = read_ffindex_raw(data_path, index_path)
    return _write_raw(data_path, index_path, entries.items())
