"""Snakemake from Python: dry-run job counts per rule, and ``--touch``.

``snakemake -n`` exits 0 whether or not there is work to do, so callers read its output:
"Nothing to be done" or a "Job stats" table (``job  count`` rows, then ``total``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

NOTHING_TO_DO = "Nothing to be done"
_ROW = re.compile(r"^(\S+)\s+(\d+)$")


class SnakemakeError(RuntimeError):
    """Snakemake failed; the message carries the end of its output."""


@dataclass(frozen=True)
class DryRun:
    """What ``snakemake -n`` plans: ``counts`` = jobs per rule (``all`` included), raw ``output``."""

    nothing_to_do: bool
    counts: dict[str, int] = field(default_factory=dict)
    output: str = ""

    @property
    def total(self) -> int:
        return sum(count for rule, count in self.counts.items() if rule != "all")

    def summary(self) -> str:
        """``parse=1, chains=1, …`` without the ``all`` target (or "nothing to do")."""
        if self.nothing_to_do:
            return "nothing to do"
        return ", ".join(f"{rule}={n}" for rule, n in self.counts.items() if rule != "all")


def parse_job_stats(output: str) -> dict[str, int]:
    """Jobs per rule from the first "Job stats:" table of Snakemake's output ({} when absent)."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Job stats:")
    except StopIteration:
        return counts
    for line in lines[start + 1:]:
        text = line.strip()
        if not text or text.split() == ["job", "count"] or set(text) <= {"-", " "}:
            if counts and not text:
                break
            continue
        match = _ROW.match(text)
        if match is None or match.group(1) == "total":
            break
        counts[match.group(1)] = int(match.group(2))
    return counts


def snakemake_command(args: list[str]) -> list[str]:
    """``python -m snakemake ARGS`` with this interpreter (the venv that has Snakemake)."""
    return [sys.executable, "-m", "snakemake", *args]


def run_snakemake(repo: Path, args: list[str], timeout: float | None = None) -> str:
    """Run Snakemake in ``repo``; return stdout+stderr; raise :class:`SnakemakeError` on failure."""
    result = subprocess.run(snakemake_command(args), cwd=repo, capture_output=True, text=True,
                            timeout=timeout)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise SnakemakeError(f"snakemake {' '.join(args)} failed (exit {result.returncode}):\n"
                             f"{output[-4000:]}")
    return output


def dry_run(repo: Path, args: list[str], timeout: float | None = None) -> DryRun:
    """``snakemake -n ARGS`` in ``repo``: nothing to do, or the jobs per rule it would run."""
    output = run_snakemake(repo, ["-n", *args], timeout)
    if NOTHING_TO_DO in output:
        return DryRun(True, {}, output)
    counts = parse_job_stats(output)
    if not counts:
        raise SnakemakeError(f"snakemake -n printed neither {NOTHING_TO_DO!r} nor a job table:\n"
                             f"{output[-4000:]}")
    return DryRun(False, counts, output)


def touch_all(repo: Path, args: list[str], timeout: float | None = None) -> str:
    """``snakemake --touch --forceall``: mark every job's outputs up to date, in DAG order.

    Plain ``--touch`` touches only jobs that look out of date and records metadata only for
    those; ``--forceall`` records every job's params and code hash, so later edits rerun
    exactly the rules they affect. Only call this after the provenance check passed.
    """
    return run_snakemake(repo, ["--touch", "--forceall", "--cores", "1", *args], timeout)
