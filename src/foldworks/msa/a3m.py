"""Reading and checking A3M alignments (HH-suite's format).

In A3M, upper-case letters and ``-`` are *match* columns aligned to the query (every row has
exactly one per query residue); lower-case letters are *insertions* relative to the query
and are not columns; ``.`` (A2M padding) is ignored. Lines starting with ``#`` are comments.
Records named ``ss_*``/``sa_*`` (HH-suite secondary-structure / solvent-accessibility
annotation rows) and ``Consensus`` are not sequences and are skipped.

foldworks a3m files start with one metadata comment (:func:`format_header`)::

    #foldworks-msa {"databases":{"foldworks":"<sha256[:16]>"},"depth":12,"status":"ok",...}

``status`` is ``ok``, or ``failed`` for a placeholder holding only the query row, written when
every attempt failed (the reason is in ``data/failures/msa/<hash>.json``).

ColabFold writes many alignments into one file, each ending with a NUL byte (``\x00``), and
starts each with a ``#<lengths>\t<cardinalities>`` line: :func:`split_alignments` cuts such a
file into single alignments; :func:`a3m_records` accepts a NUL that only terminates the file.

Token alphabet of :func:`parse_a3m`: 0..19 = ``constants.RESTYPES``, 20 = X/unknown (any other
letter: B, Z, U, O, J, X), 21 = gap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from foldworks.constants import GAP_INDEX, RESTYPES, UNK_INDEX

_ANNOTATION_PREFIXES = ("ss_", "sa_", "Consensus")
#: Byte → MSA token lookup (upper-case letters only; others are handled separately).
_TOKEN = np.full(256, UNK_INDEX, dtype=np.int8)
for _index, _letter in enumerate(RESTYPES):
    _TOKEN[ord(_letter)] = _index
_TOKEN[ord("-")] = GAP_INDEX


HEADER_PREFIX = "#foldworks-msa "


class A3MError(ValueError):
    """An alignment violates the A3M contract; the message names the query/target."""


def split_alignments(text: str) -> list[str]:
    """The alignments of a NUL-separated (ColabFold) a3m file, empty pieces dropped; a file
    without NUL bytes is one alignment."""
    return [piece for piece in text.split("\x00") if piece.strip()]


def a3m_records(text: str) -> list[tuple[str, str]]:
    """``[(header, aligned sequence)]`` in file order, comments and annotation rows removed.

    ``header`` is the text after ``>``; the sequence keeps its case, ``-`` and ``.``. A NUL
    byte may end the alignment (ColabFold); text holding several NUL-separated alignments raises
    :class:`A3MError` (read those with :func:`split_alignments`).
    """
    pieces = split_alignments(text) if "\x00" in text else [text]
    if len(pieces) > 1:
        raise A3MError(f"a3m: {len(pieces)} NUL-separated alignments in one text; split them first")
    text = pieces[0] if pieces else ""
    records: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(">"):
            records.append((line[1:].strip(), []))
        elif not records:
            raise A3MError("a3m: sequence data before the first '>' header")
        else:
            records[-1][1].append(line)
    return [(header, "".join(parts)) for header, parts in records
            if not header.startswith(_ANNOTATION_PREFIXES)]


def match_columns(aligned: str) -> str:
    """The query-aligned part of a row: insertions (lower case) and ``.`` removed."""
    return "".join(c for c in aligned if not c.islower() and c != ".")


def _encode_row(aligned: str) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and per-column deletion counts of one A3M row (no length check)."""
    tokens: list[int] = []
    deletions: list[int] = []
    pending = 0
    for char in aligned:
        if char.islower():
            pending += 1
        elif char != ".":
            tokens.append(int(_TOKEN[ord(char)]) if char.isascii() else UNK_INDEX)
            deletions.append(pending)
            pending = 0
    return np.asarray(tokens, dtype=np.int8), np.asarray(deletions, dtype=np.float32)


def parse_a3m(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse A3M text into ``(msa int8 [N, L], deletion_matrix float32 [N, L])``.

    ``N`` = number of sequence records (row 0 is the first record, normally the query),
    ``L`` = number of match columns. ``deletion_matrix[i, j]`` is the count of lower-case
    letters in row ``i`` immediately before column ``j`` (insertions after the last column are
    dropped). Raises :class:`A3MError` for an empty alignment or rows of unequal length.
    """
    records = a3m_records(text)
    if not records:
        raise A3MError("a3m: no sequence records")
    rows = [_encode_row(aligned) for _, aligned in records]
    length = len(rows[0][0])
    for (header, _), (tokens, _) in zip(records, rows):
        if len(tokens) != length:
            raise A3MError(
                f"a3m: row {header!r} has {len(tokens)} match columns, the first row has {length}"
            )
    msa = np.stack([tokens for tokens, _ in rows]).astype(np.int8, copy=False)
    deletion_matrix = np.stack([dels for _, dels in rows]).astype(np.float32, copy=False)
    return msa, deletion_matrix


def read_a3m(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`parse_a3m` of a file."""
    return parse_a3m(Path(path).read_text(encoding="utf-8", errors="replace"))


def validate_a3m(text: str, query: str, name: str = "query") -> int:
    """Check the A3M contract against ``query``; return the depth (number of rows).

    Contract: the first record is exactly ``query`` (upper case, no gaps or insertions) and
    every row has ``len(query)`` match columns. Raises :class:`A3MError` naming ``name``
    (the sequence hash or target) on any violation.
    """
    records = a3m_records(text)
    if not records:
        raise A3MError(f"{name}: a3m has no sequence records")
    first = records[0][1]
    if first != query.upper():
        raise A3MError(f"{name}: first a3m record is not the query sequence "
                       f"({len(match_columns(first))} vs {len(query)} residues)")
    for index, (header, aligned) in enumerate(records):
        columns = len(match_columns(aligned))
        if columns != len(query):
            raise A3MError(f"{name}: a3m row {index} ({header!r}) has {columns} match columns, "
                           f"expected the query length {len(query)}")
        if not all(c.isalpha() or c in "-." for c in aligned):
            raise A3MError(f"{name}: a3m row {index} ({header!r}) contains non-letter characters")
    return len(records)


def format_a3m(records: list[tuple[str, str]]) -> str:
    """Render ``[(header, aligned sequence)]`` as A3M text (one line per sequence)."""
    return "".join(f">{header}\n{aligned}\n" for header, aligned in records)


def format_header(meta: dict) -> str:
    """The metadata comment line (compact, key-sorted JSON: identical meta, identical bytes)."""
    return HEADER_PREFIX + json.dumps(meta, sort_keys=True, separators=(",", ":")) + "\n"


def read_header(text: str) -> dict | None:
    """The metadata of a foldworks a3m (its first line), or ``None`` for any other a3m."""
    first = text.lstrip("\n").split("\n", 1)[0]
    if not first.startswith(HEADER_PREFIX):
        return None
    try:
        meta = json.loads(first[len(HEADER_PREFIX):])
    except json.JSONDecodeError as exc:
        raise A3MError(f"a3m metadata line is not JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise A3MError("a3m metadata line is not a JSON object")
    return meta
