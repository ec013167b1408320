"""Weight interchange: DeepMind and OpenFold AlphaFold2 weights → foldworks checkpoints, and back
to OpenFold. See :mod:`foldworks.models.weights.registry` for the format registry."""

from foldworks.models.weights.errors import WeightsError

__all__ = ["WeightsError"]
