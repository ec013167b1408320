"""lDDT (local distance difference test) as OpenStructure 2.3.1 ``compare-structures`` computes it.

Definitions live in :mod:`foldworks.evaluate.metrics` (module docstring); this module holds the
implementation. Coordinates are in Å; ``L`` residues, ``A`` atom slots per residue (37 in the
atom37 layout of :data:`foldworks.constants.ATOM_TYPES`, 1 for Cα-only).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from foldworks.constants import ATOM_ORDER, ATOM_TYPE_NUM, RESTYPES

LDDT_THRESHOLDS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
LDDT_INCLUSION_RADIUS: float = 15.0

#: Side-chain atoms whose names are interchangeable, as in OpenStructure 2.3.1's lDDT (its
#: ``swappable``); 2.3.1 includes VAL and LEU (measured with compare-structures), unlike later versions.
SYMMETRIC_ATOMS: dict[str, tuple[tuple[str, str], ...]] = {
    "D": (("OD1", "OD2"),),
    "L": (("CD1", "CD2"),),
    "V": (("CG1", "CG2"),),
    "E": (("OE1", "OE2"),),
    "F": (("CD1", "CD2"), ("CE1", "CE2")),
    "Y": (("CD1", "CD2"), ("CE1", "CE2")),
    "R": (("NH1", "NH2"),),
}
_PAIR_CHUNK = 4_000_000  # atom pairs (or model x pair elements) handled at once (~100 MB peak)


def _swap_table() -> tuple[np.ndarray, np.ndarray]:
    """``partner [21, 37]`` (slot after renaming; itself if not ambiguous), ``ambiguous [21, 37]``."""
    partner = np.tile(np.arange(ATOM_TYPE_NUM), (len(RESTYPES) + 1, 1))
    for letter, pairs in SYMMETRIC_ATOMS.items():
        row = RESTYPES.index(letter)
        for first, second in pairs:
            partner[row, ATOM_ORDER[first]] = ATOM_ORDER[second]
            partner[row, ATOM_ORDER[second]] = ATOM_ORDER[first]
    return partner, partner != np.arange(ATOM_TYPE_NUM)[None, :]


SWAP_PARTNER, AMBIGUOUS = _swap_table()


_PAIR_CACHE: dict[tuple[bytes, bytes, float], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
_PAIR_CACHE_SIZE = 4  # references whose pair lists are kept (many models against one reference)


def reference_pairs(
    ref_xyz: np.ndarray, residue_of: np.ndarray, radius: float = LDDT_INCLUSION_RADIUS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scored pairs of reference atoms ``ref_xyz [N, 3]``: indices ``i < j`` ``[P]`` of atoms in
    different residues (``residue_of [N]``, non-decreasing) closer than ``radius`` Å, and their
    distance ``[P]`` (Å). The lists of the last few references are reused (read-only arrays)."""
    xyz = np.ascontiguousarray(ref_xyz, np.float64)
    key = (xyz.tobytes(), np.ascontiguousarray(residue_of, np.int64).tobytes(), float(radius))
    found = _PAIR_CACHE.get(key)
    if found is None:
        found = _reference_pairs(xyz, np.asarray(residue_of), float(radius))
        for array in found:
            array.flags.writeable = False
        if len(_PAIR_CACHE) >= _PAIR_CACHE_SIZE:
            _PAIR_CACHE.pop(next(iter(_PAIR_CACHE)))
        _PAIR_CACHE[key] = found
    return found


