"""Legacy PDB format → mmCIF with gemmi, so every later stage reads one format.

Coordinates, occupancies, B-factors, altlocs and residue numbering are copied unchanged.
``SEQRES`` becomes ``_entity_poly_seq`` (via ``setup_entities``), residues get ``label_seq_id``
along it, entities are numbered ``1, 2, ...`` as in wwPDB files, and ``REVDAT`` records (which
gemmi does not keep) become ``_pdbx_audit_revision_history`` so the release date survives.
"""

from __future__ import annotations

import datetime as dt
import gzip
import re

import gemmi

_MONTHS = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}
_REVDAT = re.compile(r"^REVDAT\s+(\d+)\s+(\d{2})-([A-Z]{3})-(\d{2})\s+\S+\s+(\d)")


def pdb_date(text: str) -> str | None:
    """``'31-MAY-94'`` → ``'1994-05-31'`` (two-digit years ≥ 70 are 19xx), or None if malformed."""
    match = re.fullmatch(r"(\d{2})-([A-Z]{3})-(\d{2})", text.strip())
    if not match or match.group(2) not in _MONTHS:
        return None
    day, month, yy = int(match.group(1)), _MONTHS[match.group(2)], int(match.group(3))
    year = 1900 + yy if yy >= 70 else 2000 + yy
    try:
        return dt.date(year, month, day).isoformat()
    except ValueError:
        return None


def revision_dates(pdb_text: str) -> list[tuple[int, str, int]]:
    """``(revision number, ISO date, modification type)`` for each REVDAT record (first line only)."""
    seen: dict[int, tuple[int, str, int]] = {}
    for line in pdb_text.splitlines():
        if not line.startswith("REVDAT"):
            continue
        match = _REVDAT.match(line)
        if not match or int(match.group(1)) in seen:
            continue
        date = pdb_date(f"{match.group(2)}-{match.group(3)}-{match.group(4)}")
        if date:
            seen[int(match.group(1))] = (int(match.group(1)), date, int(match.group(5)))
    return [seen[k] for k in sorted(seen)]


def structure_to_mmcif(st: gemmi.Structure, pdb_text: str) -> gemmi.cif.Document:
    """mmCIF document of a structure read from PDB format (entities set up, label_seq assigned)."""
    st.setup_entities()
    for index, entity in enumerate(st.entities, start=1):
        entity.name = str(index)
    st.assign_label_seq_id(False)
    doc = st.make_mmcif_document()
    block = doc.sole_block()
    revisions = revision_dates(pdb_text)
    if revisions:
        loop = block.init_loop("_pdbx_audit_revision_history.", [
            "ordinal", "data_content_type", "major_revision", "minor_revision", "revision_date"])
        for ordinal, (_num, date, _mod) in enumerate(revisions, start=1):
            loop.add_row([str(ordinal), gemmi.cif.quote("Structure model"), str(ordinal), "0", date])
    return doc


def pdb_text_to_mmcif(pdb_text: str) -> str:
    """Convert legacy PDB text to mmCIF text (raises RuntimeError/ValueError on unreadable input)."""
    st = gemmi.read_pdb_string(pdb_text)
    return structure_to_mmcif(st, pdb_text).as_string()


def gzip_deterministic(data: bytes) -> bytes:
    """gzip ``data`` at level 9 with mtime 0 and no file name: identical input → identical bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)
