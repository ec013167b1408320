"""Batch samplers over chain indices: cluster-weighted epochs, length buckets, rank shards.

Everything is a pure function of ``(seed, epoch)`` and a position, so a resumed run (or another
worker process) sees exactly the batches an uninterrupted run sees:

* a *data epoch* ``e`` draws ``n`` chain indices (``n`` = number of train chains) with
  replacement, with probability ∝ ``sample_weight`` (``cluster_weighted``), or a permutation
  (``uniform``), from ``default_rng([seed, e, 1])``;
* its *slots* (positions in that draw) are cut into windows of ``batch_size × bucket_window``;
  each window is sorted by cropped length and split into batches (similar lengths share a
  batch, so little padding), and the batch order is shuffled with the same generator;
* the run is one stream of ``B = ceil(n / batch_size)`` batches per epoch; with ``W`` ranks,
  rank ``r``'s ``k``-th micro-batch is stream batch ``k·W + r`` (epoch ``(k·W + r) // B``).

Dataset keys are ``(epoch, slot, chain_index)``; crops draw from ``default_rng([seed, epoch, slot])``.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

Key = tuple[int, int, int]


def epoch_draw(weights: np.ndarray, seed: int, epoch: int, weighted: bool) -> tuple[np.ndarray, np.random.Generator]:
    """Chain indices ``[n]`` of data epoch ``epoch`` and the generator that drew them (for batch shuffling)."""
    rng = np.random.default_rng([seed, epoch, 1])
    n = len(weights)
    if weighted:
        return rng.choice(n, size=n, replace=True, p=weights / weights.sum()), rng
    return rng.permutation(n), rng


def bucket_batches(lengths: np.ndarray, batch_size: int, window: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Slots ``0..len(lengths)-1`` grouped into length-bucketed batches, in shuffled order.

    ``lengths[slot]`` is the cropped length (residues) of the chain in that slot. Only the last
    batch of the epoch can be smaller than ``batch_size``.
    """
    chunk = batch_size * window
    batches: list[np.ndarray] = []
    for start in range(0, len(lengths), chunk):
        part = np.arange(start, min(start + chunk, len(lengths)))
        part = part[np.argsort(lengths[part], kind="stable")]
        batches.extend(part[i:i + batch_size] for i in range(0, len(part), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


class TrainBatchSampler(Sampler):
    """Yields lists of ``(epoch, slot, chain_index)`` keys: this rank's micro-batches ``start..total-1``.

    ``len()`` is always ``total`` (the whole run), so a resumed trainer keeps counting batches
    where the interrupted one stopped; iteration begins at micro-batch ``start``.
    """

    def __init__(self, lengths: Sequence[int], weights: Sequence[float], batch_size: int, bucket_window: int,
                 seed: int, weighted: bool, total: int, rank: int = 0, world_size: int = 1, start: int = 0) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.weights = np.asarray(weights, dtype=np.float64)
        if len(self.lengths) == 0 or (weighted and not self.weights.sum() > 0):
            raise ValueError("no train chains with a positive sample_weight")
        self.batch_size, self.window, self.seed, self.weighted = batch_size, bucket_window, seed, weighted
        self.total, self.rank, self.world_size, self.start = total, rank, world_size, start
        self.batches_per_epoch = math.ceil(len(self.lengths) / batch_size)
        self._cache: tuple[int, np.ndarray, list[np.ndarray]] | None = None

    def __len__(self) -> int:
        return self.total

    def epoch_of(self, micro_batch: int) -> int:
        """Data epoch of this rank's micro-batch ``micro_batch`` (0-based)."""
        return (micro_batch * self.world_size + self.rank) // self.batches_per_epoch

    def epochs_done(self, micro_batches: int) -> int:
        """Data epoch of the last stream batch once every rank has taken ``micro_batches`` micro-batches."""
        return max(0, micro_batches * self.world_size - 1) // self.batches_per_epoch

    def _epoch(self, epoch: int) -> tuple[np.ndarray, list[np.ndarray]]:
        if self._cache is None or self._cache[0] != epoch:
            draw, rng = epoch_draw(self.weights, self.seed, epoch, self.weighted)
            batches = bucket_batches(self.lengths[draw], self.batch_size, self.window, rng)
            self._cache = (epoch, draw, batches)
        return self._cache[1], self._cache[2]

    def batch(self, micro_batch: int) -> list[Key]:
        """Keys of this rank's micro-batch ``micro_batch``."""
        epoch, position = divmod(micro_batch * self.world_size + self.rank, self.batches_per_epoch)
        draw, batches = self._epoch(epoch)
        return [(epoch, int(slot), int(draw[slot])) for slot in batches[position]]

    def __iter__(self) -> Iterator[list[Key]]:
        for k in range(self.start, self.total):
            yield self.batch(k)


class ValBatchSampler(Sampler):
    """This rank's share of the validation chains (every ``W``-th by length), in batches.

    Chains are sorted by length (stable on the sorted target order), dealt round-robin to the
    ranks without padding or repeats, so each chain is scored exactly once over all ranks.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, rank: int = 0, world_size: int = 1) -> None:
        order = np.argsort(np.asarray(lengths), kind="stable")[rank::world_size]
        self.batches = [[(0, int(i), int(i)) for i in order[j:j + batch_size]]
                        for j in range(0, len(order), batch_size)]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[Key]]:
        return iter(self.batches)
