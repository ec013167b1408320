"""AlphaFold2's training loss (AF2 supplement 1.9; numerically OpenFold's ``AlphaFoldLoss``).

Modules: :mod:`.supervision` (ground-truth features from atom37 truth), :mod:`.fape` (Alg 28, 26),
:mod:`.torsion` (Alg 27), :mod:`.categorical` (distogram, masked MSA), :mod:`.confidence` (pLDDT,
experimentally resolved, TM), :mod:`.violation` (1.9.11), :mod:`.total` (weights, scaling, contract).
"""

from foldworks.models.af2.loss.supervision import make_supervision
from foldworks.models.af2.loss.total import LossConfig, LossWeights, alphafold_loss

__all__ = ["LossConfig", "LossWeights", "alphafold_loss", "make_supervision"]
