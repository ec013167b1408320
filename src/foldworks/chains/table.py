"""Build the chain table from parsed entries and apply declarative filters.

One row per polymer chain of every parsed entry. Rows failing a filter stay in the table with
``passed_filters = False`` and the first failing filter in ``filter_reason``, so the table says
why a chain is absent from training.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from foldworks.ids import normalize_entry, sequence_hash

log = logging.getLogger(__name__)

TABLE_COLUMNS: tuple[str, ...] = (
    "entry", "chain", "label_asym_id", "entity_id", "molecule_type", "sequence", "sequence_hash", "length",
    "n_resolved", "resolved_fraction", "backbone_fraction", "method", "resolution", "release_date", "deposition_date", "n_models",
    "ligands", "ions",
)
DATE_COLUMNS: tuple[str, ...] = ("release_date", "deposition_date")


class EmptyDatasetError(RuntimeError):
    """A filter removed every remaining chain: an error, never an empty dataset."""


def read_parsed_records(json_paths: Iterable[str | Path]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Read parse-stage JSON files; return (chain rows, failures ``{entry, stage, reason}``)."""
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, str]] = []
    for path in sorted(map(Path, json_paths)):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            entry = normalize_entry(record["entry"])
        except (OSError, ValueError, KeyError, TypeError) as exc:  # never one file stopping the table
            entry = path.name.removesuffix(".json")
            failures.append({"entry": entry, "stage": "parse", "reason": f"entry {entry}: {path} unreadable: {exc}"})
            continue
        if record.get("status") != "ok":
            stage = str(record.get("failed_stage") or "parse")
            failures.append({"entry": entry, "stage": stage, "reason": " ".join(str(record.get("reason")).split())})
            continue
        for chain in record["chains"]:
            rows.append(_chain_row(entry, record, chain))
    return rows, failures


def _chain_row(entry: str, record: dict[str, Any], chain: dict[str, Any]) -> dict[str, Any]:
    sequence = str(chain["sequence"])
    return {
        "entry": entry,
        "chain": str(chain["chain"]),
        "entity_id": str(chain.get("entity_id", "")),
        "molecule_type": str(chain.get("molecule_type", "other")),
        "sequence": sequence,
        "sequence_hash": sequence_hash(sequence) if sequence else "",
        "length": int(chain.get("length", len(sequence))),
        "n_resolved": int(chain.get("n_resolved", 0)),
        "resolved_fraction": float(chain.get("resolved_fraction", 0.0)),
        "backbone_fraction": (round(int(chain["n_backbone"]) / len(sequence), 4)
                              if "n_backbone" in chain and sequence else None),
        "method": str(record.get("method") or ""),
        "resolution": record.get("resolution"),
        "release_date": record.get("release_date"),
        "deposition_date": record.get("deposition_date"),
        "n_models": int(record.get("n_models") or 0),
        "label_asym_id": str(chain.get("label_asym_id", "")),
        "ligands": _ligand_names(record, ion=False),
        "ions": _ligand_names(record, ion=True),
    }


def _ligand_names(record: dict[str, Any], ion: bool) -> str:
    """Comma-separated sorted CCD names of the entry's ions (``ion``) or other ligands/glycans."""
    names = {str(lig["name"]) for lig in record.get("ligands") or []
             if lig.get("kind") != "water" and (lig.get("kind") == "ion") == ion}
    return ",".join(sorted(names))


