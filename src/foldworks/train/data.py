"""Feature-cache data pipeline: chains table → per-chain examples → crops → padded batches.

Examples are numpy dicts with the keys of the model batch (see :mod:`foldworks.models.common`)
minus the padding masks; :func:`collate` pads them (``mask`` marks real residues, ``msa_mask``
real MSA rows). Feature files are read one item at a time (never the whole set up front).
Training crops and MSA subsamples are a pure function of ``(seed, epoch, slot)`` (see
:mod:`foldworks.train.sampling`), so the same values reach worker processes and resumed runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import signal
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from foldworks.constants import CA_INDEX
from foldworks.features.af2 import Af2DataConfig, chain_from_feature_cache, make_af2_example
from foldworks.features.af2.draws import sample_rng
from foldworks.features.af2.pipeline import RESIDUE_AXIS
from foldworks.ids import target_id
from foldworks.train.sampling import TrainBatchSampler, ValBatchSampler
from foldworks.train.templates import (STREAM_TEMPLATES, load_templates, missing_template_files, pick_templates,
                                       template_path)

log = logging.getLogger(__name__)


def load_feature_file(path: Path) -> dict[str, np.ndarray]:
    """Read one ``data/features/{target}.npz`` (DATA_FORMATS.md §5) into memory."""
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def select_rows(chains: pd.DataFrame, splits: Sequence[str], features_dir: Path) -> pd.DataFrame:
    """Rows of ``splits`` that passed filters and have a feature file, sorted by target.

    Columns ``target, path, length`` (residues), ``weight`` (``sample_weight``, 1.0 when the
    table has none) and ``resolution`` (Å, NaN when unknown). Rows without a feature file are skipped with a warning naming them.
    """
    rows = chains[chains["split"].isin(list(splits))]
    if "passed_filters" in rows:
        rows = rows[rows["passed_filters"].astype(bool)]
    targets = [target_id(str(e), str(c)) for e, c in zip(rows["entry"], rows["chain"])]
    lengths = rows["length"] if "length" in rows else rows["sequence"].str.len()
    weights = rows["sample_weight"] if "sample_weight" in rows else pd.Series(1.0, index=rows.index)
    resolution = (pd.to_numeric(rows["resolution"], errors="coerce") if "resolution" in rows
                  else pd.Series(np.nan, index=rows.index))
    table = pd.DataFrame({"target": targets, "path": [features_dir / f"{t}.npz" for t in targets],
                          "length": lengths.astype(int).to_numpy(), "weight": weights.astype(float).to_numpy(),
                          "resolution": resolution.astype(float).to_numpy()})
    present = np.array([p.exists() for p in table["path"]], dtype=bool)
    if (~present).any():
        missing = table.loc[~present, "target"].tolist()
        log.warning("%d %s chains have no feature file, skipped: %s", len(missing), "/".join(splits),
                    ", ".join(missing[:10]))
    return table[present].sort_values("target").reset_index(drop=True)


def select_targets(chains: pd.DataFrame, splits: Sequence[str], features_dir: Path) -> list[tuple[str, Path]]:
    """``(target, feature path)`` of rows in ``splits`` that passed filters, sorted by target."""
    table = select_rows(chains, splits, features_dir)
    return list(zip(table["target"], table["path"]))


def feature_set_hash(paths: Sequence[Path]) -> str:
    """SHA-256 over the sorted ``name<TAB>size`` lines of the feature files used."""
    digest = hashlib.sha256()
    for line in feature_manifest_lines(paths):
        digest.update(line.encode())
    return digest.hexdigest()


def feature_manifest_lines(paths: Sequence[Path]) -> list[str]:
    """``name<TAB>size\\n`` per feature file, sorted by name (a cheap stand-in for content hashes)."""
    return [f"{p.name}\t{p.stat().st_size}\n" for p in sorted(paths, key=lambda p: p.name)]


def crop_indices(ca: np.ndarray, residue_mask: np.ndarray, crop_size: int | None,
                 rng: np.random.Generator | None, spatial_prob: float = 0.0) -> np.ndarray:
    """Sorted residue indices of a crop of at most ``crop_size`` residues (``None`` = whole chain).

    Contiguous: a window at a random start (start 0 without ``rng``). Spatial (with probability
    ``spatial_prob``): the ``crop_size`` residues whose Cα (``ca [L, 3]``, Å) is nearest the Cα of a
    random resolved anchor residue; unresolved residues come last, nearest in sequence first.
    """
    length = int(ca.shape[0])
    if crop_size is None or length <= crop_size:
        return np.arange(length)
    resolved = np.flatnonzero(residue_mask)
    if rng is not None and spatial_prob > 0 and len(resolved) and rng.random() < spatial_prob:
        anchor = int(resolved[rng.integers(len(resolved))])
        dist = np.linalg.norm(ca - ca[anchor], axis=-1).astype(np.float64)
        dist[~residue_mask.astype(bool) | ~np.isfinite(dist)] = np.inf
        order = np.lexsort((np.abs(np.arange(length) - anchor), dist))
        return np.sort(order[:crop_size])
    start = int(rng.integers(0, length - crop_size + 1)) if rng is not None else 0
    return np.arange(start, start + crop_size)


def make_example(feats: dict[str, np.ndarray], crop_size: int | None, max_msa_rows: int,
                 rng: np.random.Generator | None, spatial_crop_prob: float = 0.0) -> dict[str, np.ndarray]:
    """Crop (see :func:`crop_indices`) and subsample MSA rows (query always kept).

    With ``rng`` the crop and MSA rows are random; without, the crop starts at 0 and the first
    ``max_msa_rows`` rows are kept (inference/validation). ``residue_index`` keeps the positions
    in the full chain (spatial crops have gaps).
    """
    ca_all = feats["atom_positions"][:, CA_INDEX]
    index = crop_indices(ca_all, feats["residue_mask"], crop_size, rng, spatial_crop_prob)
    msa = feats["msa"]
    rows = np.arange(min(msa.shape[0], max_msa_rows))
    if rng is not None and msa.shape[0] > max_msa_rows:
        rows = np.concatenate([[0], np.sort(rng.choice(np.arange(1, msa.shape[0]), max_msa_rows - 1, replace=False))])
    return {
        "aatype": feats["aatype"][index].astype(np.int64),
        "msa": msa[rows][:, index].astype(np.int64),
        "deletion_matrix": feats["deletion_matrix"][rows][:, index].astype(np.float32),
        "residue_mask": feats["residue_mask"][index].astype(bool),
        "residue_index": index.astype(np.int64),
        "ca_coords": ca_all[index].astype(np.float32),
        "all_atom_positions": feats["atom_positions"][index].astype(np.float32),
        "all_atom_mask": feats["atom_mask"][index].astype(bool),
    }


def collate(examples: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Pad examples to the longest chain / deepest MSA → batch dict (adds ``mask``, ``msa_mask``)."""
    b = len(examples)
    length = max(e["aatype"].shape[0] for e in examples)
    depth = max(e["msa"].shape[0] for e in examples)
    batch = {
        "aatype": torch.full((b, length), 20, dtype=torch.long),
        "msa": torch.full((b, depth, length), 21, dtype=torch.long),
        "msa_mask": torch.zeros(b, depth, dtype=torch.bool),
        "deletion_matrix": torch.zeros(b, depth, length),
        "mask": torch.zeros(b, length, dtype=torch.bool),
        "residue_mask": torch.zeros(b, length, dtype=torch.bool),
        "residue_index": torch.zeros(b, length, dtype=torch.long),
        "ca_coords": torch.zeros(b, length, 3),
        "all_atom_positions": torch.zeros(b, length, 37, 3),
        "all_atom_mask": torch.zeros(b, length, 37, dtype=torch.bool),
    }
    for i, e in enumerate(examples):
        n, l_i = e["msa"].shape
        batch["aatype"][i, :l_i] = torch.from_numpy(e["aatype"])
        batch["msa"][i, :n, :l_i] = torch.from_numpy(e["msa"])
        batch["msa_mask"][i, :n] = True
        batch["deletion_matrix"][i, :n, :l_i] = torch.from_numpy(e["deletion_matrix"])
        batch["mask"][i, :l_i] = True
        batch["residue_mask"][i, :l_i] = torch.from_numpy(e["residue_mask"])
        batch["residue_index"][i, :l_i] = torch.from_numpy(e["residue_index"])
        batch["ca_coords"][i, :l_i] = torch.from_numpy(e["ca_coords"])
        batch["all_atom_positions"][i, :l_i] = torch.from_numpy(e["all_atom_positions"])
        batch["all_atom_mask"][i, :l_i] = torch.from_numpy(e["all_atom_mask"])
    return batch


