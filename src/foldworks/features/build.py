"""Per-chain model features (DATA_FORMATS.md section 5) from parsed chain arrays + an A3M.

The MSA is deduplicated (identical query-aligned rows: the first is kept, with its deletion
counts) and capped at ``max_msa_rows`` rows: the query row is always row 0; the other rows are
a uniform random subset, kept in their original (hhblits rank) order, drawn with a generator
seeded by ``(seed, sequence hash)`` so the same inputs always give the same features.

Missing-MSA policy: an a3m whose metadata says ``status: failed`` (every search attempt failed;
see ``data/failures/msa/<hash>.json``) holds only the query. Features are then built only when
the config allows single-sequence fallback (``msa.allow_single_sequence_fallback``), and are
marked ``msa_source = "single_sequence_fallback"``; otherwise :class:`MissingMsaError` refuses
the target, so training never silently uses a chain without its MSA.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from foldworks.constants import ATOM_TYPE_NUM, RESTYPES
from foldworks.ids import SEQUENCE_HASH_PATTERN, sequence_hash, split_target
from foldworks.msa.a3m import A3MError, a3m_records, parse_a3m, read_header

#: Keys of a features file, in a fixed order.
FEATURE_KEYS: tuple[str, ...] = (
    "aatype", "msa", "deletion_matrix", "residue_mask", "atom_positions", "atom_mask",
    "target", "sequence", "sequence_hash", "msa_source",
)
#: Default MSA row cap: enough rows for AlphaFold2's 512 cluster centres + 5,120 extra rows.
DEFAULT_MAX_MSA_ROWS: int = 512 + 5120
#: ``msa_source`` of features built without an alignment (the a3m search failed).
FALLBACK_SOURCE = "single_sequence_fallback"
#: Per-chain arrays read from the parsed npz (``"{chain}/<name>"``).
CHAIN_KEYS: tuple[str, ...] = ("aatype", "atom_positions", "atom_mask", "residue_mask")


class FeatureError(ValueError):
    """Inputs of one target are inconsistent; the message names the target."""


class MissingMsaError(FeatureError):
    """The target's MSA failed and single-sequence fallback is not allowed."""


def msa_source(a3m_text: str, target: str, allow_fallback: bool) -> str:
    """Where the MSA came from (the a3m metadata's ``tool``; ``"a3m"`` for an a3m without
    foldworks metadata), or :data:`FALLBACK_SOURCE`; raises :class:`MissingMsaError` for a
    failed search unless ``allow_fallback``."""
    try:
        meta = read_header(a3m_text)
    except A3MError as exc:
        raise FeatureError(f"{target}: {exc}") from exc
    if meta is None:
        return "a3m"
    if meta.get("status") == "failed":
        seq_hash = meta.get("sequence_hash", "?")
        if not allow_fallback:
            raise MissingMsaError(
                f"{target}: no MSA for sequence {seq_hash} (search failed: {meta.get('reason', 'unknown')}; "
                f"see data/failures/msa/{seq_hash}.json); refusing single-sequence features because "
                "msa.allow_single_sequence_fallback is false")
        return FALLBACK_SOURCE
    return str(meta.get("tool", "a3m"))


def query_only_a3m(aatype: np.ndarray) -> str:
    """The one-row a3m of a chain (its sequence from ``aatype``, unknown residues as ``X``)."""
    sequence = decode_aatype(aatype)
    return f">{sequence_hash(sequence)}\n{sequence}\n"


def decode_aatype(aatype: np.ndarray) -> str:
    """One-letter sequence of ``aatype`` (``RESTYPES``; 20 and anything else → ``X``)."""
    return "".join(RESTYPES[i] if 0 <= i < len(RESTYPES) else "X" for i in np.asarray(aatype).tolist())


def _chain_arrays(chain_arrays: Mapping[str, np.ndarray], target: str) -> dict[str, np.ndarray]:
    """Typed copies of the parse arrays; shapes checked against ``L = len(aatype)``."""
    missing = [key for key in CHAIN_KEYS if key not in chain_arrays]
    if missing:
        raise FeatureError(f"{target}: chain arrays lack {', '.join(missing)}")
    aatype = np.asarray(chain_arrays["aatype"]).astype(np.int64)
    length = aatype.shape[0] if aatype.ndim == 1 else -1
    out = {
        "aatype": aatype,
        "atom_positions": np.asarray(chain_arrays["atom_positions"], dtype=np.float32),
        "atom_mask": np.asarray(chain_arrays["atom_mask"]).astype(bool),
        "residue_mask": np.asarray(chain_arrays["residue_mask"]).astype(bool),
    }
    expected = {"aatype": (length,), "atom_positions": (length, ATOM_TYPE_NUM, 3),
                "atom_mask": (length, ATOM_TYPE_NUM), "residue_mask": (length,)}
    for key, shape in expected.items():
        if length < 1 or out[key].shape != shape:
            raise FeatureError(f"{target}: {key} has shape {out[key].shape}, expected {shape}")
    return out


