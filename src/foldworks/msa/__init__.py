"""The ``msa_db`` and ``msa`` stages: HH-suite database building and per-sequence hhblits.

- :func:`foldworks.msa.build_db.build_database` (``python -m foldworks.msa.build_db``)
- :func:`foldworks.msa.search.run_hhblits` (``python -m foldworks.msa.search``)
- :mod:`foldworks.msa.a3m`: ``parse_a3m``, ``read_a3m``, ``validate_a3m``

The names are re-exported lazily, so ``python -m foldworks.msa.<module>`` does not import its
own module twice. Never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "A3MError": "foldworks.msa.a3m", "parse_a3m": "foldworks.msa.a3m",
    "read_a3m": "foldworks.msa.a3m", "validate_a3m": "foldworks.msa.a3m",
    "build_database": "foldworks.msa.build_db", "run_hhblits": "foldworks.msa.search",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'foldworks.msa' has no attribute {name!r}")
