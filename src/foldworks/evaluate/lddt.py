"""lDDT (local distance difference test) as OpenStructure 2.3.1 ``compare-structures`` computes it.

Definitions live in :mod:`foldworks.evaluate.metrics` (module docstring); this module holds the
implementation. Coordinates are in Å; ``L`` residues, ``A`` atom slots per residue (37 in the
atom37 layout of :data:`foldworks.constants.ATOM_TYPES`, 1 for Cα-only), ``P`` scored pairs.

Speed: the reference side (:class:`LddtReference`: the scored pairs, their reference distances
and, with ``aatype``, which pairs touch a symmetric side-chain atom) is built once per reference
and reused for every model scored against it (:func:`lddt` caches the last few). Pairs are found
through residue bounding spheres (:func:`reference_pairs`), so only atoms of residues in reach
are compared. A model is scored in float64 from 1-D coordinate gathers (the pair list is sorted
by its first atom, whose coordinates are repeated rather than gathered). Pairs between two
unambiguous atoms are scored once; pairs with one symmetric atom are scored with its name as
given and swapped, which decides the swaps and gives their final score; pairs of two symmetric
atoms are scored after the swaps. Every pair's count is the one the full swapped model gives, so
results are identical to swapping first and scoring every pair.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple, Sequence

import numpy as np

from foldworks.constants import ATOM_ORDER, ATOM_TYPE_NUM, RESTYPES
from foldworks.evaluate.pairlist import DEFAULT_RADIUS, pair_chunks, reference_pairs, retain_freed_memory

LDDT_THRESHOLDS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
LDDT_INCLUSION_RADIUS: float = DEFAULT_RADIUS  # Å

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
_CACHE_SIZE = 8  # references whose LddtReference is kept (many models against one reference)
_PART_PAIRS = 65_536  # pairs scored at once (temporaries of 512 KB: they stay in the core's cache)


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


class _Side(NamedTuple):
    """One end of a list of pairs: model atom ``index`` (flat ``L * A``) per pair, or, with
    ``runs``, ``index[k]`` repeated ``runs[k]`` times (pairs sorted by this end)."""

    index: np.ndarray
    runs: np.ndarray | None = None

    def gather(self, values: np.ndarray) -> np.ndarray:
        """``values [L * A]`` at this end of every pair (a new array)."""
        taken = values.take(self.index)
        return taken if self.runs is None else np.repeat(taken, self.runs)


class _Pairs(NamedTuple):
    """A list of scored pairs: both ends and the reference distance ``d_ref [P]`` (Å)."""

    a: _Side
    b: _Side
    d_ref: np.ndarray

    def errors(self, coords: Sequence[np.ndarray], a: _Side | None = None,
               b: _Side | None = None) -> np.ndarray:
        """``|d_model - d_ref|`` ``[P]`` (Å) from model ``coords`` (x, y, z, each ``[L * A]``,
        NaN for missing atoms, giving NaN); ``a``/``b`` replace the stored ends."""
        total = _distances(coords, a or self.a, b or self.b)
        total -= self.d_ref
        return np.abs(total, out=total)

    def residue_sums(self, counts: np.ndarray, n_res: int, n_atom: int) -> np.ndarray:
        """Per-residue sums ``[L]`` of per-pair ``counts [P]`` over both ends."""
        size = n_res * n_atom
        per_atom = sum(np.bincount(side.index if side.runs is None else np.repeat(side.index, side.runs),
                                   counts, size) for side in (self.a, self.b))
        return per_atom.reshape(n_res, n_atom).sum(1)


def _distances(coords: Sequence[np.ndarray], a: _Side, b: _Side) -> np.ndarray:
    """Model distances ``[P]`` (Å) between the ends ``a`` and ``b`` of pairs, from ``coords``
    (x, y, z, each ``[L * A]``), one axis at a time (few live ``[P]`` arrays)."""
    total = None
    for axis in coords:
        delta = a.gather(axis)
        delta -= b.gather(axis)
        delta *= delta
        total = delta if total is None else np.add(total, delta, out=total)
    return np.sqrt(total, out=total)


class _Union(NamedTuple):
    """Model atom pairs ``(a, b)`` whose distances serve two lists of pairs: entry ``given[k]``
    and ``swapped[k]`` of the union for pair ``k`` of each list."""

    a: _Side
    b: _Side
    given: np.ndarray
    swapped: np.ndarray


def _parts(pairs: _Pairs) -> list[_Pairs]:
    """``pairs`` (first end in runs) as consecutive views of about :data:`_PART_PAIRS` pairs, cut
    between runs, so that the temporaries of one part stay in the core's cache."""
    runs, size = pairs.a.runs, _PART_PAIRS
    ends = np.cumsum(runs)
    if len(ends) == 0 or ends[-1] <= size:
        return [pairs]
    cuts = np.unique(np.searchsorted(ends, np.arange(size, ends[-1], size), side="right"))
    cuts = cuts[(cuts > 0) & (cuts < len(runs))]
    atoms = [0, *cuts.tolist(), len(runs)]
    firsts = [0, *ends[cuts - 1].tolist(), int(ends[-1])]
    return [_Pairs(_Side(pairs.a.index[a0:a1], runs[a0:a1]), _Side(pairs.b.index[p0:p1]), pairs.d_ref[p0:p1])
            for a0, a1, p0, p1 in zip(atoms[:-1], atoms[1:], firsts[:-1], firsts[1:])]


