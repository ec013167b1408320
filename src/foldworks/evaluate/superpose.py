"""Batched rigid superposition and the TMscore-style superposition search (no torch).

The definitions (TM-score, GDT, the search itself) are in :mod:`foldworks.evaluate.metrics`
(module docstring); this module holds the vectorised implementation. Coordinates are in Å,
``n`` paired residues, ``S`` superpositions evaluated at once.

Speed: every superposition of a batch is built from one matrix product (weighted sums of the
coordinates and their outer products), its rotation from the polar factor of the 3 x 3
cross-covariance (Newton iteration on the whole batch; an SVD only for the rare reflections or
near-singular rows) and all squared distances from a second matrix product.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

SEARCH_CUTOFFS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
MAX_ITERATIONS = 20
_MAX_SEED_LENGTHS = 6
_MIN_SEED_LENGTH = 4
_CHUNK_ELEMENTS = 600_000  # superpositions x residues handled at once (memory bound, ~5 MB arrays)
_POLAR_STEPS = 40
_POLAR_TOLERANCE = 1e-7  # largest entry change; the step after it is exact to ~1e-14 (quadratic)


def rotation_from_covariance(
    covariance: np.ndarray, mobile_centre: np.ndarray, target_centre: np.ndarray, total: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Kabsch rotation ``[..., 3, 3]`` and translation ``[..., 3]`` from the cross-covariance
    ``sum w (x - xc)(y - yc)^T`` (``[..., 3, 3]``, mobile ``x``, target ``y``), by SVD. Where the
    total weight is 0 the identity and a zero translation are returned (as TMscore's ``u3b``)."""
    u, _, vt = np.linalg.svd(covariance)
    sign = np.sign(np.linalg.det(np.swapaxes(vt, -1, -2) @ np.swapaxes(u, -1, -2)))
    sign = np.where(sign == 0, 1.0, sign)
    u = u.copy()
    u[..., :, 2] *= sign[..., None]
    rotation = np.swapaxes(vt, -1, -2) @ np.swapaxes(u, -1, -2)
    empty = total <= 0
    if np.any(empty):
        rotation = np.where(empty[..., None, None], np.eye(3), rotation)
    translation = target_centre - np.einsum("...ij,...j->...i", rotation, mobile_centre)
    translation = np.where(empty[..., None], 0.0, translation)
    return rotation, translation


# Cofactor of a row-major 3 x 3 matrix x[0..8]: cof[k] = x[A[k]] x[B[k]] - x[C[k]] x[D[k]].
_COF_A = np.array([4, 5, 3, 2, 0, 1, 1, 2, 0])
_COF_B = np.array([8, 6, 7, 7, 8, 6, 5, 3, 4])
_COF_C = np.array([5, 3, 4, 1, 2, 0, 2, 0, 1])
_COF_D = np.array([7, 8, 6, 8, 6, 7, 4, 5, 3])


def fast_rotations(covariance: np.ndarray) -> np.ndarray:
    """Kabsch rotations ``[S, 3, 3]`` (``R @ x`` fits ``y``) from cross-covariances ``[S, 3, 3]``.

    Where ``det > 0`` the optimal proper rotation is the transposed orthogonal polar factor of
    the covariance, found by scaled Newton iteration ``X <- (g X + X^-T / g) / 2`` on all rows at
    once; rows with ``det <= 0`` (a reflection would fit better), a tiny ``det`` or no
    convergence are handled by :func:`rotation_from_covariance` (SVD).
    """
    flat = covariance.reshape(-1, 9)
    scale = np.sqrt(np.einsum("si,si->s", flat, flat))
    x = flat / np.where(scale > 0, scale, 1.0)[:, None]
    cof = x[:, _COF_A] * x[:, _COF_B] - x[:, _COF_C] * x[:, _COF_D]
    good = np.einsum("si,si->s", x[:, :3], cof[:, :3]) > 1e-9  # det of the normalised matrix
    rows = np.flatnonzero(good)
    x, cof, change = x[rows], cof[rows], np.zeros(len(rows))
    for _ in range(_POLAR_STEPS):
        inv_t = cof / np.einsum("si,si->s", x[:, :3], cof[:, :3])[:, None]  # X^-T
        gamma = np.sqrt(np.sqrt(np.einsum("si,si->s", inv_t, inv_t) / np.einsum("si,si->s", x, x)))[:, None]
        new = 0.5 * (gamma * x + inv_t / gamma)
        change = np.abs(new - x).max(-1)
        x = new
        if change.max(initial=0.0) < _POLAR_TOLERANCE:
            break
        cof = x[:, _COF_A] * x[:, _COF_B] - x[:, _COF_C] * x[:, _COF_D]
    good[rows[change >= _POLAR_TOLERANCE]] = False  # not converged: SVD below
    rotation = np.empty_like(covariance)
    rotation[rows] = np.swapaxes(x.reshape(-1, 3, 3), -1, -2)
    bad = ~good
    if np.any(bad):
        zeros = np.zeros((int(bad.sum()), 3))
        rotation[bad] = rotation_from_covariance(covariance[bad], zeros, zeros, np.ones(len(zeros)))[0]
    return rotation


