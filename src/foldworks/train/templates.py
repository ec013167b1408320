"""Template features of the template stage (``data/templates/features/{target}.npz``, AF2 keys)
for the AF2 data path: which file belongs to a chain, reading it, and choosing the templates a
sample sees (a seeded random subset in training, the top hits at inference)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from foldworks.features.af2.pipeline import TEMPLATE_KEYS

#: :func:`foldworks.features.af2.draws.sample_rng` stream of the training template subsample.
STREAM_TEMPLATES = 3


def template_path(templates_dir: Path, target: str) -> Path:
    """``{templates_dir}/{target}.npz``: the template stage's features of one query chain."""
    return Path(templates_dir) / f"{target}.npz"


def missing_template_files(targets: Sequence[str], templates_dir: Path) -> list[str]:
    """Targets of ``targets`` without a template feature file in ``templates_dir``."""
    return [t for t in targets if not template_path(templates_dir, t).is_file()]


def load_templates(templates_dir: Path, target: str) -> dict[str, np.ndarray]:
    """The AF2 template arrays (:data:`TEMPLATE_KEYS`) of ``target``; ``T`` may be 0.

    Raises ``ValueError`` naming the chain when its file is missing or lacks a key."""
    path = template_path(templates_dir, target)
    if not path.is_file():
        raise ValueError(f"{target}: no template features {path} (run the template stage)")
    with np.load(path, allow_pickle=False) as data:
        missing = [key for key in TEMPLATE_KEYS if key not in data.files]
        if missing:
            raise ValueError(f"{target}: template features {path} lack {', '.join(missing)}")
        return {key: data[key] for key in TEMPLATE_KEYS}


def pick_templates(templates: dict[str, np.ndarray], max_templates: int,
                   rng: np.random.Generator | None) -> dict[str, np.ndarray]:
    """The templates one sample sees, from ``templates`` (hits best ``sum_probs`` first, ``[T, ...]``).

    Inference (``rng`` None): the top ``min(T, max_templates)`` hits. Training (AF2 supp. 1.2.3):
    ``k = min(U{0..T}, max_templates)`` hits chosen uniformly at random, in random order; the
    template stage already keeps at most ``templates.max_hits`` (AF2: 20) per chain."""
    count = int(templates["template_aatype"].shape[0])
    if rng is None:
        order = np.arange(min(count, int(max_templates)))
    else:
        keep = min(int(rng.integers(0, count + 1)), int(max_templates))
        order = rng.permutation(count)[:keep]
    return {key: np.asarray(value)[order] for key, value in templates.items()}
