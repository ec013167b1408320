"""Model features of a bare sequence (no structure) and its alignment.

The same arrays as the features stage (:func:`foldworks.features.build.build_features`, DATA
FORMATS section 5) with every residue present (``residue_mask`` 1) and no atom known
(``atom_mask`` 0, ``atom_positions`` 0): what a prediction needs and nothing it would score.
"""

from __future__ import annotations

import numpy as np

from foldworks.constants import ATOM_TYPE_NUM, sequence_to_aatype
from foldworks.features.build import build_features


def sequence_arrays(sequence: str) -> dict[str, np.ndarray]:
    """Chain arrays of ``sequence`` (length ``L``): ``aatype [L]``, ``atom_positions [L, 37, 3]``
    (zeros, Å), ``atom_mask [L, 37]`` (False), ``residue_mask [L]`` (True)."""
    length = len(sequence)
    return {
        "aatype": np.asarray(sequence_to_aatype(sequence), np.int64),
        "atom_positions": np.zeros((length, ATOM_TYPE_NUM, 3), np.float32),
        "atom_mask": np.zeros((length, ATOM_TYPE_NUM), bool),
        "residue_mask": np.ones(length, bool),
    }


def query_features(name: str, sequence: str, a3m_text: str | None, max_msa_rows: int = 256, seed: int = 0,
                   allow_fallback: bool = False) -> dict[str, np.ndarray]:
    """Features of FASTA record ``name``: :func:`sequence_arrays` + the a3m's MSA, through the
    features stage's own builder (deduplication, seeded row cap, query check, failed-search
    policy); raises :class:`foldworks.features.build.FeatureError` naming ``name``."""
    return build_features(sequence_arrays(sequence), a3m_text, name, max_msa_rows, seed, allow_fallback,
                          chain_target=False)
