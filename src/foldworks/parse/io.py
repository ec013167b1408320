"""Read/write ``data/parsed/{entry}.{npz,json}`` (docs/DATA_FORMATS.md section 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from foldworks import fsutil
from foldworks.ids import validate_chain
from foldworks.parse.core import ParsedEntry

ARRAY_NAMES = ("aatype", "atom_positions", "atom_mask", "residue_mask", "auth_seq_id")


def write_parsed(parsed: ParsedEntry, npz_path: str | Path, json_path: str | Path) -> None:
    """Write the npz (empty for failed entries) and then the JSON, each atomically."""
    fsutil.write_npz_atomic(npz_path, parsed.npz_arrays())
    fsutil.write_json_atomic(json_path, parsed.to_json())


def read_parsed_json(path: str | Path) -> dict:
    """The metadata JSON of one parsed entry."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def load_parsed_chain(npz_path: str | Path, chain: str) -> dict[str, np.ndarray]:
    """Arrays of one protein chain: ``aatype [L]``, ``atom_positions [L,37,3]`` (Å), ``atom_mask [L,37]``,
    ``residue_mask [L]``, ``auth_seq_id [L]``. Raises ``KeyError`` naming the chain if absent."""
    chain = validate_chain(chain)
    with np.load(npz_path, allow_pickle=False) as data:
        missing = [n for n in ARRAY_NAMES if f"{chain}/{n}" not in data.files]
        if missing:
            raise KeyError(f"chain {chain!r} not in {npz_path} (missing {missing})")
        return {name: data[f"{chain}/{name}"] for name in ARRAY_NAMES}
