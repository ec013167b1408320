"""Structure-prediction model families behind one registry (imports torch).

>>> from foldworks.models import build_model
>>> model = build_model("distogram", {"channels": 32})
"""

from foldworks.models.registry import MODEL_REGISTRY, build_model, register_model
from foldworks.models.common import lddt_ca, kabsch_align, ideal_helix_ca
from foldworks.models import distogram as _distogram  # noqa: F401  (registers "distogram")
from foldworks.models import msa_trunk as _msa_trunk  # noqa: F401  (registers "msa_trunk")
from foldworks.models import openfold as _openfold  # noqa: F401  (registers "evoformer")

__all__ = ["MODEL_REGISTRY", "build_model", "register_model", "lddt_ca", "kabsch_align", "ideal_helix_ca"]
