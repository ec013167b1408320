"""Pair lists for lDDT: every pair of atoms in different residues closer than a radius (Å).

Used by :mod:`foldworks.evaluate.lddt` (which builds them once per reference). Candidates come
from residue bounding spheres, so only atoms of residues in reach are compared; the chunks are
small enough that their temporaries are reused rather than faulted in again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Iterator

import numpy as np

DEFAULT_RADIUS: float = 15.0  # Å, lDDT's inclusion radius
_CHUNK = 1_000_000  # residue pairs compared at once while building pair lists (~8 MB arrays)
_SPHERE_MARGIN = 1e-3  # Å added to the residue-sphere reach: the pre-filter stays conservative
_PAIR_CHUNK = 65_536  # candidate atom pairs handled at once while building pair lists
_MMAP_THRESHOLD = 32 * 2 ** 20  # bytes; glibc's largest allowed value
_TRIM_THRESHOLD = 256 * 2 ** 20  # bytes of free heap kept for reuse
_allocator_tuned = False


def retain_freed_memory() -> None:
    """Let glibc keep freed heap memory for reuse (once per process; a no-op elsewhere).

    Scoring a model allocates a few temporaries of 8 bytes per scored pair (2.4 MB each for a
    300-residue chain). With glibc's default thresholds they are mapped and unmapped, or the top
    of the heap is trimmed, on every call, so each call faults ~9 MB back in (~2,300 page faults:
    ~5 ms on the development VM, more than the scoring itself). This raises the mmap threshold
    to 32 MB and the trim threshold to 256 MB (``mallopt``), process-wide; called by
    :class:`foldworks.evaluate.lddt.LddtReference`.
    """
    global _allocator_tuned
    if _allocator_tuned:
        return
    _allocator_tuned = True
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(-3, _MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    mallopt(-1, _TRIM_THRESHOLD)  # M_TRIM_THRESHOLD


def reference_pairs(
    ref_xyz: np.ndarray, residue_of: np.ndarray, radius: float = DEFAULT_RADIUS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scored pairs of reference atoms ``ref_xyz [N, 3]``: indices ``i < j`` ``[P]`` (sorted by
    ``i``, then ``j``) of atoms in different residues (``residue_of [N]``, non-decreasing) closer
    than ``radius`` Å, and their distance ``[P]`` (Å, float64, from coordinates centred on their
    mean).

    Candidates come from bounding spheres (centre, largest atom distance ``spread``) of the
    residues: residue pairs whose spheres come within ``radius``, then atoms of the first residue
    whose distance to the second's sphere is below ``radius``, then every atom of the second;
    by the triangle inequality no pair closer than ``radius`` is missed.
    """
    found = list(pair_chunks(ref_xyz, residue_of, radius))
    if not found:
        return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0)
    return tuple(np.concatenate(parts) for parts in zip(*found))  # type: ignore[return-value]


def pair_chunks(ref_xyz: np.ndarray, residue_of: np.ndarray, radius: float = DEFAULT_RADIUS
                ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`reference_pairs` in consecutive chunks ``(i, j, distance)`` of at most ~65k
    candidate pairs each (their concatenation is the full list), so that a caller can split
    them without holding a second full copy."""
    xyz = np.asarray(ref_xyz, np.float64).reshape(-1, 3)
    residue_of = np.asarray(residue_of).reshape(-1)
    n = len(xyz)
    if n == 0:
        return
    if np.any(np.diff(residue_of) < 0):
        raise ValueError("residue_of must be non-decreasing (atoms grouped by residue)")
    xyz = xyz - xyz.mean(0)
    starts = np.flatnonzero(np.concatenate([[True], residue_of[1:] != residue_of[:-1]]))
    sizes = np.diff(np.append(starts, n))
    group_of = np.repeat(np.arange(len(starts)), sizes)
    centre = np.add.reduceat(xyz, starts, axis=0) / sizes[:, None]
    spread = np.sqrt(np.maximum.reduceat(np.sum((xyz - centre[group_of]) ** 2, -1), starts))
    first, second = _groups_in_reach(centre, spread, float(radius))
    # rows (atom a, later residue g), atom-major: every atom of ``first`` meets each ``second``
    per_group = np.bincount(first, minlength=len(starts))
    atom, group = _expand(np.arange(n), (np.cumsum(per_group) - per_group)[group_of],
                          per_group[group_of], second)
    x, y, z = np.ascontiguousarray(xyz.T)
    cx, cy, cz = np.ascontiguousarray(centre.T)
    gap = (x.take(atom) - cx.take(group)) ** 2
    gap += (y.take(atom) - cy.take(group)) ** 2
    gap += (z.take(atom) - cz.take(group)) ** 2
    reach = radius + spread.take(group) + _SPHERE_MARGIN
    near = np.flatnonzero(gap < reach * reach)
    atom, group = atom.take(near), group.take(near)
    # then every atom of that residue, in chunks of rows (small arrays are reused, not faulted in)
    run = sizes.take(group)
    ends = np.cumsum(run)
    cuts = np.searchsorted(ends, np.arange(_PAIR_CHUNK, ends[-1] if len(ends) else 0, _PAIR_CHUNK))
    index_type = np.int32 if n < 2 ** 31 else np.int64
    for rows in np.split(np.arange(len(atom)), np.unique(cuts)):
        i, j = _expand(atom.take(rows), starts.take(group.take(rows)), run.take(rows))
        squared = (x.take(i) - x.take(j)) ** 2
        squared += (y.take(i) - y.take(j)) ** 2
        squared += (z.take(i) - z.take(j)) ** 2
        dist = np.sqrt(squared, out=squared)
        within = np.flatnonzero(dist < radius)
        yield i.take(within).astype(index_type), j.take(within).astype(index_type), dist.take(within)


def _expand(rows: np.ndarray, offsets: np.ndarray, runs: np.ndarray,
            values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row ``k`` repeated ``runs[k]`` times next to ``offsets[k], offsets[k] + 1, ...`` (or
    ``values`` at those positions): two ``[sum(runs)]`` arrays, without a Python loop."""
    repeated = np.repeat(rows, runs)
    positions = np.arange(len(repeated)) + np.repeat(offsets - (np.cumsum(runs) - runs), runs)
    return repeated, (positions if values is None else values.take(positions))


def _groups_in_reach(centre: np.ndarray, spread: np.ndarray, radius: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Residue pairs ``first < second`` (``[R]`` each, sorted) whose bounding spheres
    (``centre [G, 3]``, ``spread [G]`` Å) come closer than ``radius`` Å."""
    n = len(centre)
    reach = radius + _SPHERE_MARGIN
    squared_norm = np.sum(centre ** 2, -1)
    step = max(1, _CHUNK // n)
    found_first, found_second = [], []
    for start in range(0, n, step):
        rows = slice(start, start + step)
        squared = squared_norm[rows, None] + squared_norm[None, :] - 2.0 * (centre[rows] @ centre.T)
        limit = reach + spread[rows, None] + spread[None, :]
        near = squared < limit * limit
        near &= np.arange(start, min(n, start + step))[:, None] < np.arange(n)[None, :]
        first, second = np.nonzero(near)
        found_first.append(first + start)
        found_second.append(second)
    return np.concatenate(found_first), np.concatenate(found_second)


__all__ = ["DEFAULT_RADIUS", "pair_chunks", "reference_pairs", "retain_freed_memory"]
