"""ProteinMPNN inverse folding (backbone → sequence): model, featurisation, sampling.

>>> from foldworks.models.mpnn import MPNNModel
>>> model = MPNNModel(preset="v_48_020")
"""

from foldworks.models.mpnn.features import ALPHABET, AATYPE_TO_TOKEN, TOKEN_TO_AATYPE, batch_inputs, knn_graph
from foldworks.models.mpnn.model import PRESETS, MPNNModel, decoding_order, sequence_scores
from foldworks.models.mpnn.sampling import conditional_probs, sample, unconditional_probs

__all__ = ["ALPHABET", "AATYPE_TO_TOKEN", "TOKEN_TO_AATYPE", "PRESETS", "MPNNModel", "batch_inputs",
           "conditional_probs", "decoding_order", "knn_graph", "sample", "sequence_scores", "unconditional_probs"]
