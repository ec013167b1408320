"""Helpers of ``workflow/rules/msa.smk`` (kept out of the Snakefile, importable and testable).

Pure functions of the resolved ``msa:`` config (:func:`foldworks.msa.config.resolve_msa_config`)
and of the chain table; no Snakemake import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from foldworks.msa.config import is_external


def record_path(name: str) -> str:
    """The record of database ``name`` (``data/msa_db/<name>.json``)."""
    return f"data/msa_db/{name}.json"


def record_paths(databases: Iterable[dict[str, Any]]) -> list[str]:
    """Records of every database, in search order."""
    return [record_path(db["name"]) for db in databases]


def name_regex(databases: Iterable[dict[str, Any]], external: bool) -> str:
    """Wildcard constraint matching exactly the built (or the existing) databases' names."""
    names = [db["name"] for db in databases if is_external(db) == external]
    return "|".join(names) if names else "(?!)"


def external_stamp(db: dict[str, Any]) -> str:
    """``path:size:mtime_ns`` of an existing database's files: a change re-fingerprints it
    (the fingerprint, not this stamp, decides whether alignments rerun)."""
    paths = []
    if db.get("prefix"):
        paths += [f"{db['prefix']}_{kind}.{ext}" for kind in ("a3m", "cs219") for ext in ("ffdata", "ffindex")]
    if db.get("mmseqs_db"):
        paths += [f"{db['mmseqs_db']}{suffix}" for suffix in ("", ".index", ".dbtype")]
    stamp = []
    for path in paths:
        stat = Path(path).stat() if Path(path).exists() else None
        stamp.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}" if stat else f"{path}:missing")
    return ";".join(stamp)


def external_args(db: dict[str, Any]) -> list[str]:
    """``--prefix P`` / ``--mmseqs-db D`` arguments of ``build_db --external``."""
    args = []
    for flag, key in (("--prefix", "prefix"), ("--mmseqs-db", "mmseqs_db")):
        if db.get(key):
            args += [flag, str(db[key])]
    return args


def build_args(db: dict[str, Any]) -> list[str]:
    """``--mode`` (and cluster) arguments of ``build_db`` for a built database."""
    if db["mode"] == "clustered":
        return ["--mode", "clustered", "--min-seq-id", str(db["cluster"]["min_seq_id"]),
                "--coverage", str(db["cluster"]["coverage"])]
    return ["--mode", "single"]


def shard_queries(table: Any, shard: str) -> list[str]:
    """Query FASTAs of the passed chains' unique sequences whose hash starts with ``shard``."""
    hashes = sorted(set(table.loc[table["passed_filters"], "sequence_hash"]))
    return [f"data/sequences/{h[:2]}/{h}.fasta" for h in hashes if h.startswith(shard)]


def read_import_digests(path: str) -> dict[str, str]:
    """``{sequence hash: row digest}`` of the precomputed-alignment index (empty if absent)."""
    from foldworks.msa.precomputed import read_index, row_digest

    if not Path(path).is_file():
        return {}
    return {seq_hash: row_digest(row) for seq_hash, row in read_index(path).items()}


def import_shard_digest(digests: dict[str, str], hashes: Iterable[str] | str) -> str:
    """16 hex characters over the index rows of an msa shard's hashes (a list or one comma-joined
    string; ``absent`` for a hash the index lacks): the msa rule's param, so a changed alignment
    reruns only its shard."""
    import hashlib

    items = hashes.split(",") if isinstance(hashes, str) else hashes
    lines = sorted(f"{h}={digests.get(h, 'absent')}" for h in set(items) if h)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


def source_stamps(sources: Iterable[dict[str, Any]]) -> list[str]:
    """``name:stamp`` of every precomputed source (:func:`foldworks.msa.precomputed.source_stamp`)."""
    from foldworks.msa.precomputed import source_stamp

    return [f"{source['name']}:{source_stamp(source)}" for source in sources]
