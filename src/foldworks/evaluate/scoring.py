"""Per-target scoring: read a predicted mmCIF and a reference feature file, compute the metric row.

Only resolved reference residues are scored (``residue_mask`` and a present Cα). Predicted
residues are matched by residue number ``1..L`` along the full sequence (DATA_FORMATS.md §7).
Every heavy atom of the prediction is read (atom37 names; hydrogens and unknown names are
skipped); a prediction with any atom besides CA is *all-atom* and also gets ``lddt_all_atom``
(every resolved reference heavy atom, symmetric side-chain names resolved) and ``rmsd_heavy`` (Å,
heavy atoms present in both); both are NaN for Cα-only predictions.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import gemmi
import numpy as np
import pandas as pd

from foldworks.constants import ATOM_ORDER, ATOM_TYPE_NUM, CA_INDEX, RESTYPE_3TO1
from foldworks.evaluate import metrics
from foldworks.fsutil import write_tsv_atomic
from foldworks.ids import split_target

log = logging.getLogger(__name__)

#: Columns of ``results/metrics/*.tsv`` in order.
METRIC_COLUMNS: tuple[str, ...] = (
    "target", "entry", "chain", "length", "n_resolved",
    "rmsd_ca", "lddt_ca", "gdt_ts", "gdt_ha", "tm_score", "mean_plddt",
    "lddt_all_atom", "rmsd_heavy",
)
#: Columns a metric row may lack (Cα-only scorers): written as empty cells (NaN).
OPTIONAL_COLUMNS: tuple[str, ...] = ("lddt_all_atom", "rmsd_heavy")

#: Columns of ``results/metrics/residues/*.tsv``: one row per resolved reference residue
#: (``residue`` = 1-based index along the full sequence, ``plddt`` 0-100 from the B-factor).
RESIDUE_COLUMNS: tuple[str, ...] = ("target", "residue", "plddt", "lddt_ca")

#: Recognised ``--params`` keys (config slice ``evaluate``) and their defaults.
DEFAULT_PARAMS: dict[str, Any] = {"baseline": "helix"}


def parse_params(text: str) -> dict[str, Any]:
    """Merge the ``--params`` JSON over :data:`DEFAULT_PARAMS`; unknown keys are logged."""
    params = json.loads(text or "{}")
    if not isinstance(params, dict):
        raise ValueError(f"--params must be a JSON object, got {text!r}")
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    if unknown:
        log.warning("ignoring unknown evaluate params: %s", ", ".join(unknown))
    if params.get("baseline", "helix") != "helix":
        raise ValueError(f"evaluate.baseline {params['baseline']!r}: only 'helix' is implemented")
    return {**DEFAULT_PARAMS, **params}


class EvaluationError(RuntimeError):
    """A target cannot be scored; the message names it."""


@dataclass(frozen=True)
class Reference:
    """One reference chain: Cα trace ``ca [L, 3]`` (Å), ``resolved [L]``, ``sequence`` (may be "")
    and its heavy atoms ``atoms [L, 37, 3]`` (Å), ``atom_mask [L, 37]`` (resolved residues only),
    ``aatype [L]`` (``None`` where the feature file has none: no symmetric-name resolution)."""

    target: str
    ca: np.ndarray
    resolved: np.ndarray
    sequence: str
    atoms: np.ndarray | None = None
    atom_mask: np.ndarray | None = None
    aatype: np.ndarray | None = None

    @property
    def length(self) -> int:
        return int(self.ca.shape[0])


@dataclass(frozen=True)
class Prediction:
    """Predicted Cα trace aligned to the full sequence: ``ca [L, 3]`` (NaN where absent),
    ``present [L]``, per-residue ``plddt [L]`` (0-100, NaN where absent or unknown); for an
    all-atom prediction also ``atoms [L, 37, 3]`` (Å, NaN where absent) and ``atom_mask [L, 37]``
    (``None`` for a Cα-only one)."""

    ca: np.ndarray
    present: np.ndarray
    plddt: np.ndarray
    atoms: np.ndarray | None = None
    atom_mask: np.ndarray | None = None

    @property
    def all_atom(self) -> bool:
        """Whether the prediction has any atom besides CA."""
        return self.atom_mask is not None


def load_reference(path: str | Path, target: str) -> Reference:
    """Read ``data/features/{target}.npz`` (atom_positions ``[L, 37, 3]``, atom_mask, residue_mask)."""
    path = Path(path)
    if not path.exists():
        raise EvaluationError(f"target {target}: feature file {path} not found")
    with np.load(path, allow_pickle=False) as data:
        try:
            positions = np.asarray(data["atom_positions"], np.float64)
            atom_mask = np.asarray(data["atom_mask"], bool)
            residue_mask = np.asarray(data["residue_mask"], bool)
        except KeyError as exc:
            raise EvaluationError(f"target {target}: {path} lacks key {exc}") from exc
        sequence = str(data["sequence"]) if "sequence" in data.files else ""
        aatype = np.asarray(data["aatype"], np.int64) if "aatype" in data.files else None
    resolved = residue_mask & atom_mask[:, CA_INDEX]
    return Reference(target, positions[:, CA_INDEX], resolved, sequence, positions,
                     atom_mask & residue_mask[:, None], aatype)


def read_prediction(path: str | Path, target: str, length: int, sequence: str = "") -> Prediction:
    """Read the heavy atoms and CA B-factors (pLDDT) of a one-chain predicted mmCIF with gemmi.

    Residue numbers must lie in ``1..length``; residue names are checked against ``sequence``
    where both are standard amino acids (a mismatch is logged, since it means misnumbering).
    Atoms are placed by name in the atom37 layout (alternate locations: the first one).
    """
    path = Path(path)
    try:
        structure = gemmi.read_structure(str(path))
    except (RuntimeError, ValueError) as exc:
        raise EvaluationError(f"target {target}: cannot read prediction {path}: {exc}") from exc
    if len(structure) == 0 or len(structure[0]) != 1:
        raise EvaluationError(f"target {target}: {path} must hold exactly one chain in one model")
    atoms = np.full((length, ATOM_TYPE_NUM, 3), np.nan)
    plddt = np.full(length, np.nan)
    seen = np.zeros(length, bool)
    mismatches = 0
    for residue in structure[0][0]:
        index = residue.seqid.num - 1
        if not 0 <= index < length:
            raise EvaluationError(
                f"target {target}: residue number {residue.seqid.num} outside 1..{length} in {path}")
        if seen[index]:
            raise EvaluationError(f"target {target}: residue {index + 1} appears twice in {path}")
        seen[index] = True
        for atom in residue:
            slot = ATOM_ORDER.get(atom.name)
            if slot is None or atom.element.name == "H" or not np.isnan(atoms[index, slot, 0]):
                continue
            atoms[index, slot] = (atom.pos.x, atom.pos.y, atom.pos.z)
            if slot == CA_INDEX:
                plddt[index] = atom.b_iso
        expected = sequence[index] if index < len(sequence) else "X"
        found = RESTYPE_3TO1.get(residue.name, "X")
        mismatches += expected != "X" and found != "X" and expected != found
    if mismatches:
        log.warning("target %s: %d residue names differ from the reference sequence", target, mismatches)
    present_atoms = ~np.isnan(atoms[..., 0])
    ca = atoms[:, CA_INDEX]
    if not np.delete(present_atoms, CA_INDEX, axis=1).any():
        return Prediction(ca, present_atoms[:, CA_INDEX], plddt)
    return Prediction(ca, present_atoms[:, CA_INDEX], plddt, atoms, present_atoms)


def score_prediction(prediction: Prediction, reference: Reference) -> dict[str, Any]:
    """The metric row of one target (columns :data:`METRIC_COLUMNS`)."""
    target = reference.target
    resolved = reference.resolved
    n_resolved = int(resolved.sum())
    if n_resolved == 0:
        raise EvaluationError(f"target {target}: the reference has no resolved residue")
    paired = resolved & prediction.present
    if paired.sum() < n_resolved:
        log.warning("target %s: %d of %d resolved residues have no predicted CA",
                    target, n_resolved - int(paired.sum()), n_resolved)
    pred_ca = np.nan_to_num(prediction.ca)
    lddt = metrics.lddt_ca(pred_ca, reference.ca, resolved, prediction.present)
    if paired.any():
        found = metrics.superposition_scores(pred_ca[paired], reference.ca[paired], length=n_resolved)
        rmsd, tm = found.rmsd, found.tm_score
        ts, ha = found.gdt(metrics.GDT_TS_CUTOFFS), found.gdt(metrics.GDT_HA_CUTOFFS)
    else:
        rmsd, tm, ts, ha = math.nan, 0.0, 0.0, 0.0
    plddt = prediction.plddt[paired]
    plddt = plddt[~np.isnan(plddt)]
    entry, chain = split_target(target)
    return {
        "target": target, "entry": entry, "chain": chain,
        "length": reference.length, "n_resolved": n_resolved,
        "rmsd_ca": rmsd, "lddt_ca": lddt, "gdt_ts": ts, "gdt_ha": ha, "tm_score": tm,
        "mean_plddt": float(plddt.mean()) if plddt.size else math.nan,
        **all_atom_scores(prediction, reference),
    }


def all_atom_scores(prediction: Prediction, reference: Reference) -> dict[str, float]:
    """``lddt_all_atom`` and ``rmsd_heavy`` (Å) of an all-atom prediction over the resolved
    reference heavy atoms (OXT included where resolved: a model without it loses those pairs, as
    in OpenStructure); NaN for a Cα-only prediction or a reference without atoms."""
    if not prediction.all_atom or reference.atoms is None or reference.atom_mask is None:
        return {"lddt_all_atom": math.nan, "rmsd_heavy": math.nan}
    pred = np.nan_to_num(prediction.atoms)
    # aatype resolves symmetric names (ASP OD1/OD2, ...); without it names are taken as given
    lddt = metrics.lddt(pred, reference.atoms, reference.atom_mask, prediction.atom_mask,
                        aatype=reference.aatype)
    shared = reference.atom_mask & prediction.atom_mask
    rmsd = math.nan
    if shared.any():
        rmsd = metrics.rmsd_heavy(pred, reference.atoms, reference.atom_mask, prediction.atom_mask)
    return {"lddt_all_atom": float(lddt), "rmsd_heavy": float(rmsd)}


def residue_rows(prediction: Prediction, reference: Reference) -> list[dict[str, Any]]:
    """Per-residue rows (columns :data:`RESIDUE_COLUMNS`) for the resolved reference residues:
    the model's pLDDT and the residue's lDDT-Cα (0 where the model lacks its Cα)."""
    per_residue = metrics.lddt_ca(np.nan_to_num(prediction.ca), reference.ca, reference.resolved,
                                  prediction.present, per_residue=True)
    return [{"target": reference.target, "residue": int(index) + 1,
             "plddt": float(prediction.plddt[index]), "lddt_ca": float(per_residue[index])}
            for index in np.flatnonzero(reference.resolved)]


def score_file(prediction_path: Path, features_dir: Path, target: str
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score ``prediction_path`` against ``{features_dir}/{target}.npz``: the metric row and the
    per-residue rows."""
    reference = load_reference(features_dir / f"{target}.npz", target)
    prediction = read_prediction(prediction_path, target, reference.length, reference.sequence)
    return score_prediction(prediction, reference), residue_rows(prediction, reference)