def _reference_pairs(
    xyz: np.ndarray, residue_of: np.ndarray, radius: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uncached :func:`reference_pairs` (``xyz [N, 3]`` float64)."""
    n = len(xyz)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    xyz = xyz - xyz.mean(0)
    low = xyz.astype(np.float32)  # single-precision pre-filter with a margin, exact cut below
    sq = np.sum(low ** 2, -1)
    step = max(1, _PAIR_CHUNK // n)
    found_i, found_j = [], []
    for start in range(0, n, step):
        rows = slice(start, min(n, start + step))
        d2 = sq[rows, None] + sq[None, start:] - 2.0 * (low[rows] @ low[start:].T)
        near = (d2 < np.float32(radius ** 2 + 0.1)) & (residue_of[rows, None] < residue_of[None, start:])
        i, j = np.nonzero(near)
        found_i.append(i + start)
        found_j.append(j + start)
    i, j = np.concatenate(found_i), np.concatenate(found_j)
    dist = np.sqrt(np.sum((xyz[i] - xyz[j]) ** 2, -1))
    keep = dist < radius
    return i[keep], j[keep], dist[keep]


def lddt(
    pred: np.ndarray,
    ref: np.ndarray,
    ref_mask: np.ndarray,
    pred_mask: np.ndarray | None = None,
    per_residue: bool = False,
    inclusion_radius: float = LDDT_INCLUSION_RADIUS,
    thresholds: Sequence[float] = LDDT_THRESHOLDS,
    aatype: np.ndarray | None = None,
) -> np.ndarray | float:
    """lDDT of ``pred [..., L, A, 3]`` against ``ref [L, A, 3]`` (definition: ``metrics``).

    ``ref_mask [L, A]``: resolved reference atoms; ``pred_mask [..., L, A]``: atoms present in the
    model (default: all). With ``aatype [L]`` (atom37 layout, ``A = 37``) symmetric side-chain
    atoms are renamed first (:func:`resolve_symmetry`); without it names are taken as given.
    Returns the global score (float, or ``[...]`` for a batch of models), or with
    ``per_residue=True`` ``[..., L]``, NaN for residues without scored pairs. A reference
    without any scored pair gives NaN.
    """
    pred = np.asarray(pred, np.float64)
    ref = np.asarray(ref, np.float64)
    n_res, n_atom = ref.shape[:2]
    batch_shape = pred.shape[:-3]
    pred = pred.reshape(-1, n_res, n_atom, 3)
    present = (np.ones(pred.shape[:-1], bool) if pred_mask is None else
               np.broadcast_to(np.asarray(pred_mask, bool), batch_shape + (n_res, n_atom)).reshape(pred.shape[:-1]))
    keep = np.flatnonzero(np.asarray(ref_mask, bool).reshape(-1))
    residue_of = keep // n_atom
    i, j, d_ref = reference_pairs(ref.reshape(-1, 3)[keep], residue_of, inclusion_radius)
    if aatype is not None:
        pred, present = _swap_symmetric(pred, present, keep, i, j, d_ref, aatype, tuple(thresholds))
    pred_xyz = pred.reshape(pred.shape[0], -1, 3)[:, keep]
    hits = _pair_hits(pred_xyz, present.reshape(pred.shape[0], -1)[:, keep], i, j, d_ref,
                      tuple(thresholds))  # [B, P]
    n_t = len(thresholds)
    with np.errstate(invalid="ignore", divide="ignore"):
        if per_residue:
            ri, rj = residue_of[i], residue_of[j]
            total = np.bincount(ri, minlength=n_res) + np.bincount(rj, minlength=n_res)
            conserved = np.stack([np.bincount(ri, h, n_res) + np.bincount(rj, h, n_res) for h in hits])
            return (conserved / (n_t * total[None, :])).reshape(*batch_shape, n_res)
        scores = (hits.sum(-1) / (n_t * len(d_ref))).reshape(batch_shape)
    return float(scores) if scores.ndim == 0 else scores


def _pair_hits(pred_xyz: np.ndarray, present: np.ndarray, i: np.ndarray, j: np.ndarray,
               d_ref: np.ndarray, thresholds: tuple[float, ...]) -> np.ndarray:
    """Thresholds met per pair ``[B, P]`` (0 where a model atom is missing)."""
    hits = np.zeros((pred_xyz.shape[0], len(d_ref)), np.int8)
    for b in range(pred_xyz.shape[0]):
        delta = pred_xyz[b, i] - pred_xyz[b, j]
        diff = np.abs(np.sqrt(np.einsum("pk,pk->p", delta, delta)) - d_ref)
        count = (diff < thresholds[0]).astype(np.int8)
        for t in thresholds[1:]:
            count += diff < t
        hits[b] = count * (present[b, i] & present[b, j])
    return hits


def lddt_ca(
    pred_ca: np.ndarray, ref_ca: np.ndarray, ref_mask: np.ndarray,
    pred_mask: np.ndarray | None = None, per_residue: bool = False,
) -> np.ndarray | float:
    """lDDT on Cα atoms only: ``pred_ca [..., L, 3]``, ``ref_ca [L, 3]``, masks ``[L]``."""
    pred_ca = np.asarray(pred_ca)
    mask = None if pred_mask is None else np.asarray(pred_mask)[..., None]
    return lddt(pred_ca[..., None, :], np.asarray(ref_ca)[:, None, :],
                np.asarray(ref_mask)[:, None], mask, per_residue)


def _swap_symmetric(
    pred: np.ndarray, present: np.ndarray, keep: np.ndarray, i: np.ndarray, j: np.ndarray,
    d_ref: np.ndarray, aatype: np.ndarray, thresholds: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """OpenStructure's ``check_and_swap`` on atom37 models ``pred [B, L, 37, 3]``.

    For each residue of :data:`SYMMETRIC_ATOMS`, the conserved thresholds over the scored pairs
    (``keep``-indexed ``i, j, d_ref``) between its ambiguous atoms and *unambiguous* atoms of
    other residues are counted with the model's names as given and swapped; where the swapped
    count is strictly higher the model's atom pairs are exchanged. Returns copies.
    """
    n_batch, n_res = pred.shape[:2]
    aatype = np.clip(np.asarray(aatype, np.int64), 0, len(RESTYPES))
    ambiguous = AMBIGUOUS[aatype].reshape(-1)[keep]  # per kept reference atom
    one = ambiguous[i] != ambiguous[j]
    if not one.any():
        return pred, present
    q = np.where(ambiguous[i[one]], keep[i[one]], keep[j[one]])  # flat atom37 index
    f = np.where(ambiguous[i[one]], keep[j[one]], keep[i[one]])
    q_res, q_slot = np.divmod(q, ATOM_TYPE_NUM)
    q_swapped = q_res * ATOM_TYPE_NUM + SWAP_PARTNER[aatype[q_res], q_slot]
    flat_xyz, flat_ok = pred.reshape(n_batch, -1, 3), present.reshape(n_batch, -1)
    counts = []
    for atom in (q, q_swapped):
        hits = _pair_hits(flat_xyz, flat_ok, atom, f, d_ref[one], thresholds)
        counts.append(np.stack([np.bincount(q_res, h, n_res) for h in hits]))
    swap = counts[1] > counts[0]  # [B, L]
    if not swap.any():
        return pred, present
    order = np.where(swap[:, :, None], SWAP_PARTNER[aatype][None], np.arange(ATOM_TYPE_NUM))
    return (np.take_along_axis(pred, order[..., None], axis=2),
            np.take_along_axis(present, order, axis=2))


def lddt_all_atom(
    pred: np.ndarray, ref: np.ndarray, ref_mask: np.ndarray, aatype: np.ndarray,
    pred_mask: np.ndarray | None = None, per_residue: bool = False,
    inclusion_radius: float = LDDT_INCLUSION_RADIUS,
) -> np.ndarray | float:
    """All-heavy-atom lDDT of atom37 models ``pred [..., L, 37, 3]`` against ``ref [L, 37, 3]``
    with symmetric side-chain atoms resolved. OXT is scored where ``ref_mask`` has it (a
    reference OXT that the model lacks counts as not conserved, as in OpenStructure)."""
    return lddt(pred, ref, ref_mask, pred_mask, per_residue, inclusion_radius, aatype=aatype)


__all__ = ["LDDT_INCLUSION_RADIUS", "LDDT_THRESHOLDS", "SYMMETRIC_ATOMS", "lddt",
           "lddt_all_atom", "lddt_ca", "reference_pairs"]
