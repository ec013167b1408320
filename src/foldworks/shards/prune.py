"""Remove the shard manifests of a key length the workflow no longer uses.

After ``pdb.shard_chars`` or ``msa.shard_chars`` changes, every shard is renamed (``ab.tsv`` ->
``a.tsv``), and each renamed shard job reuses the rows of the old-length manifests beside it
(:func:`foldworks.shards.run.other_width_manifests`). So an old-length manifest must stay until
the shard jobs that took over its items have run, and may go after that: it is then only read
(by every related shard job), versioned (``make push`` records ``data/<stage>`` with DVC) and
never updated. :func:`prune_stale_manifests` removes an old-length manifest, and its hidden
state and partial copies, only when **every** item in it is in a manifest of the current
length, i.e. has been taken over; it keeps the others and says how many items are not yet
covered. ``make push`` runs it for the four stages once the run is complete (``snakemake -n``
has nothing to do), which is when every current-length shard job has run; by hand (safe at any
time, since it removes only what has been taken over)::

    python -m foldworks.shards.prune [--configfile my.yaml ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from foldworks.shards import key_chars, read_manifest
from foldworks.shards.run import manifests_in, partial_path, state_path

#: Stage directories (``data/<stage>``, manifests in ``shards/``) and what keys their shards.
ENTRY_STAGE_DIRS = ("data/raw", "data/parsed", "data/features")
MSA_STAGE_DIR = "data/msa"


@dataclass
class PruneReport:
    """What :func:`prune_stale_manifests` did in one ``shards/`` directory."""

    removed: list[Path] = field(default_factory=list)
    #: ``{old-length manifest: items in it that no current-length manifest holds}``
    kept: dict[Path, int] = field(default_factory=dict)


def prune_stale_manifests(shards_dir: str | os.PathLike[str], chars: int, dry_run: bool = False) -> PruneReport:
    """Remove the manifests in ``shards_dir`` whose key length is not ``chars`` (0: ``all``) and
    whose every item is in a manifest of length ``chars``; ``dry_run``: only report."""
    manifests = manifests_in(shards_dir)
    old = [path for path in manifests if key_chars(path.stem) != chars]
    covered = {item for path in manifests if key_chars(path.stem) == chars for item in read_manifest(path)}
    report = PruneReport()
    for path in old:
        missing = sum(item not in covered for item in read_manifest(path))
        if missing:
            report.kept[path] = missing
            continue
        if not dry_run:
            for copy in (state_path(path), partial_path(path), path):
                copy.unlink(missing_ok=True)
        report.removed.append(path)
    return report


def current_key_chars(config: Mapping[str, Any]) -> dict[str, int]:
    """``{stage dir: key length}`` of a validated workflow config (defaults filled): the entry
    stages follow ``pdb.shard_chars``, msa ``msa.shard_chars`` (hhblits) or
    ``msa.mmseqs.shard_chars`` (mmseqs), as workflow/rules/common.smk and msa.smk read them."""
    msa = config["msa"]
    msa_chars = msa["shard_chars"] if msa["tool"] == "hhblits" else msa["mmseqs"]["shard_chars"]
    chars = {stage_dir: int(config["pdb"]["shard_chars"]) for stage_dir in ENTRY_STAGE_DIRS}
    chars[MSA_STAGE_DIR] = int(msa_chars)
    return chars


def prune_workflow(repo: str | os.PathLike[str], config: Mapping[str, Any], dry_run: bool = False
                   ) -> dict[str, PruneReport]:
    """:func:`prune_stale_manifests` for the four stages of ``config``, under ``repo``."""
    return {stage_dir: prune_stale_manifests(Path(repo) / stage_dir / "shards", chars, dry_run)
            for stage_dir, chars in current_key_chars(config).items()}


def summary(reports: Mapping[str, PruneReport], dry_run: bool = False) -> str:
    """One line per stage directory that had old-length manifests."""
    verb = "would remove" if dry_run else "removed"
    lines = []
    for stage_dir, report in reports.items():
        if report.removed or report.kept:
            kept = ", ".join(f"{path.name} ({n} item{'' if n == 1 else 's'} not yet under the current keys)"
                             for path, n in report.kept.items())
            lines.append(f"{stage_dir}/shards: {verb} {len(report.removed)} manifest(s) of an old key length"
                         + (f"; kept {kept}" if kept else ""))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: prune the workflow's four ``shards/`` directories for the config Snakemake would use."""
    from foldworks.repro.config import ConfigError, load_workflow_config

    parser = argparse.ArgumentParser(prog="python -m foldworks.shards.prune", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", action="extend", default=[], type=Path,
                        help="the workflow's --configfile files, in order")
    parser.add_argument("--repo", type=Path, default=Path("."), help="repository root")
    parser.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    args = parser.parse_args(argv)
    try:
        config = load_workflow_config(args.repo, args.configfile)
    except ConfigError as exc:
        print(f"[prune] ERROR: {exc}", file=sys.stderr)
        return 1
    text = summary(prune_workflow(args.repo, config, args.dry_run), args.dry_run)
    print(text or "[prune] no shard manifests of an old key length")
    return 0


if __name__ == "__main__":
    sys.exit(main())
