"""Turning raw search output into a contract a3m, shared by the hhblits and mmseqs backends.

Per query: merge the per-database alignments (query row once, then each database's hits in
config order) → ``hhfilter`` (identity / coverage / diversity from config) → depth cap (the
first ``max_depth`` rows, query first) → metadata line → contract check
(:func:`foldworks.msa.a3m.validate_a3m`). When every attempt failed, :func:`placeholder_a3m`
writes the query row alone with ``status: failed`` and a failure record names the reason.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable

from foldworks import fsutil
from foldworks.failures import write_failure
from foldworks.msa import tools
from foldworks.msa.a3m import A3MError, a3m_records, format_a3m, format_header, validate_a3m
from foldworks.msa.config import HHFILTER_FLAGS

LOG = logging.getLogger("foldworks.msa")
#: Failures worth another attempt (tool crash or timeout, malformed tool output). Anything
#: else (a missing database, an invalid query or config) fails the job on every attempt.
RETRIABLE = (tools.ToolError, A3MError)


def merge_alignments(seq_hash: str, sequence: str, results: list[tuple[str, str]],
                     max_hits: dict[str, int] | None = None) -> tuple[str, dict[str, int]]:
    """Concatenate ``[(database name, a3m text)]`` into one a3m; return it and the hit rows
    kept per database. Each input's first row must be exactly ``sequence``; at most
    ``max_hits[name]`` rows of a database are kept, in the tool's order (best hits first)."""
    rows: list[tuple[str, str]] = [(seq_hash, sequence)]
    hits: dict[str, int] = {}
    for name, text in results:
        records = a3m_records(text)
        if not records:
            raise A3MError(f"{seq_hash}: the {name} search returned an empty alignment")
        if records[0][1] != sequence:
            raise A3MError(f"{seq_hash}: the {name} search's first row is not the query")
        kept = records[1:1 + int((max_hits or {}).get(name, len(records)))]
        hits[name] = len(kept)
        rows.extend(kept)
    return format_a3m(rows), hits


def hhfilter_args(raw: Path, out: Path, hhfilter: dict[str, Any], n_rows: int) -> list[str]:
    """Argument list of the hhfilter call (flags present in ``hhfilter`` only; ``-maxseq``
    large enough to read all ``n_rows`` rows)."""
    args = [tools.which("hhfilter"), "-i", str(raw), "-o", str(out), "-v", "1",
            "-maxseq", str(max(int(n_rows) + 1, 65535))]
    for flag in HHFILTER_FLAGS:
        value = hhfilter.get(flag)
        if value is not None:
            args += [f"-{flag}", str(value)]
    return args


def run_hhfilter(merged: str, work: Path, hhfilter: dict[str, Any], seq_hash: str,
                 timeout_s: float | None) -> str:
    """Filter ``merged`` a3m text with hhfilter in ``work``; return the filtered text."""
    raw, out = work / f"{seq_hash}.merged.a3m", work / f"{seq_hash}.filtered.a3m"
    raw.write_text(merged, encoding="utf-8")
    tools.run_tool(hhfilter_args(raw, out, hhfilter, merged.count(">")), f"hhfilter for {seq_hash}",
                   timeout_s=timeout_s)
    return out.read_text(encoding="utf-8", errors="replace")


def finish_a3m(text: str, seq_hash: str, sequence: str, max_depth: int, meta: dict[str, Any] | None = None) -> str:
    """Name the query row ``>{hash}``, cap the depth at ``max_depth`` rows (query first),
    prepend the metadata line (``depth`` filled in) and validate; :class:`A3MError` names
    ``seq_hash``."""
    records = a3m_records(text)
    if not records:
        raise A3MError(f"{seq_hash}: empty alignment")
    records = [(seq_hash, records[0][1])] + records[1:max_depth]
    body = format_a3m(records)
    validate_a3m(body, sequence, name=seq_hash)
    if meta is None:
        return body
    return format_header({**meta, "status": "ok", "depth": len(records)}) + body


def placeholder_a3m(seq_hash: str, sequence: str, meta: dict[str, Any], reason: str) -> str:
    """The query-only a3m of a sequence whose every attempt failed (``status: failed``)."""
    first_line = (reason.strip().splitlines() or ["unknown error"])[0]
    header = format_header({**meta, "status": "failed", "depth": 1, "reason": first_line})
    return header + format_a3m([(seq_hash, sequence)])


def apply_policy(seq_hash: str, sequence: str, out_a3m: str | os.PathLike[str], meta: dict[str, Any],
                 failure_path: str | os.PathLike[str] | None, attempt: int, max_attempts: int,
                 search: Callable[[], Any]) -> int:
    """Run ``search`` (which writes ``out_a3m``) under the retry policy; return an exit status.

    Success: a stale failure record is removed, status 0. A :data:`RETRIABLE` error before
    the last attempt: status 1 (Snakemake retries the job with more time and memory). On the
    last attempt: failure record + placeholder a3m, status 0, so a ``--keep-going`` run
    finishes every other chain and the features stage decides (fallback or refusal).
    """
    try:
        search()
    except RETRIABLE as exc:
        if attempt < max_attempts:
            LOG.error("msa %s: attempt %d of %d failed, will be retried: %s", seq_hash, attempt, max_attempts, exc)
            return 1
        LOG.error("msa %s: attempt %d of %d failed, giving up: %s", seq_hash, attempt, max_attempts, exc)
        if failure_path is not None:
            write_failure(failure_path, "msa", seq_hash, f"{type(exc).__name__}: {exc}")
        fsutil.write_bytes_atomic(out_a3m, placeholder_a3m(seq_hash, sequence, meta, str(exc)).encode("utf-8"))
        return 0
    if failure_path is not None and Path(failure_path).exists():
        Path(failure_path).unlink()
    return 0
