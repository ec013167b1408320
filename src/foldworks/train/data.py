"""Feature-cache data pipeline: chains table → per-chain examples → crops → padded batches.

Examples are numpy dicts with the keys of the model batch (see :mod:`foldworks.models.common`)
minus the padding masks; :func:`collate` pads them. Training crops and MSA subsamples are a
pure function of ``(seed, epoch, index)``: the sampler yields ``(epoch, index)`` pairs so the
same values reach worker processes.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Iterator, Sequence

import lightning as L
import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from foldworks.constants import CA_INDEX
from foldworks.ids import target_id

log = logging.getLogger(__name__)


def load_feature_file(path: Path) -> dict[str, np.ndarray]:
    """Read one ``data/features/{target}.npz`` (DATA_FORMATS.md §5) into memory."""
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def select_targets(chains: pd.DataFrame, splits: Sequence[str], features_dir: Path) -> list[tuple[str, Path]]:
    """``(target, feature path)`` of rows in ``splits`` that passed filters, sorted by target.

    Rows without a feature file are skipped with a warning naming them.
    """
    rows = chains[chains["split"].isin(list(splits))]
    if "passed_filters" in rows:
        rows = rows[rows["passed_filters"].astype(bool)]
    out, missing = [], []
    for entry, chain in zip(rows["entry"], rows["chain"]):
        target = target_id(str(entry), str(chain))
        path = features_dir / f"{target}.npz"
        (out if path.exists() else missing).append((target, path))
    if missing:
        log.warning("%d %s chains have no feature file, skipped: %s", len(missing), "/".join(splits),
                    ", ".join(t for t, _ in missing[:10]))
    return sorted(out)


def feature_set_hash(paths: Sequence[Path]) -> str:
    """SHA-256 over the sorted ``name<TAB>size`` lines of the feature files used."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        digest.update(f"{path.name}\t{path.stat().st_size}\n".encode())
    return digest.hexdigest()


def make_example(feats: dict[str, np.ndarray], crop_size: int | None, max_msa_rows: int,
                 rng: np.random.Generator | None) -> dict[str, np.ndarray]:
    """Crop (contiguous, ``crop_size`` residues; ``None`` = whole chain) and subsample MSA rows.

    With ``rng`` the crop start and MSA rows (query always kept) are random; without, the crop
    starts at 0 and the first ``max_msa_rows`` rows are kept (inference/validation).
    """
    length = int(feats["aatype"].shape[0])
    start = 0
    if crop_size is not None and length > crop_size:
        start = int(rng.integers(0, length - crop_size + 1)) if rng is not None else 0
    stop = length if crop_size is None else min(length, start + crop_size)
    msa = feats["msa"]
    rows = np.arange(min(msa.shape[0], max_msa_rows))
    if rng is not None and msa.shape[0] > max_msa_rows:
        rows = np.concatenate([[0], np.sort(rng.choice(np.arange(1, msa.shape[0]), max_msa_rows - 1, replace=False))])
    window = slice(start, stop)
    return {
        "aatype": feats["aatype"][window].astype(np.int64),
        "msa": msa[rows][:, window].astype(np.int64),
        "deletion_matrix": feats["deletion_matrix"][rows][:, window].astype(np.float32),
        "residue_mask": feats["residue_mask"][window].astype(bool),
        "residue_index": np.arange(start, stop, dtype=np.int64),
        "ca_coords": feats["atom_positions"][window, CA_INDEX].astype(np.float32),
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
    return batch


class ChainDataset(Dataset):
    """Chains of one split; items are addressed by ``(epoch, index)`` (see :class:`EpochSampler`)."""

    def __init__(self, targets: list[tuple[str, Path]], crop_size: int | None, max_msa_rows: int,
                 seed: int, train: bool) -> None:
        self.targets, self.crop_size, self.max_msa_rows = targets, crop_size, max_msa_rows
        self.seed, self.train = seed, train

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, key: tuple[int, int]) -> dict[str, np.ndarray]:
        epoch, index = key
        target, path = self.targets[index]
        try:
            feats = load_feature_file(path)
        except Exception as exc:  # name the target in the error
            raise RuntimeError(f"{target}: cannot read features {path}: {exc}") from exc
        rng = np.random.default_rng([self.seed, epoch, index]) if self.train else None
        return make_example(feats, self.crop_size if self.train else None, self.max_msa_rows, rng)


class EpochSampler(Sampler):
    """Yields ``(epoch, index)``; shuffles with ``default_rng([seed, epoch])`` when ``shuffle``."""

    def __init__(self, size: int, seed: int, shuffle: bool) -> None:
        self.size, self.seed, self.shuffle, self.epoch = size, seed, shuffle, 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        self.epoch += 1 if self.shuffle else 0
        order = np.random.default_rng([self.seed, epoch]).permutation(self.size) if self.shuffle else range(self.size)
        return iter([(epoch, int(i)) for i in order])


class FeatureDataModule(L.LightningDataModule):
    """Train/val loaders over ``chains.parquet`` + ``features_dir`` for one resolved experiment config."""

    def __init__(self, chains_path: Path, features_dir: Path, data_config: dict[str, Any], seed: int,
                 num_workers: int = 0) -> None:
        super().__init__()
        self.chains_path, self.features_dir = Path(chains_path), Path(features_dir)
        self.cfg, self.seed, self.num_workers = data_config, seed, num_workers
        chains = pd.read_parquet(self.chains_path)
        self.train_targets = select_targets(chains, ["train"], self.features_dir)
        self.val_targets = select_targets(chains, ["val"], self.features_dir)
        if not self.train_targets or not self.val_targets:
            raise ValueError(f"{self.chains_path}: need train and val chains with features in "
                             f"{self.features_dir} (found {len(self.train_targets)} train, "
                             f"{len(self.val_targets)} val)")

    def feature_set_hash(self) -> str:
        return feature_set_hash([p for _, p in self.train_targets + self.val_targets])

    def _loader(self, train: bool) -> DataLoader:
        targets = self.train_targets if train else self.val_targets
        dataset = ChainDataset(targets, self.cfg["crop_size"], self.cfg["max_msa_rows"], self.seed, train)
        return DataLoader(dataset, batch_size=self.cfg["batch_size"] if train else self.cfg["val_batch_size"],
                          sampler=EpochSampler(len(dataset), self.seed, shuffle=train), collate_fn=collate,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
                          drop_last=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader(train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(train=False)
