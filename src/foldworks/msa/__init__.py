"""The ``msa_db`` and ``msa`` stages: HH-suite database building and per-sequence hhblits.

- :func:`foldworks.msa.build_db.build_database` (``python -m foldworks.msa.build_db``): single or
  MMseqs2-clustered databases from FASTA, content-hashed records; existing databases fingerprinted
- :func:`foldworks.msa.search.search_query` / ``run_hhblits`` (``python -m foldworks.msa.search``):
  hhblits per query and database, merged, hhfilter, depth cap, contract check
- :func:`foldworks.msa.mmseqs_search.search_shard` (``python -m foldworks.msa.mmseqs_search``):
  the batched MMseqs2 backend with the same a3m contract
- :mod:`foldworks.msa.precomputed` (``python -m foldworks.msa.precomputed``): existing alignment
  collections (OpenFold, OpenProteinSet, ColabFold) indexed by query sequence hash;
  :mod:`foldworks.msa.importer` writes the contract a3m from them, :mod:`foldworks.msa.stockholm`
  converts Stockholm rows
- :mod:`foldworks.msa.config`: the ``msa:`` config section and the slices the rules pass
- :mod:`foldworks.msa.summary` (``python -m foldworks.msa.summary``): the completeness check
- :mod:`foldworks.msa.a3m`: ``parse_a3m``, ``read_a3m``, ``validate_a3m``, ``read_header``

The names are re-exported lazily, so ``python -m foldworks.msa.<module>`` does not import its
own module twice. Never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "A3MError": "foldworks.msa.a3m", "parse_a3m": "foldworks.msa.a3m",
    "read_a3m": "foldworks.msa.a3m", "validate_a3m": "foldworks.msa.a3m", "read_header": "foldworks.msa.a3m",
    "build_database": "foldworks.msa.build_db", "run_hhblits": "foldworks.msa.search",
    "search_query": "foldworks.msa.search", "search_shard": "foldworks.msa.mmseqs_search",
    "resolve_msa_config": "foldworks.msa.config",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'foldworks.msa' has no attribute {name!r}")
