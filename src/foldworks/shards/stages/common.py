"""Helpers every stage's planner uses: run a stage CLI in-process, read a failure record's reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable


def call_cli(main: Callable[[list[str]], int], argv: list[str], what: str) -> int:
    """Run a stage CLI's ``main`` in this process; an argparse exit becomes ``ValueError``."""
    try:
        return int(main(argv) or 0)
    except SystemExit as exc:
        raise ValueError(f"{what}: invalid arguments (exit {exc.code})") from None


def failure_reason(path: Path, default: str) -> str:
    """The ``reason`` of a failure record (JSON) at ``path``, or ``default`` if it is missing or unreadable."""
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("reason") or default)
    except (OSError, ValueError):
        return default