def _hits(errors: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """Thresholds met per pair ``[P]`` (int8; 0 where the error is NaN)."""
    count = (errors < thresholds[0]).astype(np.int8)
    for t in thresholds[1:]:
        count += errors < t
    return count


def _total_hits(errors: np.ndarray, thresholds: Sequence[float]) -> int:
    """Thresholds met summed over all pairs."""
    return sum(int(np.count_nonzero(errors < t)) for t in thresholds)


class LddtReference:
    """The reference side of lDDT, built once and reused for every model scored against it.

    ``ref [L, A, 3]`` (Å) and ``ref_mask [L, A]`` (resolved atoms) give the scored pairs; with
    ``aatype [L]`` (atom37 layout, ``A = 37``) symmetric side-chain names are resolved per model
    like OpenStructure's ``check_and_swap`` (:meth:`score`). Immutable after construction.
    """

    def __init__(self, ref: np.ndarray, ref_mask: np.ndarray, aatype: np.ndarray | None = None,
                 inclusion_radius: float = LDDT_INCLUSION_RADIUS) -> None:
        retain_freed_memory()
        ref = np.asarray(ref, np.float64)
        if ref.ndim != 3 or ref.shape[-1] != 3:
            raise ValueError(f"reference coordinates must be [L, A, 3], got {ref.shape}")
        self.n_res, self.n_atom = ref.shape[:2]
        keep = np.flatnonzero(np.broadcast_to(np.asarray(ref_mask, bool), ref.shape[:2]).reshape(-1))
        ambiguous, partner = self._symmetry(aatype)
        index_type = np.int32 if len(ambiguous) < 2 ** 31 else np.int64
        flat, self.partner = keep.astype(index_type), partner.astype(index_type)
        plain, single, double, per_atom, runs = self._split_pairs(
            ref.reshape(-1, 3)[keep], keep // self.n_atom, ambiguous[keep], flat, inclusion_radius)
        self.n_pairs = int(per_atom.sum()) // 2
        #: scored pairs per residue ``[L]`` (the per-residue denominator, before x thresholds)
        self.n_scored = np.bincount(keep // self.n_atom, per_atom, self.n_res).astype(np.int64)
        self.plain = _Pairs(_Side(flat, runs), _Side(plain[0]), plain[1])
        self.plain_parts = _parts(self.plain)
        q, f, d_single = single
        order = np.argsort(q, kind="stable")  # by q: runs per atom, segments per residue
        q, f, single_runs = q.take(order), f.take(order), np.bincount(q, minlength=len(keep))
        self.single = _Pairs(_Side(flat, single_runs), _Side(flat.take(f)), d_single.take(order))
        self.single_union = self._union(flat.take(q), flat.take(f))
        q_residue = (keep // self.n_atom).take(q)
        starts = np.flatnonzero(np.diff(q_residue, prepend=-1))
        #: residue segments of ``single``: start, residue and length ``[R]``
        self.segments = (starts, q_residue.take(starts), np.diff(np.append(starts, len(q))))
        self.double = _Pairs(_Side(double[0]), _Side(double[1]), double[2])

    def _union(self, symmetric: np.ndarray, fixed: np.ndarray) -> _Union:
        """Pairs (symmetric atom as named, fixed atom) and (its partner, fixed atom) of the model
        (flat indices ``[S]``) as one list: most appear in both (~1.1 S distances, not 2 S)."""
        size = self.n_res * self.n_atom
        given = symmetric.astype(np.int64) * size + fixed
        swapped = self.partner.take(symmetric).astype(np.int64) * size + fixed
        keys = np.concatenate([given, swapped])  # two nearly sorted halves: a fast stable sort
        order = np.argsort(keys, kind="stable")
        ordered = keys.take(order)
        new = np.ones(len(keys), bool)
        new[1:] = ordered[1:] != ordered[:-1]
        union = ordered[new]  # sorted by first atom
        position = np.empty(len(keys), np.int64)
        position[order] = np.cumsum(new) - 1  # where each key sits in the union
        first = union // size
        starts = np.flatnonzero(np.diff(first, prepend=-1))
        runs = np.diff(np.append(starts, len(first)))
        return _Union(_Side(first.take(starts).astype(fixed.dtype), runs),
                      _Side((union % size).astype(fixed.dtype)), position[:len(given)], position[len(given):])

    @staticmethod
    def _split_pairs(xyz: np.ndarray, residue_of: np.ndarray, ambiguous: np.ndarray, flat: np.ndarray,
                     radius: float) -> tuple[tuple, tuple, tuple, np.ndarray, np.ndarray]:
        """Scored pairs of the kept atoms (``xyz [N, 3]``) by kind, chunk by chunk: ``plain``
        (model index of the second atom, d_ref) of two unambiguous atoms, sorted by the first;
        ``single`` (kept index of the symmetric atom, of the fixed atom, d_ref); ``double``
        (model indices, d_ref) of two symmetric atoms; pairs per kept atom ``[N]``; plain
        pairs per first atom ``[N]``."""
        n = len(xyz)
        per_atom, runs = np.zeros(n, np.int64), np.zeros(n, np.int64)
        parts: tuple[list, list, list] = ([], [], [])
        for i, j, dist in pair_chunks(xyz, residue_of, radius):
            per_atom += np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
            amb_i, amb_j = ambiguous.take(i), ambiguous.take(j)
            plain = np.flatnonzero(~(amb_i | amb_j))  # still sorted by i: a run per kept atom
            runs += np.bincount(i.take(plain), minlength=n)
            parts[0].append((flat.take(j.take(plain)), dist.take(plain)))
            one = np.flatnonzero(amb_i != amb_j)  # one symmetric atom ``q``, one fixed ``f``
            first, i_one, j_one = amb_i.take(one), i.take(one), j.take(one)
            parts[1].append((np.where(first, i_one, j_one), np.where(first, j_one, i_one), dist.take(one)))
            both = np.flatnonzero(amb_i & amb_j)
            parts[2].append((flat.take(i.take(both)), flat.take(j.take(both)), dist.take(both)))
        if n == 0:  # no chunk at all: empty columns
            parts = tuple([(np.zeros(0, flat.dtype),) * (width - 1) + (np.zeros(0),)] for width in (2, 3, 3))
        joined = [tuple(np.concatenate(column) for column in zip(*kind)) for kind in parts]
        return joined[0], joined[1], joined[2], per_atom, runs

    def _symmetry(self, aatype: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Flat ``[L * A]`` ambiguity flags and partner atom indices (identity if ``aatype`` is None)."""
        size = self.n_res * self.n_atom
        if aatype is None:
            return np.zeros(size, bool), np.arange(size)
        aatype = np.clip(np.asarray(aatype, np.int64).reshape(-1), 0, len(RESTYPES))
        if self.n_atom != ATOM_TYPE_NUM or len(aatype) != self.n_res:
            raise ValueError(f"aatype needs atom37 coordinates [{len(aatype)}, {ATOM_TYPE_NUM}, 3], "
                             f"got [{self.n_res}, {self.n_atom}, 3]")
        partner = np.arange(self.n_res)[:, None] * ATOM_TYPE_NUM + SWAP_PARTNER[aatype]
        return AMBIGUOUS[aatype].reshape(-1), partner.reshape(-1)

    def score(self, pred: np.ndarray, pred_mask: np.ndarray | None = None, per_residue: bool = False,
              thresholds: Sequence[float] = LDDT_THRESHOLDS) -> np.ndarray | float:
        """lDDT of models ``pred [..., L, A, 3]`` (present atoms ``pred_mask [..., L, A]``, default
        all): the global score (float, or ``[...]``), or with ``per_residue`` ``[..., L]`` (NaN for
        residues without scored pairs). A reference without any scored pair gives NaN."""
        conserved = self._conserved_batch(pred, pred_mask, per_residue, tuple(float(t) for t in thresholds))
        return self._ratio(conserved, per_residue, len(thresholds), np.shape(pred)[:-3])

    def score_both(self, pred: np.ndarray, pred_mask: np.ndarray | None = None,
                   thresholds: Sequence[float] = LDDT_THRESHOLDS) -> tuple[np.ndarray | float, np.ndarray]:
        """``(global, per_residue)`` of :meth:`score` from one pass (each pair counts for both of
        its residues, so the global count is half the sum of the per-residue counts)."""
        conserved = self._conserved_batch(pred, pred_mask, True, tuple(float(t) for t in thresholds))
        batch_shape = np.shape(pred)[:-3]
        return (self._ratio(conserved.sum(-1) / 2, False, len(thresholds), batch_shape),
                self._ratio(conserved, True, len(thresholds), batch_shape))

    def _ratio(self, conserved: np.ndarray, per_residue: bool, n_thresholds: int,
               batch_shape: tuple[int, ...]) -> np.ndarray | float:
        """Scores from conserved counts ``[B]`` or ``[B, L]``, reshaped to ``batch_shape``."""
        with np.errstate(invalid="ignore", divide="ignore"):
            scores = conserved / (n_thresholds * (self.n_scored if per_residue else self.n_pairs))
        if per_residue:
            return scores.reshape(batch_shape + (self.n_res,))
        scores = scores.reshape(batch_shape)
        return float(scores) if scores.ndim == 0 else scores

    def _conserved_batch(self, pred: np.ndarray, pred_mask: np.ndarray | None, per_residue: bool,
                         thresholds: tuple[float, ...]) -> np.ndarray:
        """Conserved pair-thresholds ``[B]`` (or per residue ``[B, L]``) of the models, the batch
        dimensions of ``pred [..., L, A, 3]`` flattened to ``B``."""
        pred = np.asarray(pred, np.float64)
        shape = (self.n_res, self.n_atom)
        if pred.shape[-3:] != shape + (3,):
            raise ValueError(f"model coordinates {pred.shape} do not match the reference {shape + (3,)}")
        batch_shape = pred.shape[:-3]
        flat = pred.reshape(-1, self.n_res * self.n_atom, 3)
        present = (np.ones(flat.shape[:2], bool) if pred_mask is None else np.broadcast_to(
            np.asarray(pred_mask, bool), batch_shape + shape).reshape(flat.shape[:2]))
        with np.errstate(invalid="ignore"):
            conserved = [self._conserved(tuple(np.where(ok, model[:, k], np.nan) for k in range(3)),
                                         thresholds, per_residue) for model, ok in zip(flat, present)]
        return np.asarray(conserved, np.float64)

    def _conserved(self, coords: tuple[np.ndarray, ...], thresholds: tuple[float, ...],
                   per_residue: bool) -> int | np.ndarray:
        """Conserved pair-thresholds of one model (``coords``: x, y, z ``[L * A]``, NaN where
        absent), in total or per residue ``[L]``, after resolving symmetric names."""
        n_res = self.n_res
        if per_residue:
            found = sum(part.residue_sums(_hits(part.errors(coords), thresholds), n_res, self.n_atom)
                        for part in self.plain_parts)
        else:
            found = sum(_total_hits(part.errors(coords), thresholds) for part in self.plain_parts)
        swap = np.zeros(n_res, bool)
        single = self.single
        if len(single.d_ref):  # OpenStructure's check_and_swap: counts to fixed atoms only
            union = self.single_union
            distance = _distances(coords, union.a, union.b)
            given, swapped = (_hits(np.abs(distance.take(rows) - single.d_ref), thresholds)
                              for rows in (union.given, union.swapped))
            starts, residues, lengths = self.segments
            gain = np.add.reduceat(swapped - given, starts, dtype=np.int64)  # per residue
            better = gain > 0
            swap[residues[better]] = True
            if per_residue:
                hits = np.where(np.repeat(better, lengths), swapped, given)
                found = found + single.residue_sums(hits, n_res, self.n_atom)
            else:
                found = found + int(given.sum(dtype=np.int64)) + int(gain[better].sum())
        if len(self.double.d_ref):  # both atoms symmetric: scored with the final names
            pairs = self.double
            ends = [_Side(np.where(swap[side.index // self.n_atom], self.partner.take(side.index),
                                   side.index)) for side in (pairs.a, pairs.b)]
            hits = _hits(pairs.errors(coords, *ends), thresholds)
            found = found + (pairs.residue_sums(hits, n_res, self.n_atom) if per_residue
                             else int(hits.sum()))
        return found


_CACHE: OrderedDict[tuple, LddtReference] = OrderedDict()


def cached_reference(ref: np.ndarray, ref_mask: np.ndarray, aatype: np.ndarray | None = None,
                     inclusion_radius: float = LDDT_INCLUSION_RADIUS) -> LddtReference:
    """:class:`LddtReference` of these arguments, reused from the last few calls (keyed by the
    resolved coordinates, the mask, ``aatype`` and the radius)."""
    ref = np.asarray(ref, np.float64)
    mask = np.broadcast_to(np.asarray(ref_mask, bool), ref.shape[:-1])
    key = (ref.shape, np.packbits(mask).tobytes(), ref[mask].tobytes(), float(inclusion_radius),
           None if aatype is None else np.asarray(aatype, np.int64).tobytes())
    found = _CACHE.get(key)
    if found is None:
        found = LddtReference(ref, mask, aatype, inclusion_radius)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.popitem(last=False)
        _CACHE[key] = found
    else:
        _CACHE.move_to_end(key)
    return found


def clear_cache() -> None:
    """Forget the cached references (benchmarks of the first model of a new reference)."""
    _CACHE.clear()


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
    atoms are renamed first (OpenStructure's ``check_and_swap``); without it names are taken as
    given. Returns the global score (float, or ``[...]`` for a batch of models), or with
    ``per_residue=True`` ``[..., L]``, NaN for residues without scored pairs. A reference
    without any scored pair gives NaN. The reference side is cached (:func:`cached_reference`).
    """
    reference = cached_reference(ref, ref_mask, aatype, inclusion_radius)
    return reference.score(pred, pred_mask, per_residue, thresholds)


def lddt_ca(
    pred_ca: np.ndarray, ref_ca: np.ndarray, ref_mask: np.ndarray,
    pred_mask: np.ndarray | None = None, per_residue: bool = False,
) -> np.ndarray | float:
    """lDDT on Cα atoms only: ``pred_ca [..., L, 3]``, ``ref_ca [L, 3]``, masks ``[L]``."""
    pred_ca = np.asarray(pred_ca)
    mask = None if pred_mask is None else np.asarray(pred_mask)[..., None]
    return lddt(pred_ca[..., None, :], np.asarray(ref_ca)[:, None, :],
                np.asarray(ref_mask)[:, None], mask, per_residue)


def lddt_all_atom(
    pred: np.ndarray, ref: np.ndarray, ref_mask: np.ndarray, aatype: np.ndarray,
    pred_mask: np.ndarray | None = None, per_residue: bool = False,
    inclusion_radius: float = LDDT_INCLUSION_RADIUS,
) -> np.ndarray | float:
    """All-heavy-atom lDDT of atom37 models ``pred [..., L, 37, 3]`` against ``ref [L, 37, 3]``
    with symmetric side-chain atoms resolved. OXT is scored where ``ref_mask`` has it (a
    reference OXT that the model lacks counts as not conserved, as in OpenStructure)."""
    return lddt(pred, ref, ref_mask, pred_mask, per_residue, inclusion_radius, aatype=aatype)


__all__ = ["LDDT_INCLUSION_RADIUS", "LDDT_THRESHOLDS", "SYMMETRIC_ATOMS", "LddtReference",
           "cached_reference", "clear_cache", "lddt", "lddt_all_atom", "lddt_ca", "reference_pairs"]
