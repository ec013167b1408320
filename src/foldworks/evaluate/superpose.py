"""Batched rigid superposition and the TMscore-style superposition search (no torch).

The definitions (TM-score, GDT, the search itself) are in :mod:`foldworks.evaluate.metrics`
(module docstring); this module holds the vectorised implementation. Coordinates are in Å,
``n`` paired residues, ``S`` superpositions evaluated at once.

Speed: every superposition of a batch is built from one matrix product (weighted sums of the
coordinates and their outer products), its rotation from the quaternion characteristic
polynomial (QCP) of the 3 x 3 cross-covariance, vectorised over the batch (the model is first
rotated onto the reference, so the rotations are small and the quaternion well conditioned;
rows it cannot resolve to ~1e-14 go to a Newton polar iteration, and reflections or
near-singular rows to an SVD), and all squared distances from a second matrix product. GDT
counts are summed as bytes per row, and a count that already covers every residue is not
recomputed.
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
_QCP_STEPS = 60
_QCP_MIN_ROWS = 64  # smaller batches: the polar iteration (fewer NumPy calls) is faster
_QCP_TOLERANCE = 1e-11  # relative Newton step on the eigenvalue; the value is then exact (quadratic)
_QCP_MIN_NORM = 0.1  # adjugate column norm (covariance scaled to norm 1) below which rows use Newton


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


def fast_rotations(covariance: np.ndarray, bound: np.ndarray | None = None) -> np.ndarray:
    """Kabsch rotations ``[S, 3, 3]`` (``R @ x`` fits ``y``) from cross-covariances ``[S, 3, 3]``:
    :func:`quaternion_rotations` (``bound [S]``: see there), and :func:`polar_rotations` for the
    rows it cannot resolve to full precision (and for small batches, where its fewer operations
    are faster)."""
    if len(covariance) < _QCP_MIN_ROWS:
        return polar_rotations(covariance)
    rotation, precise = quaternion_rotations(covariance, bound)
    if not precise.all():
        rotation[~precise] = polar_rotations(covariance[~precise])
    return rotation


def quaternion_rotations(covariance: np.ndarray, bound: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Kabsch rotations ``[S, 3, 3]`` by the quaternion characteristic polynomial (QCP, Theobald
    2005), vectorised over rows, and ``precise [S]``: where false (a tiny first adjugate column,
    i.e. rotations near 180 degrees or an ill-defined optimum) the row must be recomputed.

    With the covariance scaled to Frobenius norm 1, the largest eigenvalue of Horn's 4 x 4 key
    matrix is found by Newton's method on its characteristic polynomial from an upper bound
    (monotone convergence): sqrt(3), or ``bound [S]`` where smaller (``(G_x + G_y) / 2``, half the
    summed squared norms of both centred point sets, in covariance units; it is the eigenvalue
    when the fit is exact). The quaternion is the first column of the adjugate of
    ``K - lambda I``. Same results as the SVD to ~1e-14 on the rows kept.
    """
    flat = covariance.reshape(-1, 9)
    scale = np.sqrt(np.einsum("si,si->s", flat, flat))
    sxx, sxy, sxz, syx, syy, syz, szx, szy, szz = (flat / np.where(scale > 0, scale, 1.0)[:, None]).T
    sq = [v * v for v in (sxx, sxy, sxz, syx, syy, syz, szx, szy, szz)]
    c2 = -2.0 * sum(sq)
    c1 = 8.0 * (sxx * syz * szy + syy * szx * sxz + szz * sxy * syx
                - sxx * syy * szz - syz * szx * sxy - szy * syx * sxz)
    xzp, yzp, xyp = sxz + szx, syz + szy, sxy + syx
    yzm, xzm, xym = syz - szy, sxz - szx, sxy - syx
    xxp, xxm = sxx + syy, sxx - syy
    yy_zz = 2.0 * (syz * szy - syy * szz)
    diag = sq[4] + sq[8] - sq[0] + sq[5] + sq[7]
    off = sq[1] + sq[2] - sq[3] - sq[6]
    c0 = (off * off + (diag + yy_zz) * (diag - yy_zz)
          + (-xzp * yzm + xym * (xxm - szz)) * (-xzm * yzp + xym * (xxm + szz))
          + (-xzp * yzp - xyp * (xxp - szz)) * (-xzm * yzm - xyp * (xxp + szz))
          + (xyp * yzp + xzp * (xxm + szz)) * (-xym * yzm + xzp * (xxp + szz))
          + (xyp * yzm + xzm * (xxm - szz)) * (-xym * yzp + xzm * (xxp - szz)))
    start = np.full(len(flat), np.sqrt(3.0))
    if bound is not None:  # the slack covers rounding of an exact fit (Newton then steps down)
        start = np.minimum(start, bound / np.where(scale > 0, scale, 1.0) + 1e-9)
    value, converged = _largest_root(c0, c1, c2, start, scale > 0)
    a13, a14, a23, a24, a34 = -xzm, xym, xyp, xzp, yzp
    a22, a33, a44 = xxm - szz - value, syy - sxx - szz - value, szz - xxp - value
    m3344, m3244, m3243 = a33 * a44 - a34 * a34, a23 * a44 - a24 * a34, a23 * a34 - a24 * a33
    m3144, m3143, m3142 = a13 * a44 - a14 * a34, a13 * a34 - a14 * a33, a13 * a24 - a14 * a23
    q = np.stack([a22 * m3344 - a23 * m3244 + a24 * m3243,
                  -yzm * m3344 + a23 * m3144 - a24 * m3143,
                  yzm * m3244 - a22 * m3144 + a24 * m3142,
                  -yzm * m3243 + a22 * m3143 - a23 * m3142])
    norm = np.sqrt(np.einsum("ks,ks->s", q, q))
    precise = converged & (norm > _QCP_MIN_NORM)
    w, x, y, z = q / np.where(norm > 0, norm, 1.0)
    rotation = np.stack([w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (z * x + w * y),
                         2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x),
                         2 * (z * x - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z], -1)
    return rotation.reshape(-1, 3, 3), precise


