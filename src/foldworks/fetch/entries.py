"""The run's entry list (config ``pdb``): validated PDB IDs plus the items refused.

:func:`resolve_entries` reads the whole ``pdb`` slice: ``entries`` (a list, a file of IDs, or
``all``: every entry of the source: a local mirror's listing, or for an http(s) source the wwPDB
holdings), the release-date bounds ``release_date_min``/``release_date_max`` (applied where dates
are known before fetching: see :func:`date_verdict`), and ``holdings`` (URL or directory of the
wwPDB holdings files, :mod:`foldworks.fetch.holdings`). Obsolete entries (in the holdings'
removed list) and listed IDs absent from a local mirror are left out and reported, naming the
replacement when the holdings know it. :func:`load_entries` is the older list/file-only form.

An item that is not a PDB ID (``../x``, ``12345``, a blank-separated pair, ...) never becomes a
path, URL or command argument: it is left out of the run and reported (stage ``input`` in
``results/failures.tsv``, and a warning at workflow load). A list of 10,000 IDs with one typo
still runs the other 9,999. Only a list with no valid ID at all, or a missing entries file,
stops the workflow at load. Duplicates are used once and reported too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from foldworks.ids import ENTRY_PATTERN, InvalidIdentifier, normalize_entry

#: Characters kept when an invalid item is shown in a log line or the report (others -> '?').
_SHOWN = re.compile(r"[^\x21-\x7e]")
MAX_SHOWN_CHARS = 40


@dataclass
class EntryList:
    """Valid lower-case IDs in first-seen order, and report rows for the items refused."""

    entries: list[str] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)
    #: one-line log messages about the selection (source, layout, counts left out by date, ...)
    notes: list[str] = field(default_factory=list)


def shown(item: object) -> str:
    """A printable, one-line, bounded rendering of a config item (never used as a path)."""
    text = _SHOWN.sub("?", str(item))
    return (text[:MAX_SHOWN_CHARS] + "...") if len(text) > MAX_SHOWN_CHARS else (text or "(empty)")


def read_entry_file(spec: str, base_dir: str | Path) -> list[str]:
    """Items of an entries file: one per line, ``#`` comments and blank lines ignored.

    ``spec`` is tried as given (relative to the working directory), then relative to ``base_dir``.
    """
    path = Path(spec)
    if not path.is_file():
        path = Path(base_dir) / spec
    if not path.is_file():
        raise ValueError(f"pdb.entries: file {spec!r} not found (looked in the working directory and {base_dir})")
    items = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    return [item for item in items if item]


def validate_entries(items: Iterable[object]) -> EntryList:
    """Split ``items`` into valid IDs (normalised, de-duplicated) and problem rows."""
    result = EntryList()
    counts: dict[str, int] = {}
    valid = ENTRY_PATTERN.fullmatch
    for item in items:
        # fast path for the common case (230,000 IDs at workflow load); same rule as normalize_entry
        candidate = item.strip().lower() if isinstance(item, str) else None
        try:
            entry = candidate if candidate and valid(candidate) else normalize_entry(item)  # type: ignore[arg-type]
        except InvalidIdentifier as exc:
            result.problems.append({"stage": "input", "key": shown(item),
                                    "reason": f"pdb.entries item {shown(item)!r} skipped: {_why(exc)}"})
            continue
        counts[entry] = counts.get(entry, 0) + 1
        if counts[entry] == 1:
            result.entries.append(entry)
    for entry, count in counts.items():
        if count > 1:
            result.problems.append({"stage": "input", "key": entry,
                                    "reason": f"entry {entry} listed {count} times in pdb.entries; used once"})
    return result


def load_entries(spec: str | list[object], base_dir: str | Path) -> EntryList:
    """Config ``pdb: entries`` (a list, or a file of IDs) -> :class:`EntryList`.

    Raises ``ValueError`` if the file is missing or no valid ID remains.
    """
    items = read_entry_file(spec, base_dir) if isinstance(spec, str) else list(spec)
    result = validate_entries(items)
    _require_some(result, len(items))
    return result


def _require_some(result: EntryList, count: int) -> None:
    """Raise ``ValueError`` when no entry is left (the problems say why)."""
    if not result.entries:
        examples = "; ".join(p["reason"] for p in result.problems[:3]) or "the list is empty"
        raise ValueError(f"pdb.entries: no valid PDB ID among {count} item(s) ({examples})")


def _why(exc: InvalidIdentifier) -> str:
    """The part of the identifier error after the quoted item (the item is shown separately)."""
    text = str(exc)
    return text.split(": ", 1)[1] if ": " in text else text
