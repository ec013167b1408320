"""Existing alignment collections as an MSA source: layouts, readers and the hash index.

A *source* (``msa.precomputed.sources[]``) is a collection of alignments computed elsewhere, in
one of four layouts (``docs/alignments.md`` has a tree of each):

- ``openfold``: OpenFold's ``alignment_dir``, one folder per chain ``<pdb>_<chain>/`` holding
  ``*.a3m`` and ``*.sto`` files (``uniprot_hits.*`` and ``hmm_output.*`` are not MSAs: skipped);
- ``openproteinset``: ``<pdb>_<chain>/a3m/*.a3m`` (``hhr/`` ignored), one folder per group of
  identical chains, the others listed in ``duplicate_pdb_chains.txt`` (one line per group, its
  chain names separated by spaces);
- ``alignment_db``: OpenFold's sharded ``*.db`` files and their JSON super index
  ``{"<chain>": {"db": "<shard>.db", "files": [[name, start, size], ...]}}``; ``path`` is the index;
- ``colabfold``: a folder of ``*.a3m`` files, each holding one or more NUL-separated alignments.

Alignments are matched to the run's sequences by the hash of their query row (first row,
normalised as the chain table does: upper case, any letter outside the 20 amino acids ``X``),
never by chain name. :func:`build_index` reads every alignment file once and writes one row
per query hash: the group it came from, the chain names of that group and each file's SHA-256,
so a changed file changes exactly its hash's row. Bad groups (unreadable file, malformed or gapped query row,
files whose queries differ, a chain named twice) become one line each in the problems file and
the rest continues.

A copy of the last index beside it (``.index.tsv``) lets a rebuild skip every group whose files
kept their names, sizes and mtimes. CLI (checkpoint ``msa_import``)::

    python -m foldworks.msa.precomputed --sources '<JSON list of sources>' \\
        --out data/msa_import/index.tsv --problems data/msa_import/problems.tsv
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from foldworks import fsutil
from foldworks.constants import RESTYPES
from foldworks.ids import sequence_hash
from foldworks.logutil import setup_logging
from foldworks.msa.a3m import A3MError, a3m_records, match_columns, split_alignments
from foldworks.msa.stockholm import stockholm_to_a3m

LOG = logging.getLogger("foldworks.msa.precomputed")
LAYOUTS = ("openfold", "openproteinset", "alignment_db", "colabfold")
#: Files of an OpenFold alignment folder that are not MSAs of the chain.
SKIPPED_STEMS = ("uniprot_hits", "hmm_output")
ALIGNMENT_SUFFIXES = (".a3m", ".sto")
DUPLICATES_FILE = "duplicate_pdb_chains.txt"
INDEX_COLUMNS = ("sequence_hash", "source", "group", "length", "names", "files", "root", "stat")
PROBLEM_COLUMNS = ("source", "item", "reason")


@dataclass
class Group:
    """One alignment group of a source: ``name`` (e.g. ``1abc_A``), its ``members``
    ``[(file label, locator)]`` in reading order and the chain ``names`` sharing it."""

    name: str
    members: list[tuple[str, str]]
    names: list[str] = field(default_factory=list)


def normalize_query(aligned: str) -> str:
    """The chain-table form of an alignment's query row: match columns, upper case, letters
    outside the 20 amino acids as ``X``. Raises :class:`A3MError` if the row has gaps."""
    columns = match_columns(aligned).upper()
    if "-" in columns:
        raise A3MError("the query row has gaps")
    return "".join(c if c in RESTYPES else "X" for c in columns)


def _is_alignment(name: str) -> bool:
    return name.endswith(ALIGNMENT_SUFFIXES) and not name.startswith(SKIPPED_STEMS)


def _folder_groups(root: Path, sub: str) -> Iterator[Group]:
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = folder / sub if sub else folder
        names = sorted(p.name for p in files.iterdir() if p.is_file() and _is_alignment(p.name)) if files.is_dir() else []
        rel = f"{folder.name}/{sub + '/' if sub else ''}"
        yield Group(folder.name, [(name, rel + name) for name in names], [folder.name])


def read_duplicates(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    """``duplicate_pdb_chains.txt``: ``{chain: its group's chains}`` and one problem line per
    chain named on more than one line (its first line is kept)."""
    groups: dict[str, list[str]] = {}
    problems, first_line = [], {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        kept = []
        for chain in line.split():
            if chain in first_line:
                problems.append(f"{path.name} line {number}: chain {chain} is already listed on line {first_line[chain]}")
            else:
                first_line[chain] = number
                kept.append(chain)
        groups.update({chain: kept for chain in kept})
    return groups, problems


def openproteinset_groups(root: Path, duplicates: Path | None) -> tuple[list[Group], list[str]]:
    """Groups of an OpenProteinSet tree, each with the chains its duplicates line names."""
    dup, problems = read_duplicates(duplicates) if duplicates and duplicates.is_file() else ({}, [])
    groups = list(_folder_groups(root, "a3m"))
    owner: dict[str, str] = {}
    for group in groups:
        for chain in dict.fromkeys([group.name, *dup.get(group.name, [])]):
            if chain in owner:
                problems.append(f"chain {chain}: listed with {group.name} and with {owner[chain]} (kept there)")
                continue
            owner[chain] = group.name
            if chain not in group.names:
                group.names.append(chain)
    return groups, problems


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise A3MError(f"chain {repeated[0]} appears more than once in the index")
    return dict(pairs)


def alignment_db_groups(index_path: Path) -> list[Group]:
    """Groups of an OpenFold ``alignment_db`` super index (locators ``<shard>:<start>:<size>``)."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicate_keys)
    except ValueError as exc:
        raise A3MError(f"{index_path}: {exc}") from exc
    groups = []
    for chain in sorted(index):
        entry = index[chain]
        if not isinstance(entry, dict) or "db" not in entry or "files" not in entry:
            raise A3MError(f"{index_path}: entry {chain} lacks 'db' or 'files'")
        members = [(str(name), f"{entry['db']}:{int(start)}:{int(size)}")
                   for name, start, size in sorted(entry["files"]) if _is_alignment(str(name))]
        groups.append(Group(chain, members, [chain]))
    return groups


def colabfold_groups(root: Path) -> list[Group]:
    """Groups of a folder of ColabFold a3m files: one per NUL-separated alignment (locator
    ``<file>#<piece>``), named by the file stem, or ``<stem>#<piece>`` when a file holds several."""
    groups = []
    for path in sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(".a3m")):
        pieces = split_alignments(path.read_text(encoding="utf-8", errors="replace"))
        for number in range(len(pieces)):
            name = path.stem if len(pieces) == 1 else f"{path.stem}#{number}"
            groups.append(Group(name, [(path.name, f"{path.name}#{number}")], [name]))
    return groups


