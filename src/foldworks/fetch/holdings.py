"""wwPDB holdings: the list of released entries (with dates) and of removed (obsolete) entries.

Two files of ``https://files.wwpdb.org/pub/pdb/holdings/`` (the wwPDB inventory, updated with the
weekly release, Wednesdays 00:00 UTC), both gzipped JSON objects keyed by upper-case PDB ID:

* ``released_structures_last_modified_dates.json.gz``: ``{"1ABC": "2024-02-07T00:00:00+0000"}``,
  every released entry and when its mmCIF file last changed (not its first release date: that is
  earlier or equal). ~230,000 keys, ~1 MB.
* ``all_removed_entries.json.gz``: ``{"1ABC": {"status_code": "OBS", "obsolete_date": ...,
  "superseded_by": "2XYZ" or ["2XYZ", ...], "release_date": ..., "title": ...}}``.

``current_file_holdings.json.gz`` (every file path of every content type per entry) is not used:
it is many times larger, parsing it on every workflow load would cost seconds, and every released
entry has an mmCIF file anyway.

Cache and refresh policy: the files are kept, as downloaded, in ``data/raw/holdings/`` with a
``<name>.meta.json`` sidecar (url, ``fetched_at`` UTC, sha256, key count). Loading the workflow
reads the cache and downloads only when a file is missing or its ``fetched_at`` is older than
``pdb.holdings_max_age_days`` (default 7: the release cycle), so a ``snakemake -n`` touches the
network at most once a week; ``null`` never refreshes on its own. ``make update-holdings``
(``python -m foldworks.fetch.holdings --refresh``) refreshes now. The age is taken from the
sidecar, not the file's mtime, which a ``dvc pull`` or ``git clone`` resets. A failed refresh with
a cached copy keeps the copy (logged); without one it is an error naming the URL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from foldworks import fsutil
from foldworks.fetch.http import FetchError, RetryPolicy, http_get

LOG = logging.getLogger(__name__)

DEFAULT_URL = "https://files.wwpdb.org/pub/pdb/holdings"
RELEASED = "released_structures_last_modified_dates.json.gz"
REMOVED = "all_removed_entries.json.gz"
FILES = (RELEASED, REMOVED)
CACHE_DIR = "data/raw/holdings"
DEFAULT_MAX_AGE_DAYS = 7.0
MAX_BYTES = 200_000_000
#: ``1ABC`` or an extended ID ``pdb_00001abc`` -> group 1 = the 4-character ID
_KEY = re.compile(r"^(?:pdb_0000)?([0-9][a-z0-9]{3})$")
_KEYS4 = re.compile(r"^[0-9][a-z0-9]{3}$", re.MULTILINE)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_DATES10 = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.MULTILINE)


class HoldingsError(RuntimeError):
    """The holdings cannot be downloaded or read; the message names the URL or file."""


@dataclass(frozen=True)
class RemovedEntry:
    """An obsolete/removed entry: wwPDB status code (``OBS``, ``TRSF``, ...), date removed
    (``YYYY-MM-DD`` or ``""``) and the entries that superseded it (lower case)."""

    entry: str
    status: str
    obsolete_date: str
    superseded_by: tuple[str, ...] = ()


@dataclass
class Holdings:
    """``released``: ``{entry: last-modified YYYY-MM-DD}``; ``removed``: ``{entry: RemovedEntry}``."""

    released: dict[str, str] = field(default_factory=dict)
    removed: dict[str, RemovedEntry] = field(default_factory=dict)
    fetched_at: str = ""

    def replacements(self, entry: str, max_depth: int = 10) -> list[str]:
        """Current (released) entries replacing ``entry``, following chains of obsolete
        successors (``A`` -> obsolete ``B`` -> ``C``); ``[]`` when none is known."""
        found: list[str] = []
        frontier, seen = [entry], {entry}
        for _ in range(max_depth):
            successors = [s for e in frontier if e in self.removed for s in self.removed[e].superseded_by]
            frontier = [s for s in successors if s not in seen]
            seen.update(frontier)
            found.extend(s for s in frontier if s not in self.removed)
            if not frontier:
                break
        return sorted(set(found))

    def removed_reason(self, entry: str) -> str:
        """A one-line report reason for a removed entry, naming its replacement when known."""
        info = self.removed[entry]
        when = f" on {info.obsolete_date}" if info.obsolete_date else ""
        replaced = self.replacements(entry)
        tail = f"; superseded by {', '.join(replaced)} (add it to pdb.entries to use it)" if replaced else \
            "; no replacement entry"
        return f"entry {entry} is obsolete in the wwPDB holdings (status {info.status}{when}){tail}"


def _entry_key(key: object) -> str | None:
    match = _KEY.match(str(key).strip().lower())
    return match.group(1) if match else None


def _load_json_object(data: bytes, label: str) -> dict:
    try:
        obj = json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError) as exc:
        raise HoldingsError(f"holdings file {label}: not gzipped JSON ({type(exc).__name__}: {exc})") from exc
    if not isinstance(obj, dict) or not obj:
        raise HoldingsError(f"holdings file {label}: expected a non-empty JSON object keyed by PDB ID")
    return obj


def parse_released(data: bytes, label: str = RELEASED) -> dict[str, str]:
    """``{entry: YYYY-MM-DD}`` from the released-structures file (``""`` for an unreadable date);
    keys that are not PDB IDs are skipped."""
    released: dict[str, str] = {}
    obj = _load_json_object(data, label)
    keys = "\n".join(str(key).lower() for key in obj)
    if len(_KEYS4.findall(keys)) == len(obj):  # fast path: all plain 4-character IDs (~0.5 s at 230,000)
        released = {str(key).lower(): str(value)[:10] for key, value in obj.items()}
        if len(_DATES10.findall("\n".join(released.values()))) != len(released):
            released = {entry: date if _DATE.match(date) else "" for entry, date in released.items()}
    else:
        for key, value in obj.items():
            entry = _entry_key(key)
            if entry is not None:
                text = str(value)
                released[entry] = text[:10] if _DATE.match(text) else ""
    if not released:
        raise HoldingsError(f"holdings file {label}: no PDB IDs among its keys")
    return released


def parse_removed(data: bytes, label: str = REMOVED) -> dict[str, RemovedEntry]:
    """``{entry: RemovedEntry}`` from the removed-entries file."""
    removed: dict[str, RemovedEntry] = {}
    for key, value in _load_json_object(data, label).items():
        entry = _entry_key(key)
        if entry is None:
            continue
        info = value if isinstance(value, dict) else {}
        successors = info.get("superseded_by") or []
        successors = [successors] if isinstance(successors, str) else list(successors)
        date = str(info.get("obsolete_date") or "")
        removed[entry] = RemovedEntry(
            entry=entry, status=str(info.get("status_code") or "removed"),
            obsolete_date=date[:10] if _DATE.match(date) else "",
            superseded_by=tuple(s for s in (_entry_key(x) for x in successors) if s))
    return removed


def _meta_path(cache_dir: Path, name: str) -> Path:
    return cache_dir / f"{name}.meta.json"


def _read_meta(cache_dir: Path, name: str) -> dict:
    try:
        meta = json.loads(_meta_path(cache_dir, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) and (cache_dir / name).is_file() else {}


def age_days(meta: dict, now: dt.datetime | None = None) -> float | None:
    """Days since the sidecar's ``fetched_at``; None if unknown."""
    try:
        fetched = dt.datetime.fromisoformat(str(meta["fetched_at"]))
    except (KeyError, ValueError):
        return None
    now = now or dt.datetime.now(dt.timezone.utc)
    return (now - fetched).total_seconds() / 86400.0


