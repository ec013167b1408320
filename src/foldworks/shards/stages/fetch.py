"""Plan of one entry's fetch; input digest: the source and, for a local mirror, size and mtime of the
entry's candidate files (``<id>.cif.gz``/``.pdb.gz``, flat or divided ``<xy>/`` layout, either case).
A URL source has nothing local to compare, so a stored entry is refetched by deleting its record."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Sequence

from foldworks.ids import normalize_entry
from foldworks.shards import file_sha256, sha256_bytes
from foldworks.shards.run import Outcome, Plan
from foldworks.shards.stages.common import call_cli


def source_fingerprint(source: str, entry: str) -> str:
    """``path:size:mtime_ns`` of the first existing candidate file of ``entry`` in a local
    mirror (``<id>.cif.gz`` before ``.pdb.gz``; lower- then upper-case name; flat, then the
    divided ``<xy>/`` layout); ``url`` for a URL source, ``missing`` if there is none."""
    if "://" in source:
        return "url"
    return _fingerprint(_mirror_prefix(source), entry)


def _mirror_prefix(source: str) -> str:
    """``str(Path(source) / name)`` is ``prefix + name``: ``"m/"`` for ``m``, ``""`` for ``.``."""
    return str(Path(source) / "_")[:-1]


def _fingerprint(prefix: str, entry: str, divided_first: bool = False) -> str:
    """:func:`source_fingerprint` with plain strings and ``os.stat``: no ``Path`` per candidate
    (the fetch rule stamps every entry on every ``snakemake`` call, no-op included: 10,000 entries
    of a divided mirror took 0.65 s with ``pathlib``, 0.18 s this way). The strings equal the
    ``pathlib`` ones, so recorded params and manifest digests stay valid. ``divided_first``: try
    ``<xy>/`` before the flat name, the same result when the mirror holds no flat entry file
    (:func:`_flat_files`), with one ``stat`` per entry instead of two."""
    key = entry[1:3]
    for fmt in ("cif", "pdb"):
        for name in (f"{entry}.{fmt}.gz", f"{entry.upper()}.{fmt}.gz"):
            flat, divided = prefix + name, f"{prefix}{key}/{name}"
            for path in ((divided, flat) if divided_first else (flat, divided)):
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    return "missing"


@functools.lru_cache(maxsize=8)
def _flat_files(directory: str, mtime_ns: int) -> bool:
    """Whether ``directory`` itself holds a ``*.cif.gz`` / ``*.pdb.gz`` file (keyed by its mtime,
    which changes when a file is added, removed or renamed in it)."""
    return any(name.endswith((".cif.gz", ".pdb.gz")) for name in os.listdir(directory))


def _divided_only(prefix: str) -> bool:
    directory = prefix or "."
    try:
        return not _flat_files(directory, os.stat(directory).st_mtime_ns)
    except OSError:
        return False


def shard_source_stamp(source: str, entries: Sequence[str]) -> str:
    """The fetch rule's ``mirror`` param of one entry shard: 16 hex characters over its
    entries' :func:`source_fingerprint` (one ``stat`` per entry), so a changed, added or removed
    mirror file reruns exactly its shard; ``url`` for a URL source (nothing local to compare)."""
    if "://" in source:
        return "url"
    prefix = _mirror_prefix(source)
    divided_first = _divided_only(prefix)
    return sha256_bytes(*(_fingerprint(prefix, entry, divided_first) for entry in entries))[:16]


def fetch_plan(entry: str, source: str, params: str, records_dir: str, failures_dir: str,
               attempt: str) -> Plan:
    """Plan of one entry's fetch (``foldworks.fetch``): record ``<records_dir>/<id>.json``."""
    from foldworks.fetch.__main__ import main as fetch_main

    entry = normalize_entry(entry)
    record = Path(records_dir) / f"{entry}.json"

    def compute() -> Outcome:
        call_cli(fetch_main, ["--entry", entry, "--source", source, "--out", str(record.with_suffix(".cif.gz")),
                              "--record", str(record), "--params", params, "--failures-dir", failures_dir,
                              "--attempt-token", attempt], f"fetch {entry}")
        data = json.loads(record.read_text(encoding="utf-8"))
        status = "ok" if data.get("status") == "ok" else "transient" if data.get("transient") else "failed"
        return status, file_sha256(record), str(data.get("reason") or "")

    return Plan(sha256_bytes(source, source_fingerprint(source, entry)), [str(record)], compute,
                verify=lambda row: file_sha256(record) == row.output_sha256)