def source_groups(source: dict[str, Any]) -> tuple[list[Group], list[str]]:
    """The groups of a source and the problems found while listing them."""
    root, layout = Path(source["path"]), source["layout"]
    if not root.exists():
        raise FileNotFoundError(f"msa source {source['name']}: {root} does not exist")
    if layout == "openfold":
        return list(_folder_groups(root, "")), []
    if layout == "openproteinset":
        duplicates = Path(source["duplicates"]) if source.get("duplicates") else root / DUPLICATES_FILE
        return openproteinset_groups(root, duplicates)
    if layout == "alignment_db":
        return alignment_db_groups(root), []
    if layout == "colabfold":
        return colabfold_groups(root), []
    raise ValueError(f"msa source {source['name']}: layout {layout!r} is not one of {LAYOUTS}")


def source_root(source: dict[str, Any]) -> Path:
    """The folder locators are relative to (the index's folder for ``alignment_db``)."""
    path = Path(source["path"])
    return path.parent if source["layout"] == "alignment_db" else path


def read_member(root: Path, locator: str) -> bytes:
    """The bytes of one alignment: a file, a NUL-separated piece ``file#k`` or a slice ``db:start:size``."""
    if "#" in locator:
        name, piece = locator.rsplit("#", 1)
        pieces = split_alignments((root / name).read_text(encoding="utf-8", errors="replace"))
        return pieces[int(piece)].encode("utf-8")
    if locator.count(":") == 2 and locator.split(":", 1)[0].endswith(".db"):
        name, start, size = locator.split(":")
        with open(root / name, "rb") as handle:
            handle.seek(int(start))
            data = handle.read(int(size))
        if len(data) != int(size):
            raise A3MError(f"{name}: {size} bytes at offset {start} requested, the shard ends after {len(data)}")
        return data
    return (root / locator).read_bytes()


def member_records(label: str, data: bytes, where: str) -> list[tuple[str, str]]:
    """A3M records of one alignment file's bytes (Stockholm converted); errors name ``where``."""
    text = data.decode("utf-8", errors="replace")
    try:
        records = stockholm_to_a3m(text, where) if label.endswith(".sto") else a3m_records(text)
    except A3MError as exc:
        raise A3MError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from exc
    if not records:
        raise A3MError(f"{where}: no sequence records")
    return records


def group_row(source: dict[str, Any], group: Group) -> dict[str, Any]:
    """The index row of one group; :class:`A3MError` names the file whose query differs or is malformed."""
    if not group.members:
        raise A3MError(f"{group.name}: no alignment files")
    root, files, query, first = source_root(source), [], None, ""
    for label, locator in group.members:
        data = read_member(root, locator)
        records = member_records(label, data, locator)
        try:
            seq = normalize_query(records[0][1])
        except A3MError as exc:
            raise A3MError(f"{locator}: {exc}") from exc
        if query is not None and seq != query:
            raise A3MError(f"{locator}: query {sequence_hash(seq)} ({len(seq)} residues) differs from "
                           f"{first}'s query {sequence_hash(query)} ({len(query)} residues)")
        query, first = (seq, locator) if query is None else (query, first)
        files.append([label, locator, hashlib.sha256(data).hexdigest()])
    return {"sequence_hash": sequence_hash(query), "source": source["name"], "group": group.name,
            "length": len(query), "names": ",".join(group.names), "files": json.dumps(files, separators=(",", ":")), "root": str(root)}


