"""Templates from an existing ``pdb_seqres.txt`` and mmCIF directory instead of the parsed chains.

``pdb_seqres.txt`` (wwPDB: ``>101m_A mol:protein length:154  MYOGLOBIN`` then the sequence) gives
the template sequences; the mmCIF files are read only for the templates that are hit: the
release date of each hit's entry (cached in ``release_dates.tsv``) and, for the selected ones,
coordinates (parsed like any entry into a cache directory). The mmCIF directory may be flat
(``<id>.cif.gz``) or divided (``<middle two>/<id>.cif.gz``); ``.cif`` files work too.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

import pandas as pd

from foldworks import fsutil
from foldworks.ids import normalize_entry, sequence_hash
from foldworks.parse.core import parse_entry, read_block
from foldworks.parse.io import write_parsed
from foldworks.parse.metadata import release_date

LOG = logging.getLogger("foldworks.templates.seqres")
DATE_COLUMNS = ("entry", "release_date")


def read_seqres(path: str | Path) -> pd.DataFrame:
    """Protein records of a ``pdb_seqres.txt`` as chain-table rows (``entry, chain, molecule_type,
    sequence, sequence_hash, release_date`` empty). Raises ``ValueError`` naming a bad header."""
    rows, header, parts = [], None, []
    for line in [*Path(path).read_text(encoding="ascii", errors="replace").splitlines(), ">"]:
        if not line.startswith(">"):
            parts.append(line.strip())
            continue
        if header is not None:
            rows.append(_seqres_row(header, "".join(parts), path))
        header, parts = line[1:].strip(), []
    frame = pd.DataFrame([r for r in rows if r is not None],
                         columns=["entry", "chain", "molecule_type", "sequence", "sequence_hash", "release_date"])
    return frame


def _seqres_row(header: str, sequence: str, path: str | Path) -> dict | None:
    fields = header.split()
    name = fields[0] if fields else ""
    entry, sep, chain = name.partition("_")
    if not sep or len(fields) < 2 or not fields[1].startswith("mol:"):
        raise ValueError(f"{path}: record {header[:60]!r}: expected '>xxxx_C mol:<type> ...'")
    if fields[1] != "mol:protein" or not sequence:
        return None
    sequence = sequence.upper()
    return {"entry": normalize_entry(entry), "chain": chain, "molecule_type": "protein", "sequence": sequence,
            "sequence_hash": sequence_hash(sequence), "release_date": ""}


def mmcif_path(mmcif_dir: str | Path, entry: str) -> Path:
    """The mmCIF file of ``entry`` in a flat or divided directory; ``LookupError`` naming it if absent."""
    root = Path(mmcif_dir)
    for folder in (root, root / entry[1:3]):
        for name in (f"{entry}.cif.gz", f"{entry}.cif", f"{entry.upper()}.cif.gz", f"{entry.upper()}.cif"):
            if (folder / name).is_file():
                return folder / name
    raise LookupError(f"template entry {entry}: no mmCIF file in {root}")


def read_release_dates(cache: str | Path) -> dict[str, str]:
    try:
        frame = pd.read_csv(cache, sep="\t", dtype=str, keep_default_na=False)
    except FileNotFoundError:
        return {}
    return dict(zip(frame["entry"], frame["release_date"]))


def fill_release_dates(members: pd.DataFrame, hashes: Iterable[str], mmcif_dir: str | Path,
                       cache: str | Path) -> pd.DataFrame:
    """``members`` with the release dates of the entries holding ``hashes`` read from their
    mmCIF files (once per entry: ``cache`` keeps ``entry, release_date``). An entry whose file is
    missing or unreadable keeps an empty date, so it is never a template (logged)."""
    dates = read_release_dates(cache)
    wanted = set(members.loc[members["sequence_hash"].isin(set(hashes)), "entry"]) - set(dates)
    for entry in sorted(wanted):
        try:
            dates[entry] = release_date(read_block(mmcif_path(mmcif_dir, entry)), entry) or ""
        except (LookupError, OSError, ValueError, RuntimeError) as exc:
            LOG.warning("template entry %s: no release date (%s)", entry, exc)
            dates[entry] = ""
    if wanted:
        fsutil.write_tsv_atomic(cache, DATE_COLUMNS, sorted(dates.items()))
    return members.assign(release_date=[dates.get(e) or d for e, d in zip(members["entry"], members["release_date"])])


def parsed_template(entry: str, mmcif_dir: str | Path, cache_dir: str | Path) -> Path:
    """``<cache_dir>/<entry>.npz``, parsing the entry's mmCIF first if it is not cached."""
    npz = Path(cache_dir) / f"{entry}.npz"
    if not npz.is_file():
        parsed = parse_entry(mmcif_path(mmcif_dir, entry), entry)
        if parsed.status != "ok":
            raise ValueError(parsed.reason or f"template entry {entry}: parse failed")
        write_parsed(parsed, npz, Path(cache_dir) / f"{entry}.json")
    return npz
