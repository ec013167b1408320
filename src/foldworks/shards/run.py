"""The loop of one shard job: per item, recompute only what changed, then write the manifest.

Each stage gives a *plan* per item: its input digest, its outputs, and how to compute it (the
stage's own per-item CLI, run in this process, so the per-item files, failure records and
logs are exactly those of the per-item jobs before shards). An item is recomputed when its
input digest or the stamp (code + params hash) differs from the manifest row, when it was a
transient failure, or when an output is missing. One bad item never fails the shard job: it
gets a ``failed`` row (and a failure record) and the loop continues.

Snakemake deletes a job's declared outputs before it runs the job, so the manifest alone cannot
carry the stamps across runs: the job also keeps a copy, ``shards/.<key>.state.tsv`` (not a
declared output), and appends the rows of items finished so far to ``shards/.<key>.partial.tsv``
as it runs, so a shard job killed half-way (Slurm time limit, preemption) recomputes only the
rest when rerun. Old rows are read from all three (partial newest).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from foldworks import failures
from foldworks.shards import ALL_ENTRIES_KEY, Row, read_manifest, unchanged, write_manifest

LOG = logging.getLogger("foldworks.shards")

#: What computing one item returns: (status, output digest, one-line reason or "").
Outcome = tuple[str, str, str]


@dataclass
class Plan:
    """One item's input digest, its output files, and the computation (run only if needed)."""

    input_sha256: str
    outputs: Sequence[str]
    compute: Callable[[], Outcome]
    verify: Callable[[Row], bool] = field(default=lambda row: True)


@dataclass
class Counts:
    kept: int = 0
    computed: int = 0
    failed: int = 0


def partial_path(manifest: str | Path) -> Path:
    """Rows finished by the running (or a killed) job of this shard."""
    path = Path(manifest)
    return path.with_name(f".{path.stem}.partial.tsv")


def state_path(manifest: str | Path) -> Path:
    """The copy of the last manifest that survives Snakemake's removal of the job's outputs."""
    path = Path(manifest)
    return path.with_name(f".{path.stem}.state.tsv")


def old_rows(manifest: str | Path) -> dict[str, Row]:
    """Rows of the shard's last runs: manifest, then its state copy, then the partial rows; under
    them the rows of the same stage's shards of another key length (:func:`other_width_manifests`)."""
    rows: dict[str, Row] = {}
    for other in other_width_manifests(manifest):
        rows.update(read_manifest(other))
    return {**rows, **read_manifest(manifest), **read_manifest(state_path(manifest)),
            **read_manifest(partial_path(manifest))}


def other_width_manifests(manifest: str | Path) -> list[Path]:
    """Manifests beside ``manifest`` whose key is a shorter or longer prefix of the same items:
    ``a.tsv`` and ``abc.tsv`` for ``ab.tsv``, and ``all.tsv`` (one shard) for any key and the
    reverse. After `pdb.shard_chars` / `msa.shard_chars` changed, the renamed shards reuse the items
    computed under the old keys (each row is still checked against its input digest, stamp and
    outputs) instead of recomputing every entry and alignment."""
    path = Path(manifest)
    return [other for other in manifests_in(path.parent) if other != path and _related(path.stem, other.stem)]


def manifests_in(shards_dir: str | Path) -> list[Path]:
    """The shard manifests ``<key>.tsv`` in a ``shards/`` directory, sorted by name (not the hidden
    state and partial copies); none if it does not exist."""
    directory = Path(shards_dir)
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except FileNotFoundError:
        return []
    return [directory / name for name in names if name.endswith(".tsv") and not name.startswith(".")]


def _related(key: str, other: str) -> bool:
    """Whether shard ``other`` may hold items of shard ``key``: one key a prefix of the other, or
    either the one-shard key ``all`` (`pdb.shard_chars: 0`)."""
    return ALL_ENTRIES_KEY in (key, other) or key.startswith(other) or other.startswith(key)


def _compute(stage: str, item: str, plan: Plan, stamp: str, failures_dir: str | None) -> Row:
    try:
        status, out_sha, reason = plan.compute()
    except Exception as exc:  # noqa: BLE001 - one item's bug must not stop the shard
        LOG.exception("%s %s: unexpected error", stage, item)
        status, out_sha, reason = "failed", "none", f"{stage} {item}: unexpected {type(exc).__name__}: {exc}"
        if failures_dir:
            failures.record_failure(stage, item, reason, failures_dir)
    return Row(item, status, plan.input_sha256, stamp, out_sha, reason)


def run_items(stage: str, key: str, items: Sequence[str], manifest: str, stamp: str,
              plan_of: Callable[[str], Plan], attempt: str = "", failures_dir: str | None = None,
              retry_failed: bool = False) -> Counts:
    """Bring every item of shard ``key`` up to date and write its manifest (if changed).
    ``retry_failed``: recompute ``failed`` items too (msa: a search that gave up is retried
    whenever its shard runs)."""
    partial = partial_path(manifest)
    old = old_rows(manifest)
    partial.parent.mkdir(parents=True, exist_ok=True)
    counts, rows, start = Counts(), [], time.perf_counter()
    with partial.open("a", encoding="utf-8") as progress:
        for number, item in enumerate(items, 1):
            try:
                plan = plan_of(item)
            except (ValueError, OSError, LookupError) as exc:
                reason = str(exc) if item in str(exc) else f"{stage} {item}: {exc}"
                row = Row(item, "failed", "none", stamp, "none", reason)
                LOG.error("%s", reason)
            else:
                kept = unchanged(old, item, plan.input_sha256, stamp)
                if kept is not None and retry_failed and kept.status == "failed":
                    kept = None
                if kept is not None and all(Path(p).exists() for p in plan.outputs) and plan.verify(kept):
                    rows.append(kept)
                    counts.kept += 1
                    continue
                row = _compute(stage, item, plan, stamp, failures_dir)
                counts.computed += 1
            counts.failed += row.status != "ok"
            rows.append(row)
            progress.write(row.line() + "\n")
            progress.flush()
            LOG.info("%s shard %s: %d/%d %s %s (%.1f s)", stage, key, number, len(items), item, row.status,
                     time.perf_counter() - start)
    write_manifest(state_path(manifest), rows, attempt)
    rewritten = write_manifest(manifest, rows, attempt)
    partial.unlink(missing_ok=True)
    LOG.info("%s shard %s: %d items, %d unchanged, %d computed (%d not ok); manifest %s", stage, key,
             len(items), counts.kept, counts.computed, counts.failed, "rewritten" if rewritten else "unchanged")
    return counts
