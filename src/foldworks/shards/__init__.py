"""Shards, the workflow's unit of work at PDB scale, and their manifests.

Entries are grouped by the wwPDB divided-layout key (the middle two characters of the ID,
``1abc`` -> ``ab``: 36**2 = 1,296 possible keys, ~180 entries each at ~230,000 entries; the
workflow's ``pdb.shard_chars: 2``) or, for smaller runs, by its first character (``1abc`` -> ``a``:
at most 36 shards, each one divided-layout directory group; ``pdb.shard_chars: 1``) or into one
shard ``all`` (``pdb.shard_chars: 0``, runs of a few hundred entries) for
``fetch``, ``parse`` (one Snakemake job per shard running both: rule ``ingest``) and
``features``; unique sequences by the first :data:`SEQ_SHARD_CHARS`
hex characters of their hash for ``msa`` (256 shards, ~470 sequences each at ~120,000; the
workflow's ``msa.shard_chars``; see README "Shards"). One Snakemake job per shard loops over the shard's items.

Inside a shard, work is content-addressed: the shard's manifest ``data/<stage>/shards/<key>.tsv``
holds one row per item (``item``, ``status``, ``input_sha256``, ``stamp``, ``output_sha256``,
``reason``); an item whose input digest and stamp (stage code hash + params hash) are unchanged,
and whose outputs still exist, is not recomputed and its files are not touched. The manifest is
rewritten (atomically) only when its content changes. Per-item files keep their formats and
paths (``data/raw/{entry}.json``, ``data/parsed/{entry}.npz``, ``data/msa/<xx>/<hash>.a3m``,
``data/features/{target}.npz``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from foldworks import fsutil
from foldworks.ids import InvalidIdentifier, SEQUENCE_HASH_PATTERN, normalize_entry

#: Characters of the divided-layout key that name an entry shard (the default of
#: ``pdb.shard_chars``): 2 = the wwPDB layout (1,296 shards), 1 = its first character (36 shards),
#: 0 = one shard, :data:`ALL_ENTRIES_KEY`, holding every entry (runs of a few hundred entries).
ENTRY_SHARD_CHARS = 2
ALL_ENTRIES_KEY = "all"
#: Hex characters of the sequence hash that name an msa shard (16**2 = 256 shards), the default
#: of ``msa.shard_chars``.
SEQ_SHARD_CHARS = 2
COLUMNS = ("item", "status", "input_sha256", "stamp", "output_sha256", "reason")
#: Statuses: ``ok``; ``failed`` (permanent, cached like a result); ``transient`` (retried when
#: the shard runs next; fetch only).
STATUSES = ("ok", "failed", "transient")
ATTEMPT_PREFIX = "# attempt="


def entry_shard(entry: str, chars: int = ENTRY_SHARD_CHARS) -> str:
    """The entry shard of a PDB ID: the first ``chars`` of its middle two characters, the
    divided-layout key (``1abc`` -> ``ab``; ``a`` with ``chars=1``; :data:`ALL_ENTRIES_KEY` with 0)."""
    _check_entry_chars(chars)
    return entry_key(normalize_entry(entry), chars)


def entry_key(entry: str, chars: int) -> str:
    """:func:`entry_shard` of an already normalised ID, unchecked (hot loops over every entry)."""
    return entry[1:1 + chars] if chars else ALL_ENTRIES_KEY


def key_chars(key: str) -> int:
    """Length of a shard key (entry or msa): 0 for the one-shard key :data:`ALL_ENTRIES_KEY`."""
    return 0 if key == ALL_ENTRIES_KEY else len(key)


def _check_entry_chars(chars: int) -> None:
    if chars not in (0, 1, 2):
        raise ValueError(f"entry shard characters must be 0, 1 or 2, not {chars!r}")


def sequence_shard(seq_hash: str, chars: int = SEQ_SHARD_CHARS) -> str:
    """The msa shard of a sequence hash: its first ``chars`` hex characters."""
    if not SEQUENCE_HASH_PATTERN.fullmatch(seq_hash):
        raise InvalidIdentifier(f"sequence hash {seq_hash!r}: expected 20 lower-case hex chars")
    return seq_hash[:chars]


def group_entries(entries: Iterable[str], chars: int = ENTRY_SHARD_CHARS) -> dict[str, list[str]]:
    """``{shard key: sorted entries}`` for normalised entry IDs, keys (``chars`` long) sorted."""
    _check_entry_chars(chars)
    shards: dict[str, list[str]] = {}
    for entry in entries:
        shards.setdefault(entry_key(entry, chars), []).append(entry)
    return {key: sorted(shards[key]) for key in sorted(shards)}


#: Entries above which a short entry key is worth a warning, per key length (0: one shard).
SHORT_KEY_ENTRY_LIMITS = {0: 1_000, 1: 10_000}


def shard_size_note(n_entries: int, chars: int) -> str | None:
    """A warning when a short entry key (``pdb.shard_chars`` 0 or 1) is used for a large run: one
    shard, or at most 36, hold every entry, so a shard job runs long and a one-entry change reruns
    (re-checks) a large shard. None otherwise."""
    limit = SHORT_KEY_ENTRY_LIMITS.get(chars)
    if limit is None or n_entries <= limit:
        return None
    shards = "one shard" if chars == 0 else f"at most 36 shards (~{n_entries // 36:,} each)"
    longer = "2" if chars == 1 else "1 or 2"
    return (f"pdb.shard_chars: {chars} puts {n_entries:,} entries into {shards};"
            f" above {limit:,} entries use pdb.shard_chars: {longer} (README Shards)")


def manifest_path(stage_dir: str, key: str) -> str:
    """``data/<stage>/shards/<key>.tsv`` for ``stage_dir`` ``data/<stage>``."""
    return f"{stage_dir}/shards/{key}.tsv"


def sha256_bytes(*parts: bytes | str) -> str:
    """SHA-256 (hex) over the parts, each length-prefixed (so ("ab", "c") != ("a", "bc"))."""
    chunks = []  # one update over the joined bytes: the same digest, ~2x faster for many parts
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        chunks.append(b"%d:" % len(data))
        chunks.append(data)
    return hashlib.sha256(b"".join(chunks)).hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes; ``"missing"`` when it does not exist."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return "missing"


@dataclass(frozen=True)
class Row:
    """One item of a shard manifest."""

    item: str
    status: str
    input_sha256: str
    stamp: str
    output_sha256: str
    reason: str = ""

    def line(self) -> str:
        reason = " ".join(self.reason.replace("\t", " ").split())[:300]
        return "\t".join((self.item, self.status, self.input_sha256, self.stamp, self.output_sha256, reason))


def _parse_lines(text: str) -> tuple[str, dict[str, Row]]:
    attempt, rows = "", {}
    for line in text.splitlines():
        if line.startswith(ATTEMPT_PREFIX):
            attempt = line[len(ATTEMPT_PREFIX):].strip()
            continue
        fields = line.split("\t")
        if not line or line.startswith("#") or fields[0] == "item" or len(fields) < 5:
            continue
        rows[fields[0]] = Row(*fields[:5], fields[5] if len(fields) > 5 else "")
    return attempt, rows


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Row]:
    """``{item: Row}`` of a manifest (empty if it does not exist)."""
    try:
        return _parse_lines(Path(path).read_text(encoding="utf-8"))[1]
    except FileNotFoundError:
        return {}


def read_attempt(path: str | os.PathLike[str]) -> tuple[str, dict[str, Row]]:
    """(stored attempt token, rows) of a manifest; ``("", {})`` if it does not exist."""
    try:
        return _parse_lines(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "", {}


def manifest_text(rows: Iterable[Row], attempt: str = "") -> str:
    """The manifest file's text: optional attempt line, header, rows sorted by item."""
    lines = [f"{ATTEMPT_PREFIX}{attempt}"] if attempt else []
    lines.append("\t".join(COLUMNS))
    lines += [row.line() for row in sorted(rows, key=lambda r: r.item)]
    return "\n".join(lines) + "\n"


