"""Model families (structure prediction and sequence design) behind one registry (imports torch).

>>> from foldworks.models import build_model
>>> model = build_model("distogram", {"channels": 32})
"""

from foldworks.models.registry import MODEL_REGISTRY, TASKS, build_model, model_task, register_model
from foldworks.models.common import lddt_ca, kabsch_align, ideal_helix_ca
from foldworks.models import distogram as _distogram  # noqa: F401  (registers "distogram")
from foldworks.models import msa_trunk as _msa_trunk  # noqa: F401  (registers "msa_trunk")
from foldworks.models.af2 import family as _af2_family  # noqa: F401  (registers "evoformer")
from foldworks.models import mpnn as _mpnn  # noqa: F401  (registers "mpnn")

__all__ = ["MODEL_REGISTRY", "TASKS", "build_model", "model_task", "register_model", "lddt_ca", "kabsch_align", "ideal_helix_ca"]
