"""Checks that downloaded bytes are a complete gzip of real mmCIF / PDB text for the entry.

Rejected: empty bodies, HTML error pages, non-gzip data, truncated gzip streams, text over the
size cap (checked while decompressing, so a gzip bomb never fills memory), mmCIF that gemmi
cannot parse or that has no ``_atom_site``, PDB text without atoms, and files of another entry.
"""

from __future__ import annotations

import zlib

import gemmi

from foldworks.fetch.http import FetchError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 1 << 20


def check_envelope(data: bytes, label: str) -> None:
    """Refuse empty bodies, HTML pages and anything that is not gzip (``label`` names the file)."""
    if not data:
        raise FetchError(f"{label}: empty file")
    if data.startswith(GZIP_MAGIC):
        return
    head = data[:1024].lstrip().lower()
    if head.startswith(b"<") or b"<html" in head or b"<!doctype" in head:
        raise FetchError(f"{label}: an HTML page, not a structure file")
    raise FetchError(f"{label}: not gzip data (starts with {data[:8]!r})")


def gunzip_capped(data: bytes, max_text_bytes: int, label: str) -> bytes:
    """Decompress (possibly multi-member) gzip ``data``, refusing > ``max_text_bytes`` of output."""
    out: list[bytes] = []
    total = 0
    remaining = data
    while remaining:
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = remaining
        try:
            while pending and not decomp.eof:
                chunk = decomp.decompress(pending, CHUNK_BYTES)
                pending = decomp.unconsumed_tail
                total += len(chunk)
                if total > max_text_bytes:
                    raise FetchError(f"{label}: decompressed text exceeds {max_text_bytes} bytes")
                out.append(chunk)
        except zlib.error as exc:
            raise FetchError(f"{label}: corrupt gzip data ({exc})") from exc
        if not decomp.eof:
            raise FetchError(f"{label}: truncated gzip stream")
        remaining = decomp.unused_data
        if remaining and not remaining.startswith(GZIP_MAGIC):
            break  # trailing garbage after a complete member: ignored, as gzip(1) does
    text = b"".join(out)
    if not text.strip():
        raise FetchError(f"{label}: decompresses to an empty file")
    return text


def decode_text(raw: bytes) -> str:
    """Bytes → str; PDB files are ASCII, stray non-UTF-8 bytes are replaced, never fatal."""
    return raw.decode("utf-8", errors="replace")


def validate_mmcif(text: str, entry: str, label: str) -> gemmi.cif.Document:
    """Parse ``text`` as mmCIF; require ``_atom_site`` rows and (if present) ``_entry.id == entry``."""
    try:
        doc = gemmi.cif.read_string(text)
        block = doc.sole_block()
    except (RuntimeError, ValueError) as exc:
        raise FetchError(f"{label}: not valid mmCIF ({_first_line(exc)})") from exc
    if len(block.find_values("_atom_site.id")) == 0 and len(block.find_values("_atom_site.Cartn_x")) == 0:
        raise FetchError(f"{label}: mmCIF has no _atom_site records")
    entry_id = block.find_value("_entry.id")
    found = gemmi.cif.as_string(entry_id).lower() if entry_id else block.name.lower()
    if found and found != entry:
        raise FetchError(f"{label}: file is entry {found!r}, expected {entry!r}")
    return doc


def validate_pdb(text: str, entry: str, label: str) -> gemmi.Structure:
    """Parse ``text`` as legacy PDB; require ≥ 1 model with atoms and a matching HEADER ID."""
    try:
        st = gemmi.read_pdb_string(text)
    except (RuntimeError, ValueError) as exc:
        raise FetchError(f"{label}: not valid PDB format ({_first_line(exc)})") from exc
    if len(st) == 0 or st[0].count_atom_sites() == 0:
        raise FetchError(f"{label}: PDB file has no atoms")
    found = st.info["_entry.id"].lower() if "_entry.id" in st.info else ""
    if found and found != entry:
        raise FetchError(f"{label}: file is entry {found!r}, expected {entry!r}")
    return st


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
