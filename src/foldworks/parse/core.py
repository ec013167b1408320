"""Parse one entry (mmCIF, or legacy PDB converted on the fly) into per-chain atom37 arrays.

:func:`parse_entry` is pure (reads one file, returns a :class:`ParsedEntry`). A broken entry
does not raise: it returns ``status="failed"`` with a one-line reason naming the entry.
Cleaning rules: :mod:`foldworks.parse.atoms` (placement, altlocs, MSE) and
:mod:`foldworks.parse.residues` (sequence letters, molecule types); metadata:
:mod:`foldworks.parse.metadata`. Hydrogens/deuterium and waters are removed with gemmi
(``remove_hydrogens`` / ``remove_waters``); only the first model present is kept (1CRR starts at 21).
Crystallisation aids (:data:`CRYSTALLIZATION_AIDS`, the AlphaFold 3 list) are removed from
crystallographic entries (any method containing ``DIFFRACTION`` or ``CRYSTALLOGRAPHY``), as AF3
does. Every remaining non-polymer/branched residue is recorded in ``ligands`` with a ``kind``:
``ion`` (a single heavy atom, e.g. ``ZN``, ``NA``, ``CL``), ``branched`` (glycan entity),
``ligand`` (anything else), or ``water`` (only with ``remove_waters: false``).
"""

from __future__ import annotations

import collections
import gzip
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import gemmi
import numpy as np

from foldworks.fetch.convert import structure_to_mmcif
from foldworks.ids import CHAIN_PATTERN, normalize_entry
from foldworks.parse import atoms, residues
from foldworks.parse.metadata import can_sequences, entry_metadata

LOG = logging.getLogger(__name__)

LIGAND_ENTITY_TYPES = (gemmi.EntityType.NonPolymer, gemmi.EntityType.Branched)
# AlphaFold 3 supplement, Table 9 ("crystallization aids").
CRYSTALLIZATION_AIDS = frozenset({"SO4", "GOL", "EDO", "PO4", "ACT", "PEG", "DMS", "TRS", "PGE", "PG4",
                                  "FMT", "EPE", "MPD", "MES", "CD", "IOD"})
CRYSTALLOGRAPHIC_METHOD_WORDS = ("DIFFRACTION", "CRYSTALLOGRAPHY")
PDB_SUFFIXES = (".pdb", ".pdb.gz", ".ent", ".ent.gz")


class ParseError(ValueError):
    """The file cannot be turned into chains (no atoms, no polymer, unreadable)."""


@dataclass(frozen=True)
class ParseOptions:
    """Cleaning switches (``config: parse``)."""

    mse_to_met: bool = True
    remove_hydrogens: bool = True
    remove_waters: bool = True
    remove_crystallization_aids: bool = True
    first_model_only: bool = True

    @classmethod
    def from_mapping(cls, options: "Mapping[str, Any] | ParseOptions | None") -> "ParseOptions":
        """Accept a dict (unknown keys raise ``ValueError``) or an instance."""
        if isinstance(options, ParseOptions):
            return options
        options = dict(options or {})
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown parse option(s) {unknown}")
        obj = cls(**{k: bool(v) for k, v in options.items()})
        if not obj.first_model_only:
            raise ValueError("first_model_only=false is not supported: the atom37 layout stores one model")
        return obj


