"""FASTA reading for the msa stages (protein sequences, one-letter codes)."""

from __future__ import annotations

import os
import re
from typing import Iterator

_RESIDUES = re.compile(r"^[A-Z]+$")


def read_fasta(path: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """Yield ``(header, sequence)`` records in file order.

    The header is the text after ``>``; the sequence is upper-cased with whitespace and a
    trailing ``*`` removed. Raises ``ValueError`` naming the file and record for an empty
    sequence or any non-letter character.
    """
    header: str | None = None
    chunks: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if line.startswith(">"):
                if header is not None:
                    yield header, _clean(path, header, chunks)
                header, chunks = line[1:].strip(), []
            elif line:
                if header is None:
                    raise ValueError(f"{path}: sequence data before the first '>' header")
                chunks.append(line)
    if header is not None:
        yield header, _clean(path, header, chunks)


def _clean(path: str | os.PathLike[str], header: str, chunks: list[str]) -> str:
    sequence = "".join("".join(chunks).split()).upper().rstrip("*")
    if not _RESIDUES.fullmatch(sequence):
        raise ValueError(f"{path}: record {header!r}: empty or non-letter characters in sequence")
    return sequence