class ChainDataset(Dataset):
    """Chains of one split; items are addressed by ``(epoch, slot, index)`` or ``(epoch, index)`` keys.

    Training items crop with ``default_rng([seed, epoch, slot])`` (``slot`` = ``index`` for 2-tuples);
    validation items are whole chains with the first MSA rows.
    """

    def __init__(self, targets: list[tuple[str, Path]], crop_size: int | None, max_msa_rows: int,
                 seed: int, train: bool, spatial_crop_prob: float = 0.0, crop_size_min: int | None = None) -> None:
        self.targets, self.crop_size, self.max_msa_rows = targets, crop_size, max_msa_rows
        self.seed, self.train, self.spatial_crop_prob = seed, train, spatial_crop_prob
        self.crop_size_min = crop_size_min

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, key: tuple[int, ...]) -> dict[str, np.ndarray]:
        epoch, slot, index = key if len(key) == 3 else (key[0], key[1], key[1])
        target, path = self.targets[index]
        try:
            feats = load_feature_file(path)
        except Exception as exc:  # name the target in the error
            raise RuntimeError(f"{target}: cannot read features {path}: {exc}") from exc
        rng = np.random.default_rng([self.seed, epoch, slot]) if self.train else None
        crop = self.crop_size if self.train else None
        if rng is not None and crop is not None and self.crop_size_min is not None:
            crop = int(np.random.default_rng([self.seed, epoch, slot, 1]).integers(self.crop_size_min, crop + 1))
        return make_example(feats, crop, self.max_msa_rows, rng, self.spatial_crop_prob)


