"""Entry selection from the whole ``pdb`` config slice: list / file / ``all``, date bounds, obsolete.

:func:`resolve_entries` is what ``workflow/rules/common.smk`` calls at workflow load::

    pdb:
      entries: all                 # or a list of IDs, or a file with one ID per line
      source: ../mirror            # https URL prefix, or a local mirror (flat or divided)
      release_date_min: 1990-01-01 # optional, YYYY-MM-DD, inclusive
      release_date_max: 2021-09-30 # optional, YYYY-MM-DD, inclusive
      holdings: https://files.wwpdb.org/pub/pdb/holdings   # optional (see below)
      holdings_max_age_days: 7     # refresh policy of the cached holdings

Which entries ``all`` means: for a local mirror, every ``<id>.cif.gz``/``.pdb.gz`` in it (flat
and/or divided, :func:`foldworks.fetch.mirror.list_mirror`); for an http(s) source, every
released entry of the wwPDB holdings (``pdb.holdings``, default the wwPDB URL).

The holdings are used for ``all`` with an http(s) source, and for any source when ``pdb.holdings``
is set: a listed ID that the holdings list as removed is left out and reported (with its
replacement). A listed ID absent from a local mirror is left out and reported too. Neither is an
error: the rest of the run goes on. Only an empty selection stops the workflow at load.

Release dates (:func:`date_verdict`): a mirror's ``MANIFEST.tsv`` with a ``release_date`` column
gives exact dates; the holdings give each entry's last-modified date, an upper bound of its first
release (so they can prove an entry too old for ``release_date_min`` and young enough for
``release_date_max``, never too young). Entries whose date is unknown here are kept: the chain
table's ``chains.filters.release_date_max`` (read from each mmCIF) applies after parsing.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any, Mapping

from foldworks.fetch import holdings as hold
from foldworks.fetch import mirror
from foldworks.fetch.entries import EntryList, _require_some, read_entry_file, validate_entries

DEFAULT_SOURCE = "https://files.rcsb.org/download"
ALL = "all"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def check_date(value: object, key: str) -> str | None:
    """``YYYY-MM-DD`` (a real calendar date) or None; raises ``ValueError`` naming ``pdb.<key>``."""
    if value in (None, ""):
        return None
    text = value.isoformat() if isinstance(value, dt.date) else str(value)  # YAML may parse dates
    try:
        if not _DATE.match(text):
            raise ValueError(text)
        dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"pdb.{key}: {text!r} is not a date YYYY-MM-DD") from None
    return text


def date_verdict(exact: str | None, modified: str | None, date_min: str | None, date_max: str | None) -> str | None:
    """Why an entry is outside ``[date_min, date_max]``, or None if it is inside or unknown.

    ``exact``: its first release date; ``modified``: the holdings' last-modified date (release
    <= modified). Dates are ``YYYY-MM-DD`` strings (compared as text)."""
    if exact:
        if date_min and exact < date_min:
            return f"released {exact}, before pdb.release_date_min {date_min}"
        if date_max and exact > date_max:
            return f"released {exact}, after pdb.release_date_max {date_max}"
        return None
    if modified and date_min and modified < date_min:
        return f"last modified {modified}, so released before pdb.release_date_min {date_min}"
    return None


def _holdings(pdb: Mapping[str, Any], use_default: bool, cache_dir: str | Path) -> tuple[hold.Holdings | None, list[str]]:
    """The holdings (refreshed per policy) if configured, or needed with the default URL."""
    location = pdb.get("holdings") or (hold.DEFAULT_URL if use_default else None)
    if not location:
        return None, []
    age = pdb.get("holdings_max_age_days", hold.DEFAULT_MAX_AGE_DAYS)
    messages = hold.ensure_cached(str(location), cache_dir, None if age is None else float(age))
    return hold.load_holdings(cache_dir), messages


def _items(spec: object, source: str, is_url: bool, known: hold.Holdings | None, base_dir: str | Path,
           listing: mirror.MirrorListing | None) -> list[object]:
    """The configured items: ``all`` expanded from the mirror listing or the holdings."""
    if spec != ALL:
        return read_entry_file(spec, base_dir) if isinstance(spec, str) else list(spec)  # type: ignore[arg-type]
    if is_url:
        assert known is not None
        return sorted(known.released)
    assert listing is not None
    if not listing.entries:
        raise ValueError(f"pdb.entries: all: the mirror {source} holds no <id>.cif.gz or <id>.pdb.gz file")
    return sorted(listing.entries)


def _drop(result: EntryList, reasons: dict[str, str]) -> None:
    """Remove ``reasons``' entries from the selection, adding one report row each."""
    if not reasons:
        return
    result.entries = [e for e in result.entries if e not in reasons]
    result.problems.extend({"stage": "input", "key": entry, "reason": reason} for entry, reason in reasons.items())