def group_stat(source: dict[str, Any], group: Group) -> str:
    """16 hex characters over the names, sizes and mtimes of a group's files (and its names):
    equal to the last index's value means the group is unchanged and its row is reused."""
    root, digest = source_root(source), hashlib.sha256(",".join(group.names).encode())
    for label, locator in group.members:
        name = locator.rsplit("#", 1)[0] if "#" in locator else locator.split(":", 1)[0]
        stat = (root / name).stat()
        digest.update(f"{label}\t{locator}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def build_index(sources: Sequence[dict[str, Any]], previous: dict[str, dict[str, Any]] | None = None
                ) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """Index rows (one per query hash; the first source in config order, then the first group by
    name, wins) and problem rows ``(source, item, reason)`` of every source. A group whose
    :func:`group_stat` equals its row in ``previous`` (:func:`read_index`) is not read again."""
    rows: dict[str, dict[str, Any]] = {}
    problems: list[tuple[str, str, str]] = []
    known = {(row["source"], row["group"], row["stat"]): row for row in (previous or {}).values()}
    for source in sources:
        groups, listed = source_groups(source)
        problems += [(source["name"], "-", line) for line in listed]
        for group in groups:
            try:
                stat = group_stat(source, group)
                reused = known.get((source["name"], group.name, stat))
                row = ({**reused, "root": str(source_root(source))} if reused
                       else {**group_row(source, group), "stat": stat})
            except (A3MError, OSError, ValueError) as exc:
                problems.append((source["name"], group.name, " ".join(str(exc).split())))
                continue
            if isinstance(row["files"], list):
                row = {**row, "files": json.dumps(row["files"], separators=(",", ":"))}
            if row["sequence_hash"] in rows:
                kept = rows[row["sequence_hash"]]
                LOG.info("msa source %s: %s has the query of %s/%s (kept)", source["name"], group.name,
                         kept["source"], kept["group"])
                continue
            rows[row["sequence_hash"]] = row
    return [rows[h] for h in sorted(rows)], problems


def read_index(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """``{sequence hash: row}`` of an index file (``files`` decoded)."""
    out = {}
    with open(path, encoding="utf-8", newline="") as handle:
        lines = list(csv.reader(handle, delimiter="\t"))
    for fields in lines[1:]:
        row = dict(zip(INDEX_COLUMNS, fields))
        row["files"], row["length"] = json.loads(row["files"]), int(row["length"])
        out[row["sequence_hash"]] = row
    return out


def row_digest(row: dict[str, Any] | None) -> str:
    """16 hex characters over what an imported alignment depends on (source and file contents),
    ``absent`` for a hash the index does not hold."""
    if row is None:
        return "absent"
    files = row["files"] if isinstance(row["files"], list) else json.loads(row["files"])
    text = row["source"] + "\n" + "\n".join(f"{label}={digest}" for label, _, digest in files)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def source_stamp(source: dict[str, Any]) -> str:
    """16 hex characters over every file's path, size and mtime under a source: a changed,
    added or removed file makes the index rebuild (file contents then decide what reruns)."""
    path = Path(source["path"])
    digest = hashlib.sha256(f"{source['layout']}:{path}".encode())
    paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []
    if source["layout"] == "alignment_db" and path.is_file():
        paths += sorted(path.parent.glob("*.db"))
    for item in paths:
        stat = item.stat()
        digest.update(f"{item}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.precomputed", description=__doc__.split("\n")[0])
    parser.add_argument("--sources", required=True, help="JSON list of sources (name, layout, path[, duplicates])")
    parser.add_argument("--out", required=True, help="index TSV (data/msa_import/index.tsv)")
    parser.add_argument("--problems", required=True, help="problems TSV (data/msa_import/problems.tsv)")
    args = parser.parse_args(argv)
    setup_logging("msa_import")
    state = Path(args.out).with_name(f".{Path(args.out).name}")  # survives Snakemake removing --out
    try:
        previous = read_index(state) if state.is_file() else None
        rows, problems = build_index(json.loads(args.sources), previous)
    except (OSError, ValueError) as exc:
        LOG.error("msa import: %s", exc)
        return 1
    for source, item, reason in problems:
        LOG.error("msa source %s: %s: %s", source, item, reason)
    fsutil.write_tsv_atomic(args.problems, PROBLEM_COLUMNS, problems)
    table = [[row[c] for c in INDEX_COLUMNS] for row in rows]
    fsutil.write_tsv_atomic(state, INDEX_COLUMNS, table)
    fsutil.write_tsv_atomic(args.out, INDEX_COLUMNS, table)
    LOG.info("msa import: %d query sequences indexed, %d problems -> %s", len(rows), len(problems), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
