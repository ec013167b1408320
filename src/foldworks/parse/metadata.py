"""Entry-level metadata from an mmCIF block: method, resolution (Å), release/deposition dates.

Rules (first non-null source wins):

- method: every ``_exptl.method`` in file order, joined by ``+`` (``X-RAY DIFFRACTION+NEUTRON DIFFRACTION``).
- resolution (Å): ``_refine.ls_d_res_high``, else ``_em_3d_reconstruction.resolution``, else
  ``_reflns.d_resolution_high`` (first numeric row); always None when every method is NMR.
- release date: earliest ``_pdbx_audit_revision_history.revision_date``, else earliest
  ``_database_PDB_rev.date`` (older files), else the deposition date as a lower bound (logged).
- deposition date: ``_pdbx_database_status.recvd_initial_deposition_date``, else
  ``_database_PDB_rev.date_original``.
"""

from __future__ import annotations

import logging
import re

import gemmi

LOG = logging.getLogger(__name__)

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
RESOLUTION_TAGS = (
    "_refine.ls_d_res_high",
    "_em_3d_reconstruction.resolution",
    "_reflns.d_resolution_high",
)


def values(block: gemmi.cif.Block, tag: str) -> list[str]:
    """Non-null, unquoted values of ``tag`` (a loop column or a single pair), in file order."""
    return [gemmi.cif.as_string(v) for v in block.find_values(tag) if not gemmi.cif.is_null(v)]


def experimental_method(block: gemmi.cif.Block) -> str | None:
    """``_exptl.method`` values joined by ``+`` (file order, duplicates dropped), or None."""
    methods = list(dict.fromkeys(m.strip().upper() for m in values(block, "_exptl.method")))
    return "+".join(methods) if methods else None


def resolution(block: gemmi.cif.Block, method: str | None) -> float | None:
    """High-resolution limit in Å (see module rules), or None (NMR, or not reported)."""
    if method and all("NMR" in m for m in method.split("+")):
        return None
    for tag in RESOLUTION_TAGS:
        for text in values(block, tag):
            try:
                value = float(text)
            except ValueError:
                continue
            if value > 0:
                return value
    return None


def _dates(block: gemmi.cif.Block, tag: str) -> list[str]:
    return [m.group(0) for m in (_DATE.match(v.strip()) for v in values(block, tag)) if m]


def deposition_date(block: gemmi.cif.Block) -> str | None:
    """ISO date of initial deposition, or None."""
    for tag in ("_pdbx_database_status.recvd_initial_deposition_date", "_database_PDB_rev.date_original"):
        dates = _dates(block, tag)
        if dates:
            return dates[0]
    return None


def release_date(block: gemmi.cif.Block, entry: str) -> str | None:
    """ISO date of first release (earliest revision), falling back to the deposition date."""
    for tag in ("_pdbx_audit_revision_history.revision_date", "_database_PDB_rev.date"):
        dates = _dates(block, tag)
        if dates:
            return min(dates)
    deposited = deposition_date(block)
    if deposited:
        LOG.warning("entry %s: no revision history; using the deposition date as release date", entry)
    return deposited


def entry_metadata(block: gemmi.cif.Block, entry: str) -> dict[str, object]:
    """``{method, resolution, release_date, deposition_date}`` of one entry."""
    method = experimental_method(block)
    return {
        "method": method,
        "resolution": resolution(block, method),
        "release_date": release_date(block, entry),
        "deposition_date": deposition_date(block),
    }


def can_sequences(block: gemmi.cif.Block) -> dict[str, str]:
    """entity_id → ``_entity_poly.pdbx_seq_one_letter_code_can`` (whitespace removed)."""
    table = block.find("_entity_poly.", ["entity_id", "?pdbx_seq_one_letter_code_can"])
    if not table or not table.has_column(1):
        return {}
    out: dict[str, str] = {}
    for row in table:
        if row.has(1) and not gemmi.cif.is_null(row[1]):
            out[gemmi.cif.as_string(row[0])] = "".join(gemmi.cif.as_string(row[1]).split()).upper()
    return out
