"""HTTP(S) download with bounded retries, exponential backoff and a size cap (urllib only).

Transient failures (connection errors, timeouts, HTTP 5xx/429, bodies shorter than their
``Content-Length``) are retried up to ``retries`` times, waiting ``backoff_s * 2**k`` seconds
(capped at ``max_backoff_s``) before retry ``k + 1``. HTTP 404/410 is final and never retried.
A body served as ``text/html`` is refused unread (an error page); other content types are
judged by the bytes (:mod:`foldworks.fetch.validate`).
"""

from __future__ import annotations

import http.client
import logging
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

LOG = logging.getLogger(__name__)

USER_AGENT = "foldworks-fetch/0.1 (+urllib)"
CHUNK_BYTES = 1 << 20
#: Content types never accepted as an entry, whatever the body (others are judged by content).
REFUSED_CONTENT_TYPES = frozenset({"text/html", "application/xhtml+xml"})


class FetchError(RuntimeError):
    """A download or validation failed; the message names the entry and the source.

    ``transient`` says whether trying again later may succeed (network trouble, server errors):
    the workflow retries such entries on its next run, never permanent ones (404, bad content).
    """

    transient: bool = False


class NotFound(FetchError):
    """The server answered 404/410: the file does not exist there (not retried)."""


class TransientError(FetchError):
    """A failure worth retrying (connection, timeout, 5xx, short body)."""

    transient = True


@dataclass(frozen=True)
class RetryPolicy:
    """Retry settings: ``retries`` extra attempts after the first; times in seconds."""

    timeout_s: float = 60.0
    retries: int = 4
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return min(self.max_backoff_s, self.backoff_s * (2 ** (attempt - 1)))


@dataclass(frozen=True)
class Download:
    """A completed download: the body bytes and how many HTTP requests it took."""

    url: str
    data: bytes
    attempts: int


def _read_capped(response: http.client.HTTPResponse, url: str, max_bytes: int) -> bytes:
    """Read the whole body, refusing more than ``max_bytes``; detect short bodies."""
    length_header = response.headers.get("Content-Length")
    expected = int(length_header) if length_header and length_header.isdigit() else None
    if expected is not None and expected > max_bytes:
        raise FetchError(f"{url}: Content-Length {expected} exceeds the limit of {max_bytes} bytes")
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = response.read(CHUNK_BYTES)
        except http.client.IncompleteRead as exc:
            raise TransientError(f"{url}: connection closed after {total + len(exc.partial)} bytes") from exc
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            raise FetchError(f"{url}: body exceeds the limit of {max_bytes} bytes")
        chunks.append(chunk)
    if expected is not None and total != expected:
        raise TransientError(f"{url}: got {total} of {expected} bytes (truncated transfer)")
    return b"".join(chunks)


def _attempt(url: str, timeout_s: float, max_bytes: int) -> bytes:
    """One GET request; maps every failure to NotFound, TransientError or FetchError."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if response.headers.get_content_type() in REFUSED_CONTENT_TYPES:
                raise FetchError(f"{url}: served as {response.headers.get_content_type()} "
                                 "(an error or login page, not a structure file)")
            return _read_capped(response, url, max_bytes)
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            raise NotFound(f"{url}: HTTP {exc.code}") from exc
        if exc.code >= 500 or exc.code == 429:
            raise TransientError(f"{url}: HTTP {exc.code}") from exc
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransientError(f"{url}: {type(exc).__name__}: {reason}") from exc


def http_get(url: str, policy: RetryPolicy, max_bytes: int) -> Download:
    """GET ``url`` with retries; returns the body or raises :class:`FetchError`/:class:`NotFound`."""
    attempts = policy.retries + 1
    for attempt in range(1, attempts + 1):
        try:
            data = _attempt(url, policy.timeout_s, max_bytes)
            return Download(url=url, data=data, attempts=attempt)
        except TransientError as exc:
            if attempt == attempts:
                raise TransientError(f"{exc} (gave up after {attempts} attempts)") from exc
            wait = policy.delay(attempt)
            LOG.warning("attempt %d/%d failed: %s; retrying in %.2f s", attempt, attempts, exc, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
