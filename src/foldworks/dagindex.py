"""What the workflow reads from the chain table and the MSA index to build its DAG, cached on disk.

Every ``snakemake`` call, the no-op check included, needs per shard: the features shard's items
(``<entry>_<chain>:<sequence hash>``), the msa shard's sequence hashes, the entry shards holding a
split's chains, and each features shard's ``msa`` digest (:func:`foldworks.msa.index.shard_digest`).
Building them from ``data/chains.parquet`` (690,000 chains at 230,000 entries) and
``data/msa/index.tsv`` took ~3.5 s + ~1 s per call; both files change only when their
checkpoint reruns, so the result is kept in ``.snakemake/foldworks/*.json`` under a key of the
source files' path, size and mtime (and the msa shard width), and loaded in ~0.1 s while the key
matches. A stale, unreadable or foreign cache file is rebuilt, never trusted: the key is checked
on load. Not versioned, not an output; deleting ``.snakemake/`` only costs one rebuild.

Not part of any stage's code hash (:func:`foldworks.provenance.code_hash`): editing this module
recomputes no item.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping

from foldworks import fsutil
from foldworks.shards import ENTRY_SHARD_CHARS, entry_key

CACHE_DIR = ".snakemake/foldworks"
#: Bumped when the cached layout changes (old cache files are then rebuilt).
VERSION = 1


@dataclass(frozen=True, eq=False)  # hashed by identity (an lru_cache key in the workflow)
class ChainShards:
    """The passed chains of a chain table, by shard; lists are comma-joined, sorted strings."""

    #: entry shard -> "<target>:<sequence hash>,..." (the features shard's items)
    features: dict[str, str]
    #: split -> sorted entry shards with a passed chain of that split
    shards_of_split: dict[str, list[str]]
    #: msa shard (hash prefix) -> "hash,..." (unique)
    msa: dict[str, str]
    #: entry shard -> "hash,..." (unique sequence hashes of its passed chains; its msa digest)
    hashes: dict[str, str]


def build_chain_shards(table_path: str | Path, msa_chars: int, entry_chars: int = ENTRY_SHARD_CHARS) -> ChainShards:
    """:class:`ChainShards` of the passed chains of ``table_path`` (columns ``entry``, ``chain``,
    ``sequence_hash``, ``split``, ``passed_filters``); msa shards keyed by ``msa_chars`` characters,
    entry shards by ``entry_chars`` (foldworks.shards.entry_shard)."""
    import pyarrow.parquet as pq  # only when (re)building: ~0.7 s to import

    table = pq.read_table(table_path, columns=["entry", "chain", "sequence_hash", "split", "passed_filters"])
    table = table.filter(table["passed_filters"].cast("bool"))
    entries, chains, hashes, splits = (table[name].cast("string").to_pylist()
                                       for name in ("entry", "chain", "sequence_hash", "split"))
    features: dict[str, list[str]] = {}
    of_split: dict[str, set[str]] = {}
    msa: dict[str, set[str]] = {}
    by_entry_shard: dict[str, set[str]] = {}
    for entry, chain, seq_hash, split in zip(entries, chains, hashes, splits):
        key = entry_key(entry, entry_chars)
        features.setdefault(key, []).append(f"{entry}_{chain}:{seq_hash}")
        of_split.setdefault(split, set()).add(key)
        by_entry_shard.setdefault(key, set()).add(seq_hash)
        msa.setdefault(seq_hash[:msa_chars], set()).add(seq_hash)
    return ChainShards(
        features={key: ",".join(sorted(features[key])) for key in sorted(features)},
        shards_of_split={split: sorted(keys) for split, keys in sorted(of_split.items())},
        msa={key: ",".join(sorted(msa[key])) for key in sorted(msa)},
        hashes={key: ",".join(sorted(by_entry_shard[key])) for key in sorted(by_entry_shard)},
    )


def file_key(*paths: str | Path) -> list[str]:
    """What identifies the content of ``paths`` for the cache: absolute path, size, mtime (ns)."""
    out = []
    for path in paths:
        stat = os.stat(path)
        out.append(f"{os.path.abspath(path)}:{stat.st_size}:{stat.st_mtime_ns}")
    return out


def cached(name: str, key: list[str], build: Callable[[], dict], cache_dir: str | Path = CACHE_DIR) -> dict:
    """``build()``'s JSON-able result, kept in ``<cache_dir>/<name>.json`` under ``key``: loaded when
    the stored key equals ``key``, else rebuilt and stored (atomically; a failed write is ignored,
    as is an unreadable file)."""
    path = Path(cache_dir) / f"{name}.json"
    full_key = [f"v{VERSION}", *key]
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") == full_key:
            return stored["value"]
    except (OSError, ValueError, AttributeError, KeyError):
        pass
    value = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fsutil.write_bytes_atomic(path, json.dumps({"key": full_key, "value": value}).encode("utf-8"))
    except OSError:
        pass  # a read-only workdir only loses the cache
    return value


def load_chain_shards(table_path: str | Path, msa_chars: int, cache_dir: str | Path = CACHE_DIR, *,
                      entry_chars: int = ENTRY_SHARD_CHARS) -> ChainShards:
    """:func:`build_chain_shards`, cached under the table's path, size and mtime and the key lengths."""
    value = cached("chain_shards", [*file_key(table_path), f"msa_chars={msa_chars}", f"entry_chars={entry_chars}"],
                   lambda: asdict(build_chain_shards(table_path, msa_chars, entry_chars)), cache_dir)
    return ChainShards(**value)


def msa_digests(index_path: str | Path, shards: ChainShards, table_path: str | Path, msa_chars: int,
                digest: Callable[[Mapping[str, str], list[str]], str],
                read_rows: Callable[[str | Path], Mapping[str, str]],
                cache_dir: str | Path = CACHE_DIR, *, entry_chars: int = ENTRY_SHARD_CHARS) -> dict[str, str]:
    """``{entry shard: digest(index rows, its hashes)}`` for every features shard, cached under the
    index's and the table's keys (``shards`` must be the table's :class:`ChainShards`)."""
    def build() -> dict[str, str]:
        rows = read_rows(index_path)
        return {key: digest(rows, hashes.split(",")) for key, hashes in shards.hashes.items()}

    return cached("msa_digests", [*file_key(index_path, table_path), f"msa_chars={msa_chars}",
                                  f"entry_chars={entry_chars}"], build, cache_dir)


def normalized_entry_list_digest(entries: list[str]) -> str:
    """:func:`foldworks.entrylist.entry_list_digest` of already normalised IDs (the workflow's
    ``ENTRIES``) without normalising each again: the same digest (the ``entry_list`` rule's
    param), ~0.8 s less per ``snakemake`` call at 230,000 entries."""
    data = "".join(f"{entry}\n" for entry in sorted(set(entries))).encode("ascii")
    return hashlib.sha256(data).hexdigest()
