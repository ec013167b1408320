"""Vectorised atom tables of one model and the atom37 arrays of its protein chains.

Rules:

- Placement uses ``label_seq_id`` (1-based index into ``_entity_poly_seq``), so insertion codes
  and negative author numbers need no special handling. Microheterogeneity (two residues at one
  position): the residue whose name is the *first* one listed in ``_entity_poly_seq`` at that
  position is used; if no modelled residue has that name, the first modelled one.
- Alternate locations: per residue, the altloc with the highest mean occupancy over the
  residue's atoms is kept (ties: the altloc met first in the file), plus all atoms without an
  altloc. Any single-character altloc ID works (``A``, ``1``, ...).
- Atoms are kept where the atom37 layout has a slot of the same name (modified residues keep
  their parent-like atoms; a duplicate name keeps the first atom); with ``mse_to_met`` the
  selenium ``SE`` of MSE goes to ``SD``.
- A residue is resolved when its CA is present; atoms of residues without CA are dropped, so
  ``atom_mask`` is all False and ``auth_seq_id`` is -9999 exactly where ``residue_mask`` is False.

Per-atom work is numpy over :class:`gemmi.FlatStructure`; Python loops only over residues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import gemmi
import numpy as np

from foldworks.constants import ATOM_ORDER, ATOM_TYPE_NUM, CA_INDEX, sequence_to_aatype

UNRESOLVED_SEQ_ID = -9999
_NO_SLOT = -1
_SD_SLOT = ATOM_ORDER["SD"]


@dataclass
class ModelTable:
    """One model as flat arrays. Residue arrays have length ``R``, atom arrays length ``N``."""

    chain: list[str]          # [R] author chain ID
    subchain: list[str]       # [R] label_asym_id
    label_seq: list[int]      # [R] label_seq_id, 0 where absent
    res_name: list[str]       # [R] residue (CCD) name
    auth_seq: np.ndarray      # int32 [R] author residue number
    entity_type: list[gemmi.EntityType]  # [R]
    res_index: np.ndarray     # int64 [N] residue of each atom
    atom_name: np.ndarray     # bytes S8 [N]
    altloc: np.ndarray        # int8 [N], 0 = no altloc
    occ: np.ndarray           # float32 [N]
    pos: np.ndarray           # float64 [N, 3], Å


def model_table(model: gemmi.Model, st: gemmi.Structure) -> ModelTable:
    """Flatten ``model`` (``st`` must hold only this model) into a :class:`ModelTable`."""
    chain, subchain, label_seq, res_name, auth_seq, etype, lengths = [], [], [], [], [], [], []
    for ch in model:
        name = ch.name
        for res in ch:
            chain.append(name)
            subchain.append(res.subchain)
            label_seq.append(res.label_seq or 0)
            res_name.append(res.name)
            auth_seq.append(res.seqid.num)
            etype.append(res.entity_type)
            lengths.append(len(res))
    flat = gemmi.FlatStructure(st)
    if len(flat) != sum(lengths):
        raise ValueError(f"flat table has {len(flat)} atoms, residues hold {sum(lengths)}")
    res_index = np.repeat(np.arange(len(lengths)), lengths)
    names = np.ascontiguousarray(flat.atom_names).view("S8").ravel()
    return ModelTable(chain, subchain, label_seq, res_name, np.asarray(auth_seq, dtype=np.int32), etype, res_index,
                      names, flat.altlocs, flat.occ, flat.pos)


def altloc_keep(table: ModelTable) -> np.ndarray:
    """bool ``[N]``: atoms without altloc plus, per residue, those of the best altloc."""
    has_alt = table.altloc != 0
    if not has_alt.any():
        return np.ones(len(has_alt), dtype=bool)
    key = table.res_index[has_alt] * 256 + (table.altloc[has_alt].astype(np.int64) & 0xFF)
    groups, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    mean = np.round(np.bincount(inverse, weights=table.occ[has_alt]) / np.bincount(inverse), 6)
    group_res = groups // 256
    order = np.lexsort((first, -mean, group_res))  # by residue, best mean, first seen
    sorted_res = group_res[order]
    is_best = np.r_[True, sorted_res[1:] != sorted_res[:-1]]
    keep = ~has_alt
    keep[has_alt] = np.isin(key, groups[order[is_best]])
    return keep


def atom_slots(table: ModelTable, mse_to_met: bool) -> np.ndarray:
    """int64 ``[N]``: atom37 slot of each atom, -1 where the layout has no such atom."""
    unique, inverse = np.unique(table.atom_name, return_inverse=True)
    lookup = np.array([ATOM_ORDER.get(n.decode("ascii", "replace"), _NO_SLOT) for n in unique], dtype=np.int64)
    slots = lookup[inverse.ravel()]
    if mse_to_met:
        is_mse = np.array([n == "MSE" for n in table.res_name], dtype=bool)
        slots[is_mse[table.res_index] & (table.atom_name == b"SE")] = _SD_SLOT
    return slots


def place_residues(table: ModelTable, residue_ids: Sequence[int], first_mons: Sequence[str]) -> np.ndarray:
    """int64 ``[L]``: residue index modelled at each sequence position, -1 where unmodelled."""
    length = len(first_mons)
    placed = np.full(length, -1, dtype=np.int64)
    for rid in residue_ids:
        seq = table.label_seq[rid]
        if not 1 <= seq <= length:
            continue
        idx = seq - 1
        current = placed[idx]
        name = table.res_name[rid]
        if current < 0 or (table.res_name[current] != first_mons[idx] and name == first_mons[idx]):
            placed[idx] = rid
    return placed


def _position_of_atoms(table: ModelTable, placed: np.ndarray) -> np.ndarray:
    """int64 ``[N]``: sequence position of each atom's residue in this chain, -1 if not placed."""
    res_to_pos = np.full(len(table.res_name), -1, dtype=np.int64)
    idx = np.nonzero(placed >= 0)[0]
    res_to_pos[placed[idx]] = idx
    return res_to_pos[table.res_index]