@dataclass
class ParsedEntry:
    """One parsed entry: the JSON metadata (``to_json``) and npz arrays per protein chain."""

    entry: str
    status: str = "ok"
    reason: str | None = None
    failed_stage: str | None = None  # "fetch" or "parse" when status is "failed"
    method: str | None = None
    resolution: float | None = None
    release_date: str | None = None
    deposition_date: str | None = None
    n_models: int | None = None
    chains: list[dict[str, Any]] = field(default_factory=list)
    ligands: list[dict[str, Any]] = field(default_factory=list)
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``data/parsed/{entry}.json`` object (docs/DATA_FORMATS.md section 2)."""
        keys = ("entry", "status", "reason", "failed_stage", "method", "resolution", "release_date",
                "deposition_date", "n_models", "chains", "ligands")
        return {k: getattr(self, k) for k in keys}

    def npz_arrays(self) -> dict[str, np.ndarray]:
        """Flat ``{"{chain}/{name}": array}`` mapping for the npz file."""
        return {f"{c}/{k}": v for c, group in self.arrays.items() for k, v in group.items()}


def read_block(path: Path) -> gemmi.cif.Block:
    """mmCIF block of ``path`` (``.cif[.gz]``; legacy ``.pdb[.gz]``/``.ent[.gz]`` converted)."""
    if path.name.lower().endswith(PDB_SUFFIXES):
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        return structure_to_mmcif(gemmi.read_pdb_string(text), text).sole_block()
    return gemmi.cif.read(str(path)).sole_block()


def _chain_record(chain: str, subchain: str, entity: gemmi.Entity, sequence: str, mol_type: str,
                  resolved: np.ndarray, backbone: np.ndarray | None = None) -> dict[str, Any]:
    """``backbone [L]``: residues with N, CA and C resolved (proteins); ``n_backbone`` is absent otherwise."""
    n_resolved = int(resolved.sum())
    record = {
        "chain": chain, "label_asym_id": subchain, "entity_id": entity.name,
        "molecule_type": mol_type, "sequence": sequence, "length": len(sequence),
        "n_resolved": n_resolved, "resolved_fraction": round(n_resolved / len(sequence), 4) if sequence else 0.0,
    }
    if backbone is not None:
        record["n_backbone"] = int(backbone.sum())
    return record


def _polymer_subchains(table: atoms.ModelTable) -> dict[tuple[str, str], list[int]]:
    """(author chain, label_asym_id) → residue indices of each polymer subchain, in model order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rid, etype in enumerate(table.entity_type):
        if etype == gemmi.EntityType.Polymer:
            groups.setdefault((table.chain[rid], table.subchain[rid]), []).append(rid)
    return groups


