"""OpenFold-class ``evoformer`` family (AF2 supplement, Jumper et al. 2021; OpenFold, Ahdritz et al. 2024).

Written in the project from the papers; algorithm numbers refer to the AF2 supplement.
"""

from foldworks.models.openfold.model import PRESETS, EvoformerModel, count_parameters

__all__ = ["EvoformerModel", "PRESETS", "count_parameters"]