def _worker_init(worker_id: int) -> None:
    """Loader workers ignore SIGTERM/SIGUSR1: the main process saves a checkpoint and stops them."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    torch.set_num_threads(1)


class FeatureDataModule(L.LightningDataModule):
    """Train/val loaders over ``chains.parquet`` + ``features_dir`` for one resolved experiment config.

    ``total_micro_batches`` = ``max_steps × accumulate_grad_batches`` (per rank). The train loader
    starts at micro-batch ``global_step × accumulate_grad_batches`` of a restored trainer.
    """

    def __init__(self, chains_path: Path, features_dir: Path, data_config: dict[str, Any], seed: int,
                 num_workers: int = 0, total_micro_batches: int = 1, accumulate: int = 1) -> None:
        super().__init__()
        self.chains_path, self.features_dir = Path(chains_path), Path(features_dir)
        self.cfg, self.seed, self.num_workers = data_config, seed, num_workers
        self.total, self.accumulate = total_micro_batches, accumulate
        chains = pd.read_parquet(self.chains_path)
        self.train_rows = select_rows(chains, ["train"], self.features_dir)
        self.val_rows = select_rows(chains, ["val"], self.features_dir)
        if self.train_rows.empty or self.val_rows.empty:
            raise ValueError(f"{self.chains_path}: need train and val chains with features in "
                             f"{self.features_dir} (found {len(self.train_rows)} train, "
                             f"{len(self.val_rows)} val)")
        if "sample_weight" not in chains and data_config["sampler"] == "cluster_weighted":
            log.warning("%s has no sample_weight column: cluster-weighted sampling uses weight 1 per chain",
                        self.chains_path)
        self.train_sampler: TrainBatchSampler | None = None

    @property
    def train_targets(self) -> list[tuple[str, Path]]:
        return list(zip(self.train_rows["target"], self.train_rows["path"]))

    @property
    def val_targets(self) -> list[tuple[str, Path]]:
        return list(zip(self.val_rows["target"], self.val_rows["path"]))

    def feature_paths(self) -> list[Path]:
        return list(self.train_rows["path"]) + list(self.val_rows["path"])

    def feature_set_hash(self) -> str:
        return feature_set_hash(self.feature_paths())

    def _rank(self) -> tuple[int, int]:
        trainer = self.trainer
        return (int(trainer.global_rank), int(trainer.world_size)) if trainer is not None else (0, 1)

    def _loader(self, dataset: ChainDataset, batch_sampler: Any) -> DataLoader:
        return DataLoader(dataset, batch_sampler=batch_sampler, collate_fn=collate, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, worker_init_fn=_worker_init,
                          generator=torch.Generator().manual_seed(self.seed),  # leaves the global RNG alone
                          pin_memory=torch.cuda.is_available())

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank()
        start = int(self.trainer.global_step) * self.accumulate if self.trainer is not None else 0
        crop = int(self.cfg["crop_size"])
        self.train_sampler = TrainBatchSampler(
            np.minimum(self.train_rows["length"].to_numpy(), crop), self.train_rows["weight"].to_numpy(),
            int(self.cfg["batch_size"]), int(self.cfg["bucket_window"]), self.seed,
            self.cfg["sampler"] == "cluster_weighted", self.total, rank, world, start)
        if start:
            log.info("train loader resumes at micro-batch %d of %d (data epoch %d)", start, self.total,
                     self.train_sampler.epoch_of(start))
        crop_min = self.cfg.get("crop_size_min")
        dataset = ChainDataset(self.train_targets, crop, int(self.cfg["max_msa_rows"]), self.seed, True,
                               float(self.cfg["spatial_crop_prob"]), None if crop_min is None else int(crop_min))
        return self._loader(dataset, self.train_sampler)

    def val_dataloader(self) -> DataLoader:
        rank, world = self._rank()
        dataset = ChainDataset(self.val_targets, None, int(self.cfg["max_msa_rows"]), self.seed, False)
        sampler = ValBatchSampler(self.val_rows["length"].to_numpy(), int(self.cfg["val_batch_size"]), rank, world)
        return self._loader(dataset, sampler)

    def data_epoch(self, micro_batches_done: int) -> int:
        """Data epoch (draws of as many chains as the train split has) reached after ``micro_batches_done``
        micro-batches per rank (the same on every rank)."""
        if self.train_sampler is None:
            return 0
        return self.train_sampler.epochs_done(micro_batches_done)

    def state_dict(self) -> dict[str, Any]:
        trainer = self.trainer
        done = int(trainer.global_step) * self.accumulate if trainer is not None else 0
        return {"micro_batches_done": done, "world_size": self._rank()[1], "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        world = self._rank()[1]
        if int(state.get("world_size", world)) != world:
            log.warning("resuming on %d ranks from a checkpoint written by %d: the remaining batches are "
                        "dealt differently than in an uninterrupted run", world, state["world_size"])


def af2_sample_id(epoch: int, slot: int) -> int:
    """One non-negative sample number per ``(epoch, slot)`` for the AF2 draw streams."""
    return (int(epoch) << 32) | int(slot)


class Af2ChainDataset(ChainDataset):
    """Chains as AlphaFold2 feature batches (:func:`foldworks.features.af2.make_af2_example`), keyed
    like :class:`ChainDataset`. Training items: crop (``cfg.crop_size``), block deletion and MSA draws
    from ``(seed, epoch, slot)``; validation items: whole chains, draws from ``(seed, 0, index)``.
    Every array is ``[R, ...]`` (recycles first) except ``resolution`` (Å from ``resolutions``, a
    target → Å mapping; 0 when unknown, which the loss treats as outside its resolution window).
    ``templates_dir``: the template stage's ``{target}.npz`` files, read when the config uses
    templates (:func:`pick_templates`; training draws from ``(seed, epoch, slot)``); None: no
    template rows (the model sees ``template_mask`` 0)."""

    def __init__(self, targets: list[tuple[str, Path]], af2_config: Af2DataConfig, seed: int, train: bool,
                 resolutions: dict[str, float] | None = None, templates_dir: Path | None = None) -> None:
        super().__init__(targets, af2_config.crop_size, af2_config.num_clusters + af2_config.max_extra_msa, seed, train,
                         af2_config.spatial_crop_prob)
        self.af2_config = af2_config
        self.resolutions = resolutions or {}
        self.templates_dir = Path(templates_dir) if templates_dir is not None and af2_config.use_templates else None

    def __getitem__(self, key: tuple[int, ...]) -> dict[str, np.ndarray]:
        epoch, slot, index = key if len(key) == 3 else (key[0], key[1], key[1])
        target, path = self.targets[index]
        sample = af2_sample_id(epoch, slot) if self.train else af2_sample_id(0, index)
        templates = None
        if self.templates_dir is not None:
            rng = sample_rng(self.seed, sample, STREAM_TEMPLATES) if self.train else None
            templates = pick_templates(load_templates(self.templates_dir, target), self.af2_config.max_templates, rng)
        try:
            chain = chain_from_feature_cache(load_feature_file(path), templates, name=target)
        except Exception as exc:  # name the target in the error
            raise RuntimeError(f"{target}: cannot read features {path}: {exc}") from exc
        example = make_af2_example(chain, self.af2_config, self.seed, sample, self.train)
        resolution = self.resolutions.get(target, 0.0)
        example["resolution"] = np.asarray(0.0 if not np.isfinite(resolution) else resolution, np.float32)
        return example


def collate_af2(examples: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Stack AF2 examples to ``[B, R, ...]``, zero-padding the residue axis to the longest chain
    (padding has ``seq_mask`` 0, as AF2's fixed-size padding); integer arrays become ``torch.long``."""
    length = max(int(e["aatype"].shape[1]) for e in examples)
    batch = {}
    for key in examples[0]:
        arrays = []
        for e in examples:
            value = e[key]
            if key in RESIDUE_AXIS:
                axis = RESIDUE_AXIS[key] + 1
                widths = [(0, 0)] * value.ndim
                widths[axis] = (0, length - value.shape[axis])
                value = np.pad(value, widths)
            arrays.append(value)
        stacked = torch.from_numpy(np.stack(arrays))
        batch[key] = stacked.long() if not stacked.is_floating_point() else stacked.float()
    return batch