def _polymer_chain(table: atoms.ModelTable, rids: list[int], entity: gemmi.Entity, can: dict[str, str],
                   keep: np.ndarray, slots: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    """Record (and, for proteins, atom37 arrays) of one polymer subchain."""
    mons = [gemmi.Entity.first_mon(m) for m in entity.full_sequence]
    if not mons:  # no _entity_poly_seq: fall back to the modelled residues in order
        mons = [table.res_name[rid] for rid in rids]
        for index, rid in enumerate(rids, start=1):
            table.label_seq[rid] = index
    mol_type = residues.molecule_type(entity.polymer_type)
    sequence = residues.sequence_letters(mons, mol_type, can.get(entity.name))
    placed = atoms.place_residues(table, rids, mons)
    arrays, backbone = None, None
    if mol_type == residues.PROTEIN:
        arrays = atoms.protein_arrays(table, placed, sequence, keep, slots)
        resolved = arrays["residue_mask"]
        backbone = arrays["atom_mask"][:, :3].all(-1)  # atom37 order starts N, CA, C
    else:
        resolved = atoms.resolved_by_atom(table, placed, b"C1'" if mol_type in (residues.DNA, residues.RNA) else None)
    record = _chain_record(table.chain[rids[0]], table.subchain[rids[0]], entity, sequence, mol_type, resolved,
                           backbone)
    return record, arrays


def _chains(st: gemmi.Structure, table: atoms.ModelTable, block: gemmi.cif.Block, entry: str,
            opts: ParseOptions) -> tuple[list[dict[str, Any]], dict[str, dict[str, np.ndarray]]]:
    """Records of every polymer chain and atom37 arrays of the protein ones (keyed by author chain)."""
    entity_of = {sub: ent for ent in st.entities for sub in ent.subchains}
    can = can_sequences(block)
    keep = atoms.altloc_keep(table)
    slots = atoms.atom_slots(table, opts.mse_to_met)
    records: list[dict[str, Any]] = []
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for (chain, subchain), rids in _polymer_subchains(table).items():
        if not CHAIN_PATTERN.fullmatch(chain) or any(r["chain"] == chain for r in records):
            LOG.warning("entry %s: skipping polymer %s of chain %r (invalid or duplicate chain ID)",
                        entry, subchain, chain)
            continue
        entity = entity_of.get(subchain)
        if entity is None:
            LOG.warning("entry %s: polymer subchain %s has no entity; skipped", entry, subchain)
            continue
        record, chain_arrays = _polymer_chain(table, rids, entity, can, keep, slots)
        records.append(record)
        if chain_arrays is not None:
            arrays[chain] = chain_arrays
    return records, arrays


def _ligand_kind(etype: gemmi.EntityType, n_atom_names: int) -> str:
    if etype == gemmi.EntityType.Water:
        return "water"
    if etype == gemmi.EntityType.Branched:
        return "branched"
    return "ion" if n_atom_names == 1 else "ligand"


def _ligands(table: atoms.ModelTable, keep_waters: bool) -> list[dict[str, Any]]:
    """``[{chain, name, count, kind}]`` of non-polymer/branched residues (and waters if kept), sorted.

    ``kind`` is ``ion`` for a residue with one distinct heavy-atom name (altlocs of one ion count once).
    """
    wanted = LIGAND_ENTITY_TYPES + ((gemmi.EntityType.Water,) if keep_waters else ())
    pairs = np.unique(table.res_index.astype(np.int64) * 65536 + np.unique(table.atom_name, return_inverse=True)[1].ravel())
    n_names = np.bincount(pairs // 65536, minlength=len(table.res_name))
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter(
        (table.chain[rid], table.res_name[rid], _ligand_kind(etype, int(n_names[rid])))
        for rid, etype in enumerate(table.entity_type) if etype in wanted)
    return [{"chain": c, "name": n, "count": k, "kind": kind} for (c, n, kind), k in sorted(counts.items())]


def is_crystallographic(method: str | None) -> bool:
    """True when any ``+``-joined part of ``method`` is a diffraction/crystallography method."""
    return bool(method) and any(word in method.upper() for word in CRYSTALLOGRAPHIC_METHOD_WORDS)


def remove_crystallization_aids(model: gemmi.Model) -> int:
    """Delete non-polymer residues named in :data:`CRYSTALLIZATION_AIDS` from ``model``; return the count."""
    removed = 0
    for chain in model:
        for index in range(len(chain) - 1, -1, -1):
            res = chain[index]
            if res.name in CRYSTALLIZATION_AIDS and res.entity_type != gemmi.EntityType.Polymer:
                del chain[index]
                removed += 1
    return removed


def _parse(path: Path, entry: str, opts: ParseOptions) -> ParsedEntry:
    block = read_block(path)
    st = gemmi.make_structure_from_block(block)
    if len(st) == 0 or st[0].count_atom_sites() == 0:
        raise ParseError("no _atom_site records")
    metadata = entry_metadata(block, entry)
    n_models = len(st)
    for index in range(len(st) - 1, 0, -1):  # first model present only (1CRR: model 21)
        del st[index]
    if opts.remove_hydrogens:
        st.remove_hydrogens()
    if opts.remove_waters:
        st.remove_waters()
    if opts.remove_crystallization_aids and is_crystallographic(metadata["method"]):
        removed = remove_crystallization_aids(st[0])
        if removed:
            LOG.info("entry %s: removed %d crystallisation-aid residues", entry, removed)
    st.remove_empty_chains()
    table = atoms.model_table(st[0], st)
    records, arrays = _chains(st, table, block, entry, opts)
    if not records:
        raise ParseError("no polymer chains (only ligands, ions or water)")
    parsed = ParsedEntry(entry=entry, n_models=n_models, chains=records, arrays=arrays,
                         ligands=_ligands(table, not opts.remove_waters))
    for key, value in metadata.items():
        setattr(parsed, key, value)
    return parsed


def failed_entry(entry: str, reason: str) -> ParsedEntry:
    """A ``status="failed"`` result with a one-line ``reason`` naming the entry."""
    line = " ".join(reason.split())
    if entry not in line:
        line = f"entry {entry}: {line}"
    return ParsedEntry(entry=entry, status="failed", reason=line[:500], failed_stage="parse")


def parse_entry(path: str | Path, entry: str, options: Mapping[str, Any] | ParseOptions | None = None) -> ParsedEntry:
    """Parse ``path`` as entry ``entry``; invalid ``entry``/``options`` raise, broken files do not."""
    entry = normalize_entry(entry)
    opts = ParseOptions.from_mapping(options)
    try:
        return _parse(Path(path), entry, opts)
    except Exception as exc:  # noqa: BLE001 - any broken input must yield a failed record
        LOG.error("entry %s: parse failed: %s: %s", entry, type(exc).__name__, exc)
        return failed_entry(entry, f"entry {entry}: {type(exc).__name__}: {exc}")