def _largest_root(c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, start: np.ndarray,
                  valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Largest root ``[S]`` of ``x^4 + c2 x^2 + c1 x + c0`` (all roots real) by Newton's method
    from ``start`` (an upper bound), and ``converged [S]`` (false where ``valid`` is false).
    Rows that have converged are dropped from the iteration."""
    value = start.astype(np.float64)
    converged = np.zeros(len(c0), bool)
    rows = np.flatnonzero(valid)
    current, c0, c1, c2 = value[rows], c0[rows], c1[rows], c2[rows]
    with np.errstate(divide="ignore", invalid="ignore"):  # NaN rows end up imprecise
        for _ in range(_QCP_STEPS):
            square = current * current
            b = (square + c2) * current
            a = b + c1
            current = current - (a * current + c0) / (2.0 * square * current + b + a)
            moving = np.abs(value[rows] - current) >= _QCP_TOLERANCE * current
            value[rows] = current
            converged[rows[~moving]] = True
            if not moving.any():
                break
            rows, current, c0, c1, c2 = rows[moving], current[moving], c0[moving], c1[moving], c2[moving]
    return value, converged


def polar_rotations(covariance: np.ndarray) -> np.ndarray:
    """Kabsch rotations ``[S, 3, 3]`` (``R @ x`` fits ``y``) from cross-covariances ``[S, 3, 3]``.

    Where ``det > 0`` the optimal proper rotation is the transposed orthogonal polar factor of
    the covariance, found by scaled Newton iteration ``X <- (g X + X^-T / g) / 2`` (``X^-T`` =
    cofactors / det, ``g = (|X^-T| / |X|)^(1/2)``, Frobenius norms) on all rows at once; rows with
    ``det <= 0`` (a reflection would fit better), a tiny ``det`` or no convergence are handled by
    :func:`rotation_from_covariance` (SVD).
    """
    flat = covariance.reshape(-1, 9)
    scale = np.sqrt(np.einsum("si,si->s", flat, flat))
    x = flat / np.where(scale > 0, scale, 1.0)[:, None]
    cof = x[:, _COF_A] * x[:, _COF_B] - x[:, _COF_C] * x[:, _COF_D]
    det = np.einsum("si,si->s", x[:, :3], cof[:, :3])  # of the normalised matrix
    good = det > 1e-9
    rows = np.flatnonzero(good)
    x, cof, det, change = x[rows], cof[rows], det[rows], np.zeros(len(rows))
    for step in range(_POLAR_STEPS):
        gamma = np.sqrt(np.sqrt(np.einsum("si,si->s", cof, cof) / np.einsum("si,si->s", x, x)) / det)
        new = x * (0.5 * gamma)[:, None]
        new += cof * (0.5 / (gamma * det))[:, None]
        x -= new  # minus the change of this step
        if max(x.max(initial=0.0), -x.min(initial=0.0)) < _POLAR_TOLERANCE:
            x = new
            break
        if step == _POLAR_STEPS - 1:  # out of steps: rows still moving go to the SVD below
            change = np.abs(x).max(-1)
        x = new
        cof = x[:, _COF_A] * x[:, _COF_B] - x[:, _COF_C] * x[:, _COF_D]
        det = np.einsum("si,si->s", x[:, :3], cof[:, :3])
    good[rows[change >= _POLAR_TOLERANCE]] = False
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

    ``features [n, 17]`` (1, pred, ref, pred (x) ref, |p|^2 + |r|^2) give every weighted sum
    needed for a superposition by one product ``weights @ features``; ``basis [17, n]`` (1,
    |p|^2 + |r|^2, ref,
    pred, pred (x) ref) turns per-superposition coefficients into squared distances
    ``|R p + t - r|^2`` by a second product.
    """

    def __init__(self, pred: np.ndarray, ref: np.ndarray, d0: float, d0_search: float) -> None:
        n = pred.shape[0]
        moments = (pred[:, :, None] * ref[:, None, :]).reshape(n, 9)
        norms = np.sum(pred ** 2 + ref ** 2, -1)[:, None]
        self.features = np.concatenate([np.ones((n, 1)), pred, ref, moments, norms], axis=1)
        self.basis = np.concatenate([np.ones((1, n)), norms.T, ref.T, pred.T, moments.T], axis=0)
        self.d0_squared, self.d0_search = d0 * d0, d0_search
        self.tm = -1.0
        self.counts = {c: -1 for c in SEARCH_CUTOFFS}
        self.visited: dict[bytes, int] = {}

    def seed_sums(self, bounds: np.ndarray) -> np.ndarray:
        """``[S, 17]`` sums of ``features`` over the fragments ``bounds`` (:func:`seed_bounds`)."""
        padded = np.concatenate([self.features, np.zeros((1, self.features.shape[1]))])
        return np.add.reduceat(padded, bounds, axis=0)[::2]

    def squared_distances(self, sums: np.ndarray) -> np.ndarray:
        """``[S, n]`` squared distances (Å^2) after each superposition given by ``sums [S, 17]``
        (``weights @ features``: the weighted sums over its residues). Only compared with
        cutoffs and used in ``1 / (1 + d^2 / d0^2)``, so no square root is taken."""
        total = sums[:, 0]
        safe = np.where(total > 0, total, 1.0)[:, None]
        mobile_centre, target_centre = sums[:, 1:4] / safe, sums[:, 4:7] / safe
        covariance = (sums[:, 7:16].reshape(-1, 3, 3)  # a new array: ``sums`` stays unchanged
                      - total[:, None, None] * mobile_centre[:, :, None] * target_centre[:, None, :])
        spread = sums[:, 16] - total * np.sum(mobile_centre ** 2 + target_centre ** 2, -1)
        rotation = fast_rotations(covariance, 0.5 * spread)
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
        n = squared.shape[1]
        within = np.empty(squared.shape, bool)
        for cutoff in SEARCH_CUTOFFS:
            if self.counts[cutoff] < n:  # a count that reached n cannot grow
                np.less_equal(squared, cutoff * cutoff, out=within)
                self.counts[cutoff] = max(self.counts[cutoff], int(row_counts(within).max()))

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


def row_counts(flags: np.ndarray) -> np.ndarray:
    """Number of true entries per row of ``flags [S, n]`` (bool); summed as bytes, which is ~3x
    faster than ``np.count_nonzero(axis=1)``."""
    return flags.view(np.uint8).sum(1, dtype=np.int16 if flags.shape[1] < 2 ** 15 else np.int64)


def select(squared: np.ndarray, cutoff: float) -> np.ndarray:
    """Residues with ``d < cutoff`` (``squared [S, n]``, Å^2); the cutoff grows by 0.5 Å until at
    least 3 residues qualify (if n > 3)."""
    selected = squared < cutoff * cutoff
    if squared.shape[1] > 3:
        short = np.flatnonzero(row_counts(selected) < 3)
        cut = cutoff
        while len(short):
            cut += 0.5
            selected[short] = squared[short] < cut * cut
            short = short[row_counts(selected[short]) < 3]
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
    """Run :func:`search` over every seed of centred ``pred``, ``ref`` ``[n, 3]`` in chunks.

    ``pred`` is first rotated onto ``ref`` (all residues; distances after each optimal
    superposition do not depend on it), so the rotations searched are small and
    :func:`quaternion_rotations` resolves nearly all of them."""
    zeros = np.zeros(3)
    rotation = rotation_from_covariance(pred.T @ ref, zeros, zeros, np.ones(()))[0]
    state = SearchState(pred @ rotation.T, ref, d0, d0_search)
    bounds = seed_bounds(pred.shape[0])
    chunk = 2 * max(1, _CHUNK_ELEMENTS // pred.shape[0])
    for start in range(0, len(bounds), chunk):
        search(state, bounds[start:start + chunk])
    return state
