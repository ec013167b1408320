"""Query FASTA reader of the inference stage: one record per protein sequence to predict.

Each record becomes a :class:`QueryRecord` with

- ``name``: the header's first word made a safe file name (``[A-Za-z0-9._-]``, at most
  :data:`MAX_NAME_CHARS` characters, not starting with ``.``), unique within the file
  ignoring case (a repeated name gets ``_2``, ``_3``, ...), so ``{name}.cif`` never collides,
  also on case-insensitive file systems;
- ``sequence``: upper-cased as the features stage does, whitespace and one trailing ``*``
  removed; only the 20 standard amino acids and ``X`` are accepted;
- ``sequence_hash``: :func:`foldworks.ids.sequence_hash` (records with the same sequence share
  one alignment);
- ``error``: ``None``, or one line naming the record (and the position of a bad letter) when
  the record is refused (empty, invalid letters). Refused records keep their name so that the
  ranking can list them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from foldworks.constants import RESTYPES
from foldworks.ids import sequence_hash

#: Letters accepted in a query sequence (after upper-casing).
ALLOWED_LETTERS: frozenset[str] = frozenset(RESTYPES + "X")
#: Longest record name kept (file names stay well under file system limits).
MAX_NAME_CHARS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class FastaError(ValueError):
    """The file itself cannot be read as FASTA (no records, data before the first header)."""


@dataclass(frozen=True)
class QueryRecord:
    """One FASTA record: safe ``name``, original ``header``, normalised ``sequence`` (may be
    empty for a refused record), its ``sequence_hash`` (empty when refused) and ``error``."""

    name: str
    header: str
    sequence: str
    sequence_hash: str
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


def safe_name(header: str, index: int) -> str:
    """File-name-safe form of the header's first word; ``record_<index>`` (1-based) when nothing
    usable is left. ``sp|P69905|HBA_HUMAN Hemoglobin`` → ``sp_P69905_HBA_HUMAN``."""
    word = header.split()[0] if header.split() else ""
    name = _UNSAFE.sub("_", word).strip("._-")[:MAX_NAME_CHARS].rstrip("._-")
    return name or f"record_{index}"


def unique_names(names: list[str]) -> list[str]:
    """``names`` with repeats (compared case-insensitively) suffixed ``_2``, ``_3``, ... in order."""
    taken: set[str] = set()
    out = []
    for name in names:
        candidate, counter = name, 1
        while candidate.lower() in taken:
            counter += 1
            candidate = f"{name[:MAX_NAME_CHARS - len(str(counter)) - 1]}_{counter}"
        taken.add(candidate.lower())
        out.append(candidate)
    return out


def check_sequence(raw: str, label: str) -> tuple[str, str | None]:
    """``(normalised sequence, error or None)`` of one record's joined sequence lines.

    ``label`` names the record in the error (``<file>: record 'x'``); positions are 1-based
    in the normalised sequence.
    """
    sequence = "".join(raw.split()).upper()
    if sequence.endswith("*"):
        sequence = sequence[:-1]
    if not sequence:
        return "", f"{label}: empty sequence"
    for position, letter in enumerate(sequence, start=1):
        if letter not in ALLOWED_LETTERS:
            return sequence, (f"{label}: invalid letter {letter!r} at position {position} "
                              f"(allowed: the 20 standard amino acids and X)")
    return sequence, None


def parse_query_fasta(text: str, source: str = "<fasta>") -> list[QueryRecord]:
    """Records of FASTA ``text`` in file order (see the module docstring); ``source`` names the
    file in errors. Raises :class:`FastaError` when the text has no record or has sequence
    data before the first ``>`` header; a bad record is returned with its ``error`` set."""
    raw: list[tuple[str, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line.startswith(">"):
            raw.append((line[1:].strip(), []))
        elif line and not line.startswith(";"):
            if not raw:
                raise FastaError(f"{source}: line {number}: sequence data before the first '>' header")
            raw[-1][1].append(line)
    if not raw:
        raise FastaError(f"{source}: no FASTA records")
    names = unique_names([safe_name(header, index) for index, (header, _) in enumerate(raw, start=1)])
    records = []
    for name, (header, lines) in zip(names, raw):
        sequence, error = check_sequence("".join(lines), f"{source}: record {name!r}")
        records.append(QueryRecord(name, header, sequence if error is None else "",
                                   sequence_hash(sequence) if error is None else "", error))
    return records


def read_query_fasta(path: str | os.PathLike[str]) -> list[QueryRecord]:
    """:func:`parse_query_fasta` of the file at ``path`` (UTF-8; undecodable bytes become U+FFFD,
    which the letter check then refuses)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return parse_query_fasta(handle.read(), str(path))

