"""Provenance helpers: content hashes of code and config slices, tool and package versions.

Snakemake tracks ``script:`` files by mtime and imported package code not at all. Rules pass
:func:`code_hash` of the sub-packages they run in ``params:``, so editing
``src/foldworks/<stage>/`` reruns exactly the rules that use that code.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parent
#: Modules every stage imports.
SHARED_MODULES: tuple[str, ...] = ("__init__.py", "constants.py", "ids.py", "fsutil.py", "logutil.py")


@lru_cache(maxsize=None)
def code_hash(*parts: str) -> str:
    """SHA-256 (16 hex chars) over the source of the named sub-packages/modules plus shared modules.

    ``code_hash("parse")`` covers ``src/foldworks/parse/**/*.py`` and :data:`SHARED_MODULES`.
    """
    digest = hashlib.sha256()
    files: list[Path] = [PACKAGE_ROOT / name for name in SHARED_MODULES]
    for part in parts:
        target = PACKAGE_ROOT / part
        files.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")])
    for path in files:
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def config_hash(config_slice: Any) -> str:
    """SHA-256 (16 hex chars) of a config slice's canonical JSON."""
    canonical = json.dumps(config_slice, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
