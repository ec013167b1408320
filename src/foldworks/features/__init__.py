"""The ``features`` stage: parsed chain arrays + A3M → one ``data/features/{target}.npz``.

Public API: :func:`build_features`, :func:`load_features` (see :mod:`foldworks.features.build`).
Never imports torch.
"""

from foldworks.features.build import FEATURE_KEYS, FeatureError, build_features, load_features

__all__ = ["FEATURE_KEYS", "FeatureError", "build_features", "load_features"]