def _download(location: str, name: str, policy: RetryPolicy) -> bytes:
    """Bytes of ``<location>/<name>``: an http(s) URL prefix or a local directory."""
    if "://" in location:
        try:
            return http_get(f"{location.rstrip('/')}/{name}", policy, MAX_BYTES).data
        except FetchError as exc:
            raise HoldingsError(f"holdings: cannot download {location.rstrip('/')}/{name}: {exc}") from exc
    path = Path(location) / name
    try:
        return path.read_bytes()
    except OSError as exc:
        raise HoldingsError(f"holdings: cannot read {path}: {exc}") from exc


def refresh_file(location: str, name: str, cache_dir: Path, policy: RetryPolicy) -> str:
    """Download one file, check it parses, store it and its sidecar atomically; returns a log line."""
    data = _download(location, name, policy)
    count = len(parse_released(data, name) if name == RELEASED else parse_removed(data, name))
    fetched_at = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    fsutil.write_bytes_atomic(cache_dir / name, data)
    fsutil.write_json_atomic(_meta_path(cache_dir, name), {
        "url": f"{location.rstrip('/')}/{name}", "fetched_at": fetched_at,
        "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "entries": count})
    return f"holdings: {name} refreshed from {location} ({count} entries)"


def ensure_cached(location: str, cache_dir: str | Path = CACHE_DIR, max_age_days: float | None = DEFAULT_MAX_AGE_DAYS,
                  policy: RetryPolicy | None = None, force: bool = False) -> list[str]:
    """Refresh the cached holdings files that are missing, older than ``max_age_days`` (None:
    never by age) or from another location; ``force`` refreshes both. Returns log lines.

    A failed refresh keeps an existing cached copy (noted in the log lines) unless ``force``:
    an explicit refresh that fails raises (the cached files stay untouched)."""
    cache_dir = Path(cache_dir)
    policy = policy or RetryPolicy(timeout_s=60.0, retries=2, backoff_s=2.0)
    messages: list[str] = []
    for name in FILES:
        meta = _read_meta(cache_dir, name)
        age = age_days(meta)
        same_place = meta.get("url") == f"{location.rstrip('/')}/{name}"
        stale = force or not meta or not same_place or (
            max_age_days is not None and (age is None or age > max_age_days))
        if not stale:
            continue
        try:
            messages.append(refresh_file(location, name, cache_dir, policy))
        except HoldingsError as exc:
            if not meta or force:
                raise
            messages.append(f"{exc}; keeping the cached copy fetched {meta.get('fetched_at')}")
    return messages


def load_holdings(cache_dir: str | Path = CACHE_DIR) -> Holdings:
    """Read both cached files (see :func:`ensure_cached`)."""
    cache_dir = Path(cache_dir)
    try:
        released_bytes, removed_bytes = (cache_dir / RELEASED).read_bytes(), (cache_dir / REMOVED).read_bytes()
    except OSError as exc:
        raise HoldingsError(f"holdings cache {cache_dir}: {exc} (run `make update-holdings`)") from exc
    return Holdings(released=parse_released(released_bytes), removed=parse_removed(removed_bytes),
                    fetched_at=str(_read_meta(cache_dir, RELEASED).get("fetched_at", "")))


def main(argv: list[str] | None = None) -> int:
    """``python -m foldworks.fetch.holdings --refresh [--url URL] [--cache-dir DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.fetch.holdings", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="holdings URL prefix or local directory")
    parser.add_argument("--cache-dir", default=CACHE_DIR)
    parser.add_argument("--refresh", action="store_true", help="download now, whatever the cache's age")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        for line in ensure_cached(args.url, args.cache_dir, force=args.refresh):
            LOG.info(line)
        holdings = load_holdings(args.cache_dir)
    except HoldingsError as exc:
        LOG.error("%s", exc)
        return 1
    LOG.info("holdings: %d released, %d removed entries (fetched %s)", len(holdings.released),
             len(holdings.removed), holdings.fetched_at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
