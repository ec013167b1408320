"""Fetch one PDB entry from an https URL prefix or a local mirror directory.

``fetch_entry`` tries ``<ID>.cif.gz`` then ``<ID>.pdb.gz`` (a local mirror may be flat or in the
wwPDB divided layout ``<xy>/<id>.cif.gz``: :mod:`foldworks.fetch.mirror`); it validates the bytes (see
:mod:`foldworks.fetch.validate`), converts legacy PDB to mmCIF, and only then writes
``data/raw/{entry}.cif.gz`` and the record JSON (``status: ok``) atomically. A failure raises
:class:`FetchError` and leaves no file behind; :func:`failed_record` is the record the CLI then
writes instead (``status: failed``, one-line ``reason``, ``transient``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from foldworks import fsutil
from foldworks.fetch import convert, mirror, validate
from foldworks.fetch.http import FetchError, NotFound, RetryPolicy, TransientError, http_get
from foldworks.ids import normalize_entry

LOG = logging.getLogger(__name__)

FORMATS = ("cif", "pdb")  # preference order
ALLOWED_SCHEMES = ("http", "https")


@dataclass(frozen=True)
class FetchParams:
    """Rule parameters (``config: fetch``): seconds, attempt counts and byte limits."""

    timeout_s: float = 60.0
    retries: int = 4
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    max_bytes: int = 500_000_000
    max_text_bytes: int = 2_000_000_000

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None) -> "FetchParams":
        """Build from a config slice; unknown keys or negative values raise ``ValueError``."""
        params = dict(params or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unknown fetch parameter(s) {unknown}; known: {sorted(known)}")
        obj = cls(**params)
        if obj.timeout_s <= 0 or obj.retries < 0 or obj.backoff_s < 0 or obj.max_bytes <= 0 or obj.max_text_bytes <= 0:
            raise ValueError(f"fetch parameters out of range: {obj}")
        return obj

    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.timeout_s, int(self.retries), self.backoff_s, self.max_backoff_s)


@dataclass
class FetchResult:
    """What ``fetch_entry`` did: the record written plus HTTP attempts per URL tried."""

    record: dict[str, Any]
    attempts: dict[str, int] = field(default_factory=dict)


def classify_source(source: str) -> tuple[str, str]:
    """``('url', prefix)`` for http(s) prefixes, ``('dir', path)`` for local directories.

    Any other URL scheme (``ftp:``, ``file:``, ...) and a missing directory raise ``ValueError``.
    """
    if "://" in source:
        parts = urllib.parse.urlsplit(source)
        if parts.scheme.lower() not in ALLOWED_SCHEMES or not parts.netloc:
            raise ValueError(f"source {source!r}: only http:// and https:// URLs (or a local directory) are allowed")
        return "url", source.rstrip("/")
    path = Path(source)
    if not path.is_dir():
        raise ValueError(f"source {source!r}: not an http(s) URL and not an existing directory")
    return "dir", str(path)


def _read_local(directory: str, entry: str, fmt: str, max_bytes: int) -> tuple[str, bytes] | None:
    """Bytes of the entry's ``fmt`` file in a flat or wwPDB divided mirror (names and order:
    :func:`foldworks.fetch.mirror.candidate_paths`), or None if absent."""
    for path in mirror.candidate_paths(directory, entry, fmt):
        if path.is_file():
            try:
                size = path.stat().st_size
                if size > max_bytes:
                    raise FetchError(f"entry {entry}: {path} is {size} bytes, over the limit of {max_bytes} bytes")
                return str(path), path.read_bytes()
            except OSError as exc:  # an unreadable mirror (NFS hiccup, permissions) may recover
                raise TransientError(f"entry {entry}: cannot read {path}: {exc}") from exc
    return None


def _download(entry: str, kind: str, base: str, params: FetchParams, attempts: dict[str, int]) -> tuple[str, str, bytes]:
    """Return ``(format, url_or_path, bytes)`` of the first available format."""
    for fmt in FORMATS:
        if kind == "dir":
            found = _read_local(base, entry, fmt, params.max_bytes)
            if found is not None:
                return fmt, found[0], found[1]
            continue
        url = f"{base}/{entry.upper()}.{fmt}.gz"
        try:
            download = http_get(url, params.policy(), params.max_bytes)
        except NotFound:
            attempts[url] = 1
            LOG.info("entry %s: %s not found, trying the next format", entry, url)
            continue
        except FetchError as exc:  # keep the class: TransientError stays retryable
            raise type(exc)(f"entry {entry}: {exc}") from exc
        attempts[url] = download.attempts
        return fmt, url, download.data
    raise FetchError(f"entry {entry} not found at {base}")


def _to_mmcif_bytes(entry: str, fmt: str, label: str, data: bytes, params: FetchParams) -> bytes:
    """Validate ``data`` and return the gzipped mmCIF bytes to store."""
    validate.check_envelope(data, label)
    text = validate.decode_text(validate.gunzip_capped(data, params.max_text_bytes, label))
    if text.lstrip()[:1] == "<":
        raise FetchError(f"{label}: gzipped HTML/XML, not a structure file")
    if fmt == "cif":
        validate.validate_mmcif(text, entry, label)
        return data
    st = validate.validate_pdb(text, entry, label)
    cif_text = convert.structure_to_mmcif(st, text).as_string()
    validate.validate_mmcif(cif_text, entry, f"{label} (converted)")
    return convert.gzip_deterministic(cif_text.encode("utf-8"))


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def failed_record(entry: str, source: str, exc: BaseException, attempt_token: str = "") -> dict[str, Any]:
    """The record of a failed fetch: ``status: failed``, a one-line ``reason`` naming the entry,
    ``transient`` (True: network/server trouble, retried on the next workflow run)."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if entry not in reason:
        reason = f"entry {entry}: {reason}"
    return {
        "entry": entry,
        "status": "failed",
        "reason": reason[:500],
        "transient": bool(getattr(exc, "transient", False)),
        "source": source,
        "attempt_token": attempt_token,
        "failed_at": _now(),
    }


