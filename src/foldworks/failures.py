"""Failure records: one small JSON per failed item, gathered into one failures report.

A stage that cannot process an item (an entry it cannot fetch or parse, an entry none of whose
chains survives the filters, a sequence hhblits cannot align) does not stop the run. It writes
a record::

    {"stage": "fetch", "key": "1abc", "reason": "entry 1abc not found at https://...", "time": "..."}

to ``data/failures/<stage>/<key>.json`` (:func:`record_failure`; :func:`failure_path` validates
``stage`` and ``key`` so no record can land outside that folder), removes it again when the item
later succeeds (:func:`clear_failure`), and the run goes on. ``python -m foldworks.failures``
(rule ``failures_report``, and the workflow's ``onsuccess``/``onerror`` hooks) gathers every
record into ``results/failures.tsv``: columns :data:`COLUMNS`, one line per failure, sorted by
stage then key. Records of items that are no longer part of the run (an entry removed from the
config, a sequence no chain uses any more) are left out of the report.

Convention for every stage (keys as in the rest of the workflow):

==========  =====================================  ==============================
stage       key                                    written by
==========  =====================================  ==============================
``input``   the offending ``pdb.entries`` item     workflow load (not a file)
``fetch``   PDB ID (``1abc``)                      ``python -m foldworks.fetch``
``parse``   PDB ID                                 ``python -m foldworks.parse``
``chains``  PDB ID (entry with no chain kept)      ``python -m foldworks.chains``
``msa``     sequence hash (20 hex)                 ``python -m foldworks.msa.search``
<rule>      wildcards of a job that failed hard    the ``onerror`` hook (not a file)
==========  =====================================  ==============================
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from foldworks import fsutil
from foldworks.entrylist import read_entry_list
from foldworks.ids import ENTRY_PATTERN, SEQUENCE_HASH_PATTERN

LOG = logging.getLogger("foldworks.failures")

COLUMNS: tuple[str, ...] = ("stage", "key", "reason")
DEFAULT_ROOT = "data/failures"
DEFAULT_REPORT = "results/failures.tsv"
STAGE_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
TARGET_PATTERN = re.compile(r"^([0-9][a-z0-9]{3})_[A-Za-z0-9]{1,4}$")
MAX_REASON_CHARS = 400


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` as one line: whitespace runs (newlines, tabs) become one space; cut at ``limit`` chars."""
    line = " ".join(str(text).split()) or "unknown error"
    return line if len(line) <= limit else line[: limit - 3] + "..."


