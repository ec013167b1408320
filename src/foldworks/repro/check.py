"""Does every checkpoint and metrics table still match the checked-out code and config?

Each artifact carries the record of :func:`foldworks.provenance.provenance_record`:
checkpoints in ``checkpoint["provenance"]`` (``results/checkpoints/{experiment}/*.ckpt``),
metrics tables in ``x.provenance.json`` beside ``results/metrics/**/x.tsv``. An artifact
*matches* when its ``stage``, ``config_hash`` and ``code_hash`` equal what this checkout
computes for that stage's config slice and code (``git_sha`` is informational: a new commit
need not change an artifact). Snakemake cannot see this after ``dvc pull`` (no metadata,
fresh mtimes), so ``make pull`` runs this check before it marks anything up to date.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from foldworks.provenance import SIDECAR_SUFFIX, code_hash, config_hash, sidecar_path
from foldworks.repro.config import STAGE_CODE_PARTS, ConfigError, expected_slice

CHECKPOINTS_DIR = "results/checkpoints"
METRICS_DIR = "results/metrics"

OK, MISMATCH, MISSING = "ok", "mismatch", "missing"


@dataclass(frozen=True)
class Finding:
    """The verdict on one artifact: ``status`` is ``ok``, ``mismatch`` or ``missing``."""

    path: str
    status: str
    detail: str = ""
    git_sha: str = ""


def checkpoint_provenance(path: Path) -> dict[str, Any] | None:
    """``checkpoint["provenance"]`` of a ``.ckpt`` (loaded with ``weights_only=True``), or None."""
    import torch  # only the checkpoint check needs it

    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    record = checkpoint.get("provenance") if isinstance(checkpoint, dict) else None
    return record if isinstance(record, dict) else None


def sidecar_provenance(path: Path) -> dict[str, Any] | None:
    """The record in ``x.provenance.json`` beside ``x.tsv``, or None when there is none."""
    sidecar = sidecar_path(path)
    if not sidecar.exists():
        return None
    record = json.loads(sidecar.read_text())
    return record if isinstance(record, dict) else None


def compare(record: dict[str, Any], stage: str, config_slice: Any, slice_name: str,
            package_root: Path) -> list[str]:
    """Differences between ``record`` and this checkout's hashes for ``stage`` (empty: a match)."""
    parts = STAGE_CODE_PARTS[stage]
    problems = []
    if record.get("stage") != stage:
        problems.append(f"recorded stage {record.get('stage')!r}, expected {stage!r}")
    expected_config = config_hash(config_slice)
    if record.get("config_hash") != expected_config:
        problems.append(f"config_hash {record.get('config_hash')} recorded, {expected_config} for "
                        f"config slice `{slice_name}` of this checkout")
    if list(record.get("code_parts") or parts) != list(parts):
        problems.append(f"code parts {record.get('code_parts')} recorded, expected {list(parts)}")
    expected_code = code_hash(*parts, root=package_root)
    if record.get("code_hash") != expected_code:
        where = ", ".join(f"src/foldworks/{part}" for part in parts)
        problems.append(f"code_hash {record.get('code_hash')} recorded, {expected_code} for {where} "
                        "(+ shared modules) of this checkout")
    return problems


def _finding(repo: Path, path: Path, record: dict[str, Any] | None, stage: str, slice_name: str,
             slice_of: Callable[[], Any]) -> Finding:
    rel = str(path.relative_to(repo))
    if record is None:
        return Finding(rel, MISSING, "carries no provenance record")
    try:
        problems = compare(record, stage, slice_of(), slice_name, repo / "src" / "foldworks")
    except ConfigError as exc:
        problems = [str(exc)]
    sha = str(record.get("git_sha", ""))
    return Finding(rel, MISMATCH if problems else OK, "; ".join(problems), sha)


def check_artifacts(repo: Path, config: dict[str, Any]) -> list[Finding]:
    """Check every ``results/checkpoints/*/*.ckpt`` and ``results/metrics/**/*.tsv`` under ``repo``."""
    findings = []
    for ckpt in sorted((repo / CHECKPOINTS_DIR).glob("*/*.ckpt")):
        experiment = ckpt.parent.name
        findings.append(_finding(repo, ckpt, checkpoint_provenance(ckpt), "train",
                                 f"experiments.{experiment}",
                                 lambda e=experiment: expected_slice(config, "train", e)))
    for tsv in sorted((repo / METRICS_DIR).rglob("*.tsv")):
        findings.append(_finding(repo, tsv, sidecar_provenance(tsv), "evaluate", "evaluate",
                                 lambda: expected_slice(config, "evaluate")))
    for sidecar in sorted((repo / METRICS_DIR).rglob(f"*{SIDECAR_SUFFIX}")):
        table = sidecar.with_name(sidecar.name.removesuffix(SIDECAR_SUFFIX) + ".tsv")
        if not table.exists():
            findings.append(Finding(str(sidecar.relative_to(repo)), MISMATCH,
                                    f"provenance of a missing table {table.name}"))
    return findings


def format_findings(findings: list[Finding], current_sha: str, verbose: bool = False) -> str:
    """A readable report: every problem, a count of matches, the recorded vs current git SHAs."""
    lines = []
    for finding in findings:
        if finding.status != OK or verbose:
            lines.append(f"  {finding.status:8s} {finding.path}: {finding.detail or 'matches'}")
    counts = {status: sum(f.status == status for f in findings) for status in (OK, MISMATCH, MISSING)}
    lines.append(f"  {len(findings)} artifacts: {counts[OK]} match, {counts[MISMATCH]} do not match, "
                 f"{counts[MISSING]} without provenance")
    shas = sorted({f.git_sha for f in findings if f.git_sha})
    if shas:
        lines.append(f"  produced at git {', '.join(shas)}; this checkout is {current_sha} (informational)")
    return "\n".join(lines)


def problems_of(findings: list[Finding], allow_missing: bool) -> list[Finding]:
    """The findings that block: mismatches, and artifacts without provenance unless allowed."""
    return [f for f in findings if f.status == MISMATCH or (f.status == MISSING and not allow_missing)]
