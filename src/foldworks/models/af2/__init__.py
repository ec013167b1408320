"""The AlphaFold2 monomer model (Jumper et al. 2021, supplementary Alg 2–32).

:class:`~foldworks.models.af2.model.AlphaFold2` takes AF2's processed feature dict (leading
recycle dimension) and returns OpenFold-named outputs; parameter names equal OpenFold's, and
:mod:`foldworks.models.weights` converts DeepMind's released parameters.
"""

from foldworks.models.af2.config import PRESETS, AF2Config, from_deepmind, from_fixture_config, preset
from foldworks.models.af2.model import AlphaFold2, count_parameters

__all__ = ["AF2Config", "AlphaFold2", "PRESETS", "count_parameters", "from_deepmind", "from_fixture_config", "preset"]