def seed_lengths(n: int) -> list[int]:
    """TMscore's seed fragment lengths: n, n/2, n/4, ... (integer) down to 4 (or n if n < 4)."""
    minimum = min(_MIN_SEED_LENGTH, n)
    lengths = []
    for i in range(_MAX_SEED_LENGTHS - 1):
        value = n // 2 ** i
        if value <= minimum:
            return lengths + [minimum]
        lengths.append(value)
    return lengths + [minimum]


@lru_cache(maxsize=8)
def seed_bounds(n: int) -> np.ndarray:
    """Every seed fragment as interleaved ``[start_0, end_0, start_1, ...]`` (``[2 S]``, residue
    indices, end exclusive) in TMscore's order: longest first, then by start; read-only."""
    bounds = []
    for length in seed_lengths(n):
        starts = np.arange(n - length + 1)
        bounds.append(np.stack([starts, starts + length], axis=1).reshape(-1))
    bounds = np.concatenate(bounds)
    bounds.flags.writeable = False
    return bounds


class SearchState:
    """Inputs and running maxima of one superposition search (``pred``, ``ref`` centred ``[n, 3]``).

    ``features [n, 16]`` (1, pred, ref, pred (x) ref) give every weighted sum needed for a
    superposition by one product ``weights @ features``; ``basis [17, n]`` (1, |p|^2 + |r|^2, ref,
    pred, pred (x) ref) turns per-superposition coefficients into squared distances
    ``|R p + t - r|^2`` by a second product.
    """

    def __init__(self, pred: np.ndarray, ref: np.ndarray, d0: float, d0_search: float) -> None:
        n = pred.shape[0]
        moments = (pred[:, :, None] * ref[:, None, :]).reshape(n, 9)
        self.features = np.concatenate([np.ones((n, 1)), pred, ref, moments], axis=1)
        self.basis = np.concatenate([np.ones((1, n)), np.sum(pred ** 2 + ref ** 2, -1)[None],
                                     ref.T, pred.T, moments.T], axis=0)
        self.d0_squared, self.d0_search = d0 * d0, d0_search
        self.tm = -1.0
        self.counts = {c: -1 for c in SEARCH_CUTOFFS}
        self.visited: dict[bytes, int] = {}

    def seed_sums(self, bounds: np.ndarray) -> np.ndarray:
        """``[S, 16]`` sums of ``features`` over the fragments ``bounds`` (:func:`seed_bounds`)."""
        padded = np.concatenate([self.features, np.zeros((1, self.features.shape[1]))])
        return np.add.reduceat(padded, bounds, axis=0)[::2]

    def squared_distances(self, sums: np.ndarray) -> np.ndarray:
        """``[S, n]`` squared distances (Å^2) after each superposition given by ``sums [S, 16]``
        (``weights @ features``: the weighted sums over its residues). Only compared with
        cutoffs and used in ``1 / (1 + d^2 / d0^2)``, so no square root is taken."""
        total = sums[:, 0]
        safe = np.where(total > 0, total, 1.0)[:, None]
        mobile_centre, target_centre = sums[:, 1:4] / safe, sums[:, 4:7] / safe
        covariance = (sums[:, 7:].reshape(-1, 3, 3)  # a new array: ``sums`` stays unchanged
                      - total[:, None, None] * mobile_centre[:, :, None] * target_centre[:, None, :])
        rotation = fast_rotations(covariance)
        empty = total <= 0
        if np.any(empty):
            rotation[empty] = np.eye(3)
        translation = target_centre - np.einsum("sij,sj->si", rotation, mobile_centre)
        translation[empty] = 0.0
        coefficients = np.concatenate([
            np.sum(translation ** 2, -1)[:, None], np.ones((len(total), 1)), -2.0 * translation,
            2.0 * np.einsum("sij,si->sj", rotation, translation),  # R^T t
            -2.0 * np.swapaxes(rotation, -1, -2).reshape(-1, 9),  # r.(R p) = vec(R^T).(p (x) r)
        ], axis=1)
        return coefficients @ self.basis  # may dip below 0 by rounding (~1e-12): harmless here

    def record(self, squared: np.ndarray) -> None:
        """Update the TM-score sum and GDT counts maxima with ``squared [S, n]`` (Å^2)."""
        terms = squared + self.d0_squared
        np.divide(self.d0_squared, terms, out=terms)  # 1 / (1 + (d / d0)^2)
        self.tm = max(self.tm, float(terms.sum(-1).max()))
        for cutoff in SEARCH_CUTOFFS:
            within = squared <= cutoff * cutoff
            self.counts[cutoff] = max(self.counts[cutoff], int(np.count_nonzero(within, axis=1).max()))

    def novel(self, masks: np.ndarray, iteration: int) -> np.ndarray:
        """Rows of ``masks [S, n]`` not yet superposed at ``iteration`` or earlier (the refinement
        from a selection is deterministic, so its continuation was already scored); marks them."""
        packed = np.ascontiguousarray(np.packbits(masks, axis=1))
        keys = packed.view(f"V{packed.shape[1]}").ravel().tolist()
        visited, late = self.visited, MAX_ITERATIONS + 1
        keep = []
        for row, key in enumerate(keys):
            if visited.get(key, late) > iteration:
                visited[key] = iteration
                keep.append(row)
        return masks[keep]