def write_manifest(path: str | os.PathLike[str], rows: Iterable[Row], attempt: str = "") -> bool:
    """Write the manifest atomically if its content changes; True if it was (re)written."""
    text = manifest_text(rows, attempt)
    target = Path(path)
    try:
        if target.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    fsutil.write_bytes_atomic(target, text.encode("utf-8"))
    return True


def fetch_attempt_token(path: str | os.PathLike[str]) -> str:
    """The fetch rule's ``attempt`` param of one entry shard (Snakemake's params trigger).

    The token the shard last ran with (``first`` before any run) while no item is ``transient``:
    unchanged, so nothing reruns. With a transient failure (network, 5xx after every retry) a
    new token, derived from those rows (their records hold the failure time), so the next
    ``snakemake`` run reruns that shard, which refetches only the transient items."""
    attempt, rows = read_attempt(path)
    transient = sorted(row.item + row.output_sha256 for row in rows.values() if row.status == "transient")
    if transient:
        return "retry-" + sha256_bytes(*transient)[:16]
    return attempt or "first"


def stamp_of(code: str, params: str, *extra: str) -> str:
    """An item's stamp: 16 hex characters over the stage's code hash, params and any extra."""
    return sha256_bytes(code, params, *extra)[:16]


def rows_by_item(manifests: Iterable[str | os.PathLike[str]]) -> dict[str, Row]:
    """Every row of several manifests (upstream shards), keyed by item."""
    merged: dict[str, Row] = {}
    for path in manifests:
        merged.update(read_manifest(path))
    return merged


def unchanged(old: Mapping[str, Row], item: str, input_sha256: str, stamp: str) -> Row | None:
    """The old row of ``item`` if its input digest and stamp match and it is not transient."""
    row = old.get(item)
    if row is None or row.status == "transient" or row.input_sha256 != input_sha256 or row.stamp != stamp:
        return None
    return row