def failure_record(stage: str, key: str, reason: str) -> dict[str, str]:
    """A failure record; ``reason`` is reduced to its first line (one line per failure)."""
    first_line = (reason.strip().splitlines() or ["unknown error"])[0]
    return {
        "stage": stage,
        "key": key,
        "reason": one_line(first_line),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_failure(path: str | Path, stage: str, key: str, reason: str) -> dict[str, str]:
    """Write a failure record atomically to ``path``; returns the record."""
    record = failure_record(stage, key, reason)
    fsutil.write_json_atomic(path, record)
    return record


def failure_path(stage: str, key: str, root: str | Path = DEFAULT_ROOT) -> Path:
    """``<root>/<stage>/<key>.json``; ``stage`` and ``key`` are checked first (no ``/``, no ``..``)."""
    if not isinstance(stage, str) or not STAGE_PATTERN.fullmatch(stage):
        raise ValueError(f"failure stage {stage!r}: expected lower-case letters, digits and _")
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise ValueError(f"failure key {key!r}: expected letters, digits, '_', '.', '-' (no path characters)")
    return Path(root) / stage / f"{key}.json"


def record_failure(stage: str, key: str, reason: str, root: str | Path = DEFAULT_ROOT) -> dict[str, str]:
    """Write the record of ``key`` failing at ``stage`` under the convention path; returns it."""
    return write_failure(failure_path(stage, key, root), stage, key, reason)


def clear_failure(stage: str, key: str, root: str | Path = DEFAULT_ROOT) -> bool:
    """Remove the record of ``key`` at ``stage`` (the item succeeded now); True if one existed."""
    path = failure_path(stage, key, root)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def read_failures(paths: Iterable[str | Path]) -> list[dict[str, str]]:
    """Load failure records (files that are not records, e.g. success records, are skipped).

    A file that is not valid JSON (it cannot be half-written: records are atomic, but a user may
    have edited one) is skipped with a warning rather than stopping the report.
    """
    rows = []
    for path in paths:
        try:
            record = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            LOG.warning("failure record %s unreadable, skipped: %s", path, exc)
            continue
        if isinstance(record, dict) and all(k in record for k in COLUMNS) and record.get("status", "failed") == "failed":
            rows.append({"stage": one_line(record["stage"], 64), "key": one_line(record["key"], 128),
                         "reason": one_line(record["reason"])})
    return sorted(rows, key=lambda r: (r["stage"], r["key"]))


def gather(root: str | Path = DEFAULT_ROOT) -> list[dict[str, str]]:
    """Every record under ``<root>/<stage>/*.json`` (hidden temp files excluded)."""
    root = Path(root)
    paths = sorted(p for p in root.glob("*/*.json") if not p.name.startswith(".")) if root.is_dir() else []
    return read_failures(paths)


def is_current(key: str, entries: set[str] | None, sequence_hashes: set[str] | None) -> bool:
    """False for a record whose item left the run: an entry (or ``entry_chain`` target) not in
    ``entries``, a sequence hash not in ``sequence_hashes``; ``None`` means "unknown, keep"."""
    target = TARGET_PATTERN.fullmatch(key)
    if entries is not None and (ENTRY_PATTERN.fullmatch(key) or target):
        return (target.group(1) if target else key) in entries
    if sequence_hashes is not None and SEQUENCE_HASH_PATTERN.fullmatch(key):
        return key in sequence_hashes
    return True


def chain_sequence_hashes(table: str | Path) -> set[str] | None:
    """Sequence hashes of the chains that passed the filters in ``data/chains.parquet`` (None if absent)."""
    if not Path(table).is_file():
        return None
    import pandas as pd  # local: the report is also built inside the Snakemake process

    frame = pd.read_parquet(table, columns=["sequence_hash", "passed_filters"])
    return set(frame.loc[frame["passed_filters"], "sequence_hash"])


def merge_rows(*groups: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """Union of row lists; the first row seen for a ``(stage, key)`` wins; sorted by stage, key."""
    merged: dict[tuple[str, str], dict[str, str]] = {}
    for group in groups:
        for row in group:
            merged.setdefault((row["stage"], row["key"]), {c: one_line(row[c]) for c in COLUMNS})
    return [merged[k] for k in sorted(merged)]


def write_report(rows: Sequence[dict[str, str]], out: str | Path) -> bool:
    """Write the report TSV atomically unless its bytes would not change; True if written."""
    lines = ["\t".join(COLUMNS)] + ["\t".join(row[c].replace("\t", " ") for c in COLUMNS) for row in rows]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    out = Path(out)
    if out.is_file() and out.read_bytes() == data:
        return False
    fsutil.write_bytes_atomic(out, data)
    return True


def build_report(root: str | Path = DEFAULT_ROOT, entries: Iterable[str] | None = None,
                 chains_table: str | Path | None = None, extra: Iterable[dict[str, str]] = ()) -> list[dict[str, str]]:
    """Rows of the report: ``extra`` rows (input problems, failed jobs) plus current records."""
    entry_set = set(entries) if entries is not None else None
    hashes = chain_sequence_hashes(chains_table) if chains_table else None
    records = [r for r in gather(root) if is_current(r["key"], entry_set, hashes)]
    return merge_rows(records, extra)


def failed_job_rows(jobs: Iterable[Any]) -> list[dict[str, str]]:
    """Report rows for Snakemake jobs that failed (``workflow.scheduler.failed`` in ``onerror``).

    Key: the job's ``seqhash`` wildcard, else its wildcard values joined by ``_`` (``-`` if none);
    reason: the last non-empty line of the job's log file.
    """
    rows = []
    for job in jobs:
        for sub in getattr(job, "jobs", None) or [job]:  # group jobs hold several
            try:
                wildcards = dict(sub.wildcards.items())
                key = wildcards.get("seqhash") or "_".join(str(v) for k, v in wildcards.items() if k != "xx") or "-"
                logs = [str(p) for p in (sub.log or [])]
                rows.append({"stage": str(sub.rule.name), "key": key,
                             "reason": f"job failed: {_last_log_line(logs)}"})
            except (AttributeError, TypeError) as exc:  # Snakemake internals changed: keep the report going
                LOG.warning("could not describe a failed job: %s", exc)
    return rows


def _last_log_line(logs: Sequence[str]) -> str:
    for log in logs:
        try:
            lines = [ln.strip() for ln in Path(log).read_text(encoding="utf-8", errors="replace").splitlines()]
        except OSError:
            continue
        lines = [ln for ln in lines if ln]
        if lines:
            return f"{one_line(lines[-1], 300)} (log: {log})"
    return f"no log message (log: {', '.join(logs) or 'none'})"


def refresh_report(out: str | Path = DEFAULT_REPORT, root: str | Path = DEFAULT_ROOT,
                   entries: Iterable[str] | None = None, chains_table: str | Path | None = "data/chains.parquet",
                   extra: Iterable[dict[str, str]] = ()) -> int:
    """Build and write the report; returns the number of rows (used by the workflow hooks)."""
    rows = build_report(root, entries, chains_table, extra)
    write_report(rows, out)
    return len(rows)


#: Bound of the ``--extra`` argument (bytes, shell-quoted): Linux allows 128 KiB per argument
#: string, and Snakemake passes a job's whole command as one (``bash -c "<command>"``).
MAX_EXTRA_BYTES = 32 * 1024


def extra_argument(rows: Sequence[dict[str, str]], max_bytes: int = MAX_EXTRA_BYTES, stage: str = "input") -> str:
    """``rows`` sorted by (stage, key) as the JSON list for ``--extra``, cut so that the argument,
    shell-quoted, takes at most ``max_bytes`` bytes; a cut list ends with one summary row (``key``
    ``~more``). The workflow hooks add every row to the report at the end of the run. Sorted, so
    that reordering ``pdb.entries`` does not change the rule's params (and rerun it)."""
    rows = sorted(rows, key=lambda row: (row["stage"], row["key"]))
    size = 4 + 200  # brackets and quotes, plus room for the summary row
    for index, row in enumerate(rows):
        text = json.dumps(row, sort_keys=True)  # ASCII: one byte per character
        size += len(text) + 4 * text.count("'") + 2  # shlex.quote turns ' into '"'"'; ", " separator
        if size > max_bytes:
            summary = {"stage": stage, "key": "~more", "reason": f"{len(rows) - index} more; see the workflow log"}
            return json.dumps([*rows[:index], summary], sort_keys=True)
    return json.dumps(list(rows), sort_keys=True)


def refresh_after_run(workflow: Any, entries: Sequence[str], problems: Sequence[dict[str, str]],
                      out: str | Path = DEFAULT_REPORT, root: str | Path = DEFAULT_ROOT) -> str:
    """The workflow's ``onsuccess``/``onerror`` hook: rebuild the report with this run's failed
    jobs (``workflow.scheduler.failed``); returns a log line and never raises (a report problem
    must not mask the run's own outcome)."""
    try:
        failed = getattr(getattr(workflow, "scheduler", None), "failed", None) or ()
        count = refresh_report(out, root, entries, "data/chains.parquet", [*problems, *failed_job_rows(failed)])
    except Exception as exc:  # noqa: BLE001
        return f"could not write {out}: {type(exc).__name__}: {exc}"
    return f"failures report: {count} failure(s) listed in {out}"


def _entries_of(records: Sequence[str]) -> list[str]:
    """PDB IDs named by fetch record paths ``data/raw/{entry}.json``."""
    return [Path(p).name.removesuffix(".json") for p in records]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.failures", description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=DEFAULT_ROOT, help="folder of <stage>/<key>.json records")
    parser.add_argument("--out", default=DEFAULT_REPORT, help="report TSV (stage, key, reason)")
    run_entries = parser.add_mutually_exclusive_group()
    run_entries.add_argument("--entries", default=None,
                             help="entry list file data/raw/entries.txt (one PDB ID per line): the run's entries"
                                  " (others' records are left out)")
    run_entries.add_argument("--records", nargs="*", default=None,
                             help="fetch records data/raw/{entry}.json: the run's entries (a few; tests)")
    parser.add_argument("--chains", default=None, help="data/chains.parquet: the run's sequence hashes")
    parser.add_argument("--extra", default="[]", help='JSON list of rows [{"stage", "key", "reason"}] to add')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        extra = json.loads(args.extra)
        if not isinstance(extra, list) or not all(isinstance(r, dict) and set(COLUMNS) <= set(r) for r in extra):
            raise ValueError(f"--extra: expected a JSON list of objects with {list(COLUMNS)}")
        entries = _entries_of(args.records) if args.records is not None else None
        if args.entries is not None:
            entries = read_entry_list(args.entries)
    except ValueError as exc:  # EntryListError is a ValueError
        parser.error(str(exc))
    count = refresh_report(args.out, args.root, entries, args.chains, extra)
    LOG.info("failures report: %d failures -> %s", count, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