def rows_to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Chain rows → DataFrame with fixed column order and dtypes (``resolution``, ``backbone_fraction``
    float, NaN if none)."""
    frame = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for column in ("resolution", "backbone_fraction"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in DATE_COLUMNS:
        frame[column] = frame[column].astype("string")
    return frame.sort_values(["entry", "chain"], kind="stable").reset_index(drop=True)


def _max_residue_fraction(sequence: str) -> float:
    return max(sequence.count(aa) for aa in set(sequence)) / len(sequence) if sequence else 1.0


def _has_known_residue(sequence: str) -> bool:
    return any(letter != "X" for letter in sequence)


def filter_masks(frame: pd.DataFrame, filters: dict[str, Any]) -> list[tuple[str, pd.Series]]:
    """Ordered ``(name, keep_mask)`` pairs for the configured filters (absent/None = off).

    ``unknown_residues`` is always on: a chain whose every residue is unknown (``X``, e.g. all
    ``UNK``) has no sequence to align or learn from.
    """
    masks: list[tuple[str, pd.Series]] = [("unknown_residues", frame["sequence"].apply(_has_known_residue))]
    if filters.get("molecule_types"):
        masks.append(("molecule_types", frame["molecule_type"].isin(filters["molecule_types"])))
    if filters.get("methods"):
        allowed = [m.upper() for m in filters["methods"]]
        masks.append(("methods", frame["method"].str.upper().apply(
            lambda m: any(part in allowed for part in m.split("+")))))
    if filters.get("resolution_max") is not None:
        # Methods without a resolution (NMR) pass; use `methods` to exclude them.
        res = frame["resolution"]
        masks.append(("resolution_max", res.isna() | (res <= float(filters["resolution_max"]))))
    if filters.get("release_date_max"):
        masks.append(("release_date_max", frame["release_date"].fillna("9999") <= str(filters["release_date_max"])))
    if filters.get("length_min") is not None:
        masks.append(("length_min", frame["length"] >= int(filters["length_min"])))
    if filters.get("length_max") is not None:
        masks.append(("length_max", frame["length"] <= int(filters["length_max"])))
    if filters.get("min_resolved_fraction") is not None:
        masks.append(("min_resolved_fraction", frame["resolved_fraction"] >= float(filters["min_resolved_fraction"])))
    if filters.get("min_backbone_fraction") is not None and "backbone_fraction" in frame:
        # Non-protein chains and chains parsed without backbone counts (NaN) pass.
        frac = frame["backbone_fraction"]
        masks.append(("min_backbone_fraction", frac.isna() | (frac >= float(filters["min_backbone_fraction"]))))
    if filters.get("max_single_residue_fraction") is not None:
        frac = frame["sequence"].apply(_max_residue_fraction)
        masks.append(("max_single_residue_fraction", frac <= float(filters["max_single_residue_fraction"])))
    return masks


def apply_filters(frame: pd.DataFrame, filters: dict[str, Any], allow_empty: bool = False) -> pd.DataFrame:
    """Add ``passed_filters`` / ``filter_reason``; log each filter's removals; refuse an empty result
    (with ``allow_empty`` the caller checks, after recording why each entry lost its chains)."""
    frame = frame.copy()
    frame["passed_filters"] = True
    frame["filter_reason"] = ""
    for name, keep in filter_masks(frame, filters):
        removed = frame["passed_filters"] & ~keep
        log.info("filter %s removed %d of %d chains", name, int(removed.sum()), int(frame["passed_filters"].sum()))
        frame.loc[removed, "filter_reason"] = name
        frame.loc[removed, "passed_filters"] = False
        if not frame["passed_filters"].any():
            if allow_empty:
                frame.attrs["emptied_by"] = name
                break
            raise EmptyDatasetError(empty_message(name))
    return frame


def empty_message(filter_name: str) -> str:
    return f"filter {filter_name!r} removed every remaining chain; loosen config chains.filters"


def entries_without_chains(frame: pd.DataFrame) -> dict[str, str]:
    """``{entry: reason}`` for entries none of whose chains passed, e.g.
    ``"entry 1bna: no chain kept (A: molecule_types [dna]; B: molecule_types [dna])"``."""
    out: dict[str, str] = {}
    for entry, rows in frame.groupby("entry", sort=True):
        if rows["passed_filters"].any():
            continue
        parts = [f"{c}: {r or 'filtered'} [{m}, {n} aa]" for c, r, m, n in
                 zip(rows["chain"], rows["filter_reason"], rows["molecule_type"], rows["length"])]
        shown = "; ".join(parts[:6]) + (f"; +{len(parts) - 6} more" if len(parts) > 6 else "")
        out[str(entry)] = f"entry {entry}: no chain kept ({shown})"
    return out