def select(squared: np.ndarray, cutoff: float) -> np.ndarray:
    """Residues with ``d < cutoff`` (``squared [S, n]``, Å^2); the cutoff grows by 0.5 Å until at
    least 3 residues qualify (if n > 3)."""
    selected = squared < cutoff * cutoff
    if squared.shape[1] > 3:
        short = np.flatnonzero(np.count_nonzero(selected, axis=1) < 3)
        cut = cutoff
        while len(short):
            cut += 0.5
            selected[short] = squared[short] < cut * cut
            short = short[np.count_nonzero(selected[short], axis=1) < 3]
    return selected


def search(state: SearchState, bounds: np.ndarray) -> None:
    """Seed + iterative-extension search (``metrics`` docstring) for the seed fragments
    ``bounds`` (interleaved starts and ends, :func:`seed_bounds`), updating ``state``'s maxima."""
    squared = state.squared_distances(state.seed_sums(bounds))
    state.record(squared)
    current = state.novel(select(squared, state.d0_search - 1.0), 0)
    for iteration in range(MAX_ITERATIONS):
        if current.shape[0] == 0:
            return
        squared = state.squared_distances(current.astype(np.float64) @ state.features)
        state.record(squared)
        current = state.novel(select(squared, state.d0_search + 1.0), iteration + 1)


def search_all(pred: np.ndarray, ref: np.ndarray, d0: float, d0_search: float) -> SearchState:
    """Run :func:`search` over every seed of centred ``pred``, ``ref`` ``[n, 3]`` in chunks."""
    state = SearchState(pred, ref, d0, d0_search)
    bounds = seed_bounds(pred.shape[0])
    chunk = 2 * max(1, _CHUNK_ELEMENTS // pred.shape[0])
    for start in range(0, len(bounds), chunk):
        search(state, bounds[start:start + chunk])
    return state
