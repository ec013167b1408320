"""Weight interchange: DeepMind and OpenFold AlphaFold2 weights → foldworks checkpoints, and back
to either. See :mod:`foldworks.models.weights.registry` for the format registry and
``python -m foldworks.models.import_weights`` for the command line."""

from foldworks.models.weights.errors import WeightsError

__all__ = ["WeightsError"]