def protein_arrays(table: ModelTable, placed: np.ndarray, sequence: str, keep: np.ndarray,
                   slots: np.ndarray) -> dict[str, np.ndarray]:
    """atom37 arrays of one protein chain (docs/DATA_FORMATS.md section 2), ``L = len(sequence)``."""
    length = len(sequence)
    atom_pos = _position_of_atoms(table, placed)
    sel = np.nonzero((atom_pos >= 0) & keep & (slots >= 0))[0]
    rows, cols = atom_pos[sel], slots[sel]
    _, first = np.unique(rows * ATOM_TYPE_NUM + cols, return_index=True)  # duplicates: first atom wins
    sel, rows, cols = sel[first], rows[first], cols[first]
    positions = np.zeros((length, ATOM_TYPE_NUM, 3), dtype=np.float32)
    mask = np.zeros((length, ATOM_TYPE_NUM), dtype=bool)
    positions[rows, cols] = table.pos[sel]
    mask[rows, cols] = True
    resolved = mask[:, CA_INDEX].copy()
    positions[~resolved] = 0.0
    mask[~resolved] = False
    auth = np.full(length, UNRESOLVED_SEQ_ID, dtype=np.int32)
    have = np.nonzero(resolved)[0]
    auth[have] = table.auth_seq[placed[have]]
    return {
        "aatype": np.asarray(sequence_to_aatype(sequence), dtype=np.int8),
        "atom_positions": positions,
        "atom_mask": mask,
        "residue_mask": resolved,
        "auth_seq_id": auth,
    }


def resolved_by_atom(table: ModelTable, placed: np.ndarray, atom_name: bytes | None) -> np.ndarray:
    """bool ``[L]``: position modelled and (if ``atom_name``) holding that atom, e.g. ``b"C1'"``."""
    if atom_name is None:
        return placed >= 0
    has_atom = np.zeros(len(table.res_name), dtype=bool)
    has_atom[table.res_index[table.atom_name == atom_name]] = True
    return (placed >= 0) & has_atom[np.maximum(placed, 0)]