def next_attempt_token(record_path: str | Path) -> str:
    """The fetch rule's ``attempt`` param for the entry whose record is at ``record_path``.

    ``"first"`` without a record; the token stored in the record (unchanged: nothing to redo)
    for an ok or permanently failed entry; a new token, derived from the failure time, for a
    transient failure, so Snakemake's params trigger reruns exactly that entry on the next run.
    """
    try:
        record = json.loads(Path(record_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "first"
    if not isinstance(record, dict):
        return "first"
    if record.get("status") == "failed" and record.get("transient"):
        token = f"retry-after-{record.get('failed_at', '')}"
    else:
        token = str(record.get("attempt_token") or "first")
    return re.sub(r"[^A-Za-z0-9:+_.-]", "_", token)[:80]


def fetch_entry(entry: str, source: str, out: str | Path, record_path: str | Path,
                params: Mapping[str, Any] | FetchParams | None = None, attempt_token: str = "") -> FetchResult:
    """Download, validate and store one entry; returns the record (also written to ``record_path``).

    ``attempt_token`` is copied into the record (the workflow's retry bookkeeping, see
    ``workflow/rules/ingest.smk``).
    """
    entry = normalize_entry(entry)
    cfg = params if isinstance(params, FetchParams) else FetchParams.from_mapping(params)
    kind, base = classify_source(source)
    attempts: dict[str, int] = {}
    fmt, where, data = _download(entry, kind, base, cfg, attempts)
    try:
        stored = _to_mmcif_bytes(entry, fmt, where, data, cfg)
    except FetchError as exc:
        raise FetchError(f"entry {entry}: {exc}") from exc
    except (RuntimeError, ValueError) as exc:  # gemmi conversion of an odd legacy file
        raise FetchError(f"entry {entry}: {where}: cannot convert to mmCIF ({type(exc).__name__}: {exc})") from exc
    record = {
        "entry": entry,
        "status": "ok",
        "attempt_token": attempt_token,
        "source": source,
        "url_or_path": where,
        "source_format": fmt,
        "sha256": hashlib.sha256(data).hexdigest(),
        "stored_sha256": hashlib.sha256(stored).hexdigest(),
        "bytes": len(data),
        "fetched_at": _now(),
    }
    fsutil.write_bytes_atomic(out, stored)
    fsutil.write_json_atomic(record_path, record)
    LOG.info("entry %s: %s (%s, %d bytes) -> %s", entry, where, fmt, len(data), out)
    return FetchResult(record=record, attempts=attempts)
