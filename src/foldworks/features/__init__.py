"""The ``features`` stage: parsed chain arrays + A3M → one ``data/features/{target}.npz``.

Public API: :func:`build_features`, :func:`load_features` (see :mod:`foldworks.features.build`).
Never imports torch.
"""

from foldworks.features.build import (
    FALLBACK_SOURCE, FEATURE_KEYS, FeatureError, MissingMsaError, build_features, load_features,
)

__all__ = ["FALLBACK_SOURCE", "FEATURE_KEYS", "FeatureError", "MissingMsaError", "build_features", "load_features"]