def _check_query(msa: np.ndarray, aatype: np.ndarray, header: str, query: str, target: str) -> str:
    """Raise unless MSA row 0 encodes ``aatype``; return the query's sequence hash."""
    if msa.shape[1] != aatype.shape[0] or not np.array_equal(msa[0].astype(np.int64), aatype):
        chain_seq = decode_aatype(aatype)
        raise FeatureError(
            f"{target}: a3m query ({msa.shape[1]} residues, {query[:30]}...) does not match the "
            f"chain sequence ({len(chain_seq)} residues, {chain_seq[:30]}...)")
    if not query.isupper() or not query.isalpha():
        raise FeatureError(f"{target}: a3m query row has gaps or insertions")
    seq_hash = sequence_hash(query)
    name = header.split()[0] if header.split() else ""
    if SEQUENCE_HASH_PATTERN.fullmatch(name) and name != seq_hash:
        raise FeatureError(f"{target}: a3m header {name} is not the hash of its query ({seq_hash})")
    return seq_hash


def deduplicate_rows(msa: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row of ``msa [N, L]``, ascending."""
    _, first = np.unique(np.ascontiguousarray(msa).view(np.dtype((np.void, msa.shape[1]))).ravel(),
                         return_index=True)
    return np.sort(first)


def subsample_rows(n_rows: int, max_rows: int, seed: int, seq_hash: str) -> np.ndarray:
    """Row indices ``[<= max_rows]``: 0 first, then a seeded random subset of 1..n-1 in order."""
    if max_rows < 1:
        raise ValueError(f"max_msa_rows must be >= 1, got {max_rows}")
    if n_rows <= max_rows:
        return np.arange(n_rows)
    digest = hashlib.sha256(f"{int(seed)}:{seq_hash}".encode("ascii")).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    chosen = rng.choice(np.arange(1, n_rows), size=max_rows - 1, replace=False)
    return np.concatenate([[0], np.sort(chosen)])


def build_features(chain_arrays: Mapping[str, np.ndarray], a3m_text: str | None, target: str,
                   max_msa_rows: int = DEFAULT_MAX_MSA_ROWS, seed: int = 0,
                   allow_fallback: bool = False, chain_target: bool = True) -> dict[str, np.ndarray]:
    """Feature arrays of one chain (keys :data:`FEATURE_KEYS`, dtypes as DATA_FORMATS.md §5).

    ``chain_arrays`` holds ``aatype [L]``, ``atom_positions [L, 37, 3]`` (Å), ``atom_mask
    [L, 37]`` and ``residue_mask [L]``; ``a3m_text``'s first record must be the chain's
    sequence (compared as ``aatype`` tokens, so non-standard letters match ``X``).
    ``sequence`` is the A3M query row, ``sequence_hash`` its hash, ``msa_source`` the search
    tool or :data:`FALLBACK_SOURCE`. ``a3m_text=None`` (no alignment at all) and a failed
    search's placeholder a3m are allowed only with ``allow_fallback``. Raises
    :class:`FeatureError` naming ``target`` on any inconsistency (:class:`MissingMsaError`
    for a refused missing MSA). ``chain_target=False``: ``target`` is a free name (a FASTA
    record of the inference stage), not ``{entry}_{chain}``.
    """
    if chain_target:
        split_target(target)
    arrays = _chain_arrays(chain_arrays, target)
    if a3m_text is None:
        if not allow_fallback:
            raise MissingMsaError(f"{target}: no a3m given and msa.allow_single_sequence_fallback is false")
        a3m_text, source = query_only_a3m(arrays["aatype"]), FALLBACK_SOURCE
    else:
        source = msa_source(a3m_text, target, allow_fallback)
    try:
        records = a3m_records(a3m_text)
        msa, deletion_matrix = parse_a3m(a3m_text)
    except A3MError as exc:
        raise FeatureError(f"{target}: {exc}") from exc
    header, query = records[0]
    seq_hash = _check_query(msa, arrays["aatype"], header, query, target)
    unique = deduplicate_rows(msa)
    keep = unique[subsample_rows(len(unique), int(max_msa_rows), seed, seq_hash)]
    return {
        "aatype": arrays["aatype"],
        "msa": msa[keep].astype(np.int8),
        "deletion_matrix": deletion_matrix[keep].astype(np.float32),
        "residue_mask": arrays["residue_mask"],
        "atom_positions": arrays["atom_positions"],
        "atom_mask": arrays["atom_mask"],
        "target": np.asarray(target),
        "sequence": np.asarray(query),
        "sequence_hash": np.asarray(seq_hash),
        "msa_source": np.asarray(source),
    }


def load_chain_arrays(parsed_npz: str | os.PathLike[str], chain: str, target: str) -> dict[str, np.ndarray]:
    """The ``"{chain}/<name>"`` arrays of a parse-stage npz (``CHAIN_KEYS``), keys unprefixed."""
    with np.load(parsed_npz, allow_pickle=False) as data:
        missing = [f"{chain}/{key}" for key in CHAIN_KEYS if f"{chain}/{key}" not in data.files]
        if missing:
            raise FeatureError(f"{target}: {parsed_npz} lacks {', '.join(missing)}")
        return {key: data[f"{chain}/{key}"] for key in CHAIN_KEYS}


def load_features(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a features npz; 0-d string arrays (``target``, ``sequence``, ``sequence_hash``,
    ``msa_source``) come back as Python ``str``, everything else as ``np.ndarray``."""
    with np.load(Path(path), allow_pickle=False) as data:
        return {key: (str(data[key]) if data[key].ndim == 0 and data[key].dtype.kind == "U" else data[key])
                for key in data.files}
