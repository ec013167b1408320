"""A local PDB mirror: flat (``<dir>/<id>.cif.gz``) or wwPDB divided (``<dir>/<xy>/<id>.cif.gz``).

``xy`` is the middle two characters of the ID (``1abc`` -> ``ab``), as in the wwPDB archive's
``data/structures/divided/mmCIF/``. Accepted file names per entry, in preference order:
``<id>.cif.gz``, ``<ID>.cif.gz``, ``<id>.pdb.gz``, ``<ID>.pdb.gz``, ``pdb<id>.ent.gz`` (the wwPDB
divided legacy-PDB name). Both layouts may coexist in one directory; a flat file wins.

:func:`list_mirror` lists every entry with two levels of ``os.scandir`` (no ``stat`` per file):
bench/sources.md measures it on a synthetic 230,000-entry tree.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: file name -> (entry, format); group 1/2 = id for ``<id>.<fmt>.gz``, group 3 = id for pdbXXXX.ent.gz
_NAME = re.compile(r"^(?:([0-9][A-Za-z0-9]{3})\.(cif|pdb)\.gz|pdb([0-9][a-z0-9]{3})\.ent\.gz)$")
_NAMES = re.compile(_NAME.pattern, re.MULTILINE)  # the same, over newline-joined names
_CANONICAL = re.compile(r"^([0-9][a-z0-9]{3})\.cif\.gz$", re.MULTILINE)
_SHARD = re.compile(r"^[a-z0-9]{2}$")
#: Mirror manifest read for release dates, if present (columns ``pdb_id``/``entry`` and ``release_date``).
MANIFEST_NAME = "MANIFEST.tsv"


def shard_of(entry: str) -> str:
    """The divided-layout subdirectory of an entry: its middle two characters (``1abc`` -> ``ab``)."""
    return entry[1:3].lower()


def candidate_names(entry: str, fmt: str) -> list[str]:
    """File names that hold ``entry`` in format ``fmt`` (``cif`` or ``pdb``), preferred first."""
    names = [f"{entry}.{fmt}.gz", f"{entry.upper()}.{fmt}.gz"]
    if fmt == "pdb":
        names.append(f"pdb{entry}.ent.gz")
    return names


def candidate_paths(directory: str | Path, entry: str, fmt: str) -> list[Path]:
    """Flat then divided locations of ``entry`` in format ``fmt`` under ``directory``."""
    directory = Path(directory)
    names = candidate_names(entry, fmt)
    return [directory / name for name in names] + [directory / shard_of(entry) / name for name in names]


def parse_name(name: str) -> tuple[str, str] | None:
    """``(entry, format)`` for a mirror file name, or None for anything else."""
    match = _NAME.match(name)
    if not match:
        return None
    if match.group(3):
        return match.group(3), "pdb"
    return match.group(1).lower(), match.group(2)


@dataclass
class MirrorListing:
    """Entries found in a mirror: ``{entry: relative path}`` (mmCIF preferred; in listing order,
    not sorted) and the layout (``flat``, ``divided``, ``mixed`` or ``empty``)."""

    entries: dict[str, str] = field(default_factory=dict)
    layout: str = "empty"


def _scan(directory: str, prefix: str, found: dict[str, str]) -> tuple[int, list[str]]:
    """Add ``directory``'s entry files to ``found``; returns (files added, shard subdirectories).

    One ``os.listdir`` and regex passes over the newline-joined names, no per-file ``stat``:
    canonical ``<id>.cif.gz`` names (the whole of a wwPDB mmCIF mirror) in bulk, the other
    accepted names only when present (bench/sources.md: 230,000 files)."""
    names = os.listdir(directory)
    joined = "\n".join(names)
    canonical = _CANONICAL.findall(joined)
    fresh = set(canonical).difference(found)
    found.update({entry: f"{prefix}{entry}.cif.gz" for entry in fresh})
    added = len(fresh)
    if len(canonical) < len(names):  # other names: upper case, legacy PDB, shard directories, ...
        for upper_id, fmt, ent_id in _NAMES.findall(joined):
            if fmt == "cif" and upper_id == upper_id.lower():
                continue  # canonical, done above
            entry, fmt = (ent_id, "pdb") if ent_id else (upper_id.lower(), fmt)
            previous = found.get(entry)
            if previous is None or (fmt == "cif" and not previous.endswith(".cif.gz")):
                added += previous is None
                found[entry] = f"{prefix}{upper_id}.{fmt}.gz" if upper_id else f"{prefix}pdb{ent_id}.ent.gz"
    shards = [] if prefix else [n for n in names if _SHARD.match(n) and os.path.isdir(os.path.join(directory, n))]
    return added, shards


def list_mirror(directory: str | Path) -> MirrorListing:
    """Every entry in a flat and/or divided mirror; raises ``ValueError`` if it is not a directory."""
    directory = str(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"mirror {directory!r} is not a directory")
    found: dict[str, str] = {}
    flat, shards = _scan(directory, "", found)
    divided = 0
    for shard in sorted(shards):
        divided += _scan(os.path.join(directory, shard), shard + "/", found)[0]
    layout = "mixed" if flat and divided else "flat" if flat else "divided" if divided else "empty"
    return MirrorListing(entries=found, layout=layout)


def manifest_release_dates(directory: str | Path) -> dict[str, str]:
    """``{entry: YYYY-MM-DD}`` from ``<mirror>/MANIFEST.tsv`` if it has a ``release_date`` column
    (and ``pdb_id`` or ``entry``); ``{}`` when there is no such file or column."""
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        fields = reader.fieldnames or []
        key = "pdb_id" if "pdb_id" in fields else "entry" if "entry" in fields else None
        if key is None or "release_date" not in fields:
            return {}
        return {row[key].strip().lower(): row["release_date"].strip()[:10]
                for row in reader if row.get(key) and row.get("release_date")}