def resolve_entries(pdb: Mapping[str, Any], base_dir: str | Path, cache_dir: str | Path = hold.CACHE_DIR) -> EntryList:
    """Config ``pdb`` slice -> :class:`EntryList` (entries in order, report rows, log notes).

    Raises ``ValueError`` for a bad config (missing file, bad date, unreadable mirror for ``all``)
    or an empty selection, :class:`foldworks.fetch.holdings.HoldingsError` if needed holdings
    cannot be had."""
    spec = pdb["entries"]
    source = str(pdb.get("source") or DEFAULT_SOURCE)
    is_url = "://" in source
    date_min = check_date(pdb.get("release_date_min"), "release_date_min")
    date_max = check_date(pdb.get("release_date_max"), "release_date_max")
    if date_min and date_max and date_min > date_max:
        raise ValueError(f"pdb.release_date_min {date_min} is after pdb.release_date_max {date_max}")
    listing = mirror.list_mirror(source) if not is_url and (spec == ALL or Path(source).is_dir()) else None
    known, notes = _holdings(pdb, use_default=is_url and spec == ALL, cache_dir=cache_dir)
    items = _items(spec, source, is_url, known, base_dir, listing)
    # `all` comes from a listing or the holdings: already valid, unique, lower case
    result = EntryList(entries=list(items)) if spec == ALL else validate_entries(items)  # type: ignore[arg-type]
    result.notes.extend(notes)
    if listing is not None:
        result.notes.append(f"source {source}: local mirror, {listing.layout} layout, {len(listing.entries)} entries")
    if known is not None:
        result.notes.append(f"holdings fetched {known.fetched_at}: {len(known.released)} released, "
                            f"{len(known.removed)} removed entries")
        _drop(result, {e: known.removed_reason(e) for e in result.entries if e in known.removed and e not in known.released})
    if listing is not None and spec != ALL:
        _drop(result, {e: _absent_reason(e, source) for e in result.entries if e not in listing.entries})
    _apply_dates(result, source if listing is not None else None, known, date_min, date_max)
    _require_some(result, len(items))
    return result


def _absent_reason(entry: str, source: str) -> str:
    """Report reason for a listed ID with no file in the mirror (holdings-obsolete ones are
    reported before, with their successor)."""
    return f"entry {entry} is not in the mirror {source} (obsolete, or not mirrored); left out"


def _apply_dates(result: EntryList, mirror_dir: str | None, known: hold.Holdings | None,
                 date_min: str | None, date_max: str | None) -> None:
    """Leave out entries proven outside the release-date bounds (a count in the notes, no rows)."""
    if not (date_min or date_max):
        return
    exact = mirror.manifest_release_dates(mirror_dir) if mirror_dir else {}
    modified = known.released if known is not None else {}
    out = {e for e in result.entries if date_verdict(exact.get(e), modified.get(e) or None, date_min, date_max)}
    unknown = sum(1 for e in result.entries if e not in out and e not in exact
                  and (date_min or not (modified.get(e) and modified[e] <= str(date_max))))
    result.entries = [e for e in result.entries if e not in out]
    result.notes.append(f"release-date bounds [{date_min or '-'}, {date_max or '-'}]: {len(out)} entries left out; "
                        f"{unknown} without a known release date kept (chains.filters.release_date_max applies "
                        "after parsing)")