def format_value(value: Any) -> str:
    """TSV cell: floats with 4 decimals, NaN as an empty cell, everything else via ``str``."""
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else f"{float(value):.4f}"
    return str(value)


def write_metrics(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write metric rows sorted by target, byte-identical for identical inputs (atomic)."""
    ordered = sorted(rows, key=lambda row: row["target"])
    cells = [[format_value(row[column] if column not in OPTIONAL_COLUMNS else row.get(column, math.nan))
              for column in METRIC_COLUMNS] for row in ordered]
    write_tsv_atomic(path, METRIC_COLUMNS, cells)


def write_residues(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write per-residue rows sorted by target and residue (atomic, 4-decimal floats)."""
    ordered = sorted(rows, key=lambda row: (row["target"], row["residue"]))
    cells = [[format_value(row[column]) for column in RESIDUE_COLUMNS] for row in ordered]
    write_tsv_atomic(path, RESIDUE_COLUMNS, cells)


def read_metrics(path: str | Path) -> pd.DataFrame:
    """Read a metrics TSV (empty cells become NaN; ``chain`` stays a string)."""
    return pd.read_csv(path, sep="\t", dtype={"target": str, "entry": str, "chain": str},
                       keep_default_na=False, na_values=[""])


def split_targets(chains_table: str | Path, splits: Sequence[str]) -> list[str]:
    """Targets of ``data/chains.parquet`` that passed the filters and lie in ``splits`` (sorted)."""
    table = pd.read_parquet(chains_table, columns=["entry", "chain", "split", "passed_filters"])
    chosen = table[table["passed_filters"].astype(bool) & table["split"].isin(list(splits))]
    return sorted(f"{entry}_{chain}" for entry, chain in zip(chosen["entry"], chosen["chain"]))
