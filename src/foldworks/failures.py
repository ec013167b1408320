"""Failure records: one small JSON per failed item, gathered into one failures report.

A stage that cannot process an item (an entry it cannot fetch or parse, a sequence hhblits
cannot align, a chain refused for a missing MSA) does not stop the run. It writes a record::

    {"stage": "fetch", "key": "1abc", "reason": "entry not found at https://...", "time": "..."}

and the run goes on; ``python -m foldworks.failures`` (rule ``failures_report``) gathers every
record into ``results/failures.tsv`` (columns :data:`COLUMNS`, sorted by stage then key).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterable

from foldworks import fsutil

COLUMNS: tuple[str, ...] = ("stage", "key", "reason")


def failure_record(stage: str, key: str, reason: str) -> dict[str, str]:
    """A failure record; ``reason`` is reduced to its first line (one line per failure)."""
    first_line = (reason.strip().splitlines() or ["unknown error"])[0]
    return {
        "stage": stage,
        "key": key,
        "reason": first_line,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_failure(path: str | Path, stage: str, key: str, reason: str) -> dict[str, str]:
    """Write a failure record atomically to ``path``; returns the record."""
    record = failure_record(stage, key, reason)
    fsutil.write_json_atomic(path, record)
    return record


def read_failures(paths: Iterable[str | Path]) -> list[dict[str, str]]:
    """Load failure records (files that are not records, e.g. success records, are skipped)."""
    rows = []
    for path in paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(record, dict) and all(k in record for k in COLUMNS) and record.get("status", "failed") == "failed":
            rows.append({k: str(record[k]) for k in COLUMNS})
    return sorted(rows, key=lambda r: (r["stage"], r["key"]))
