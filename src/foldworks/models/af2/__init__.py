"""The AlphaFold2 monomer model (Jumper et al. 2021, supplementary Alg 2–32), as DeepMind's v2.3
model code computes it.

:class:`~foldworks.models.af2.model.AlphaFold2` takes AF2's processed feature dict (leading
recycle dimension) and returns OpenFold-named outputs. Parameter names equal OpenFold's
``AlphaFold`` state dict, so OpenFold weights load by identity; :mod:`foldworks.models.weights`
converts DeepMind's released ``params_model_*.npz``.

Modules:

* :mod:`.config` — :class:`AF2Config`, presets (``model_1`` … ``model_5`` ± ``_ptm``,
  ``initial_training``, ``finetuning``, ``cpu_small``), mappings from DeepMind's and OpenFold's configs.
* :mod:`.primitives` — AF2-initialised linear layers, gated attention (optionally chunked over
  rows), global attention (Alg 19), shared dropout.
* :mod:`.evoformer` — MSA and pair updates (Alg 7–15), Evoformer and extra-MSA blocks (Alg 6, 18),
  template pair stack (Alg 16).
* :mod:`.geometry` — pseudo-β, squared-distance bins, template torsion features, template pair features.
* :mod:`.embedders` — input (Alg 3–4), recycling (Alg 32), extra MSA, templates (Alg 17).
* :mod:`.structure` — IPA (Alg 22), backbone update (Alg 23), angle ResNet and all atoms (Alg 20, 24).
* :mod:`.heads` — distogram, masked MSA, pLDDT, experimentally resolved, PAE/pTM and their metrics.
* :mod:`.model` — the model with recycling; :mod:`.infer` — sizes read back from a state dict.

Behaviour worth knowing:

* Template torsions follow AF2 (values not multiplied by their mask). A torsion whose frame is
  undefined — the first residue's pre-ω, built from the zero-padded previous residue — is (0, 0);
  AF2 leaves it to floating-point residue (an arbitrary unit vector under ``jit``).
* Unknown residues (X) have no atoms; the recycled pseudo-β of X is its (absent) Cβ, as in AF2.
* The structure module and the confidence metrics run in fp32 under autocast.
"""

from foldworks.models.af2.config import PRESETS, AF2Config, from_deepmind, from_reference_config, preset
from foldworks.models.af2.model import AlphaFold2, count_parameters

__all__ = ["AF2Config", "AlphaFold2", "PRESETS", "count_parameters", "from_deepmind", "from_reference_config", "preset"]