class Af2FeatureDataModule(FeatureDataModule):
    """:class:`FeatureDataModule` whose loaders yield AF2 batches (:class:`Af2ChainDataset`,
    :func:`collate_af2`); ``af2_config`` is a :class:`foldworks.features.af2.Af2DataConfig`. Crop
    size and spatial-crop probability come from the data config as for the other families.
    ``templates_dir``: template features of every train/val chain (checked up front when the
    config uses templates; a missing file is a ``ValueError`` naming the chains)."""

    def __init__(self, *args: Any, af2_config: Af2DataConfig, templates_dir: Path | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.af2_config = af2_config
        self.templates_dir = Path(templates_dir) if templates_dir is not None and af2_config.use_templates else None
        if self.templates_dir is not None:
            targets = [t for t, _ in self.train_targets + self.val_targets]
            missing = missing_template_files(targets, self.templates_dir)
            if missing:
                raise ValueError(f"{len(missing)} chain(s) have no template features in {self.templates_dir}: "
                                 f"{', '.join(missing[:10])}")

    def feature_set_hash(self) -> str:
        """As :meth:`FeatureDataModule.feature_set_hash`; with templates, their files' name and size
        enter it too (new template features restart the run rather than resume it)."""
        base = super().feature_set_hash()
        if self.templates_dir is None:
            return base
        paths = [template_path(self.templates_dir, t) for t, _ in self.train_targets + self.val_targets]
        return hashlib.sha256(f"{base}+templates:{feature_set_hash(paths)}".encode()).hexdigest()

    def _loader(self, dataset: ChainDataset, batch_sampler: Any) -> DataLoader:
        cfg = dataclasses.replace(self.af2_config, crop_size=dataset.crop_size if dataset.train else None,
                      spatial_crop_prob=dataset.spatial_crop_prob)
        rows = pd.concat([self.train_rows, self.val_rows])
        af2 = Af2ChainDataset(dataset.targets, cfg, dataset.seed, dataset.train,
                              dict(zip(rows["target"], rows["resolution"])), self.templates_dir)
        return DataLoader(af2, batch_sampler=batch_sampler, collate_fn=collate_af2, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, worker_init_fn=_worker_init,
                          generator=torch.Generator().manual_seed(self.seed),
                          pin_memory=torch.cuda.is_available())
