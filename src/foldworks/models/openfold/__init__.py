"""OpenFold-class ``evoformer`` family, written from the AF2 supplement (Jumper et al. 2021,
"Supplementary information"; algorithm numbers below) and the OpenFold paper (Ahdritz et al. 2024).

Modules:

* :mod:`.residue_constants` — ideal residue geometry (Engh & Huber values as tabulated for AF2,
  supp. 1.8 Table 2): rigid groups, atom14 layout, chi atoms, π-periodic chis, symmetric renaming.
* :mod:`.rigid` — frames, quaternions (Alg 23), ``rigidFrom3Points`` (Alg 21), ``makeRotX`` (Alg 24).
* :mod:`.embedders` — InputEmbedder (Alg 3) with relpos ±32 (Alg 4); RecyclingEmbedder (Alg 32).
* :mod:`.evoformer` — row attention with pair bias (Alg 7), column attention (Alg 8), transitions
  (Alg 9, 15), outer-product mean (Alg 10), triangle multiplication out/in (Alg 11, 12), triangle
  attention start/end (Alg 13, 14), block (Alg 6) and stack; optional activation checkpointing per
  block and ``chunk_size`` (ops sliced along rows; identical results).
* :mod:`.structure` — IPA (Alg 22), quaternion backbone update (Alg 23), structure module with one
  shared layer applied ``n_struct_layers`` times from identity frames, rotations detached between
  layers (Alg 20), torsion ResNet (Alg 20 l. 11–14); fp32 always.
* :mod:`.all_atom` — torsions → group frames → atom14 (Alg 24), atom14 ↔ atom37, and from the
  reference atoms: backbone frames (Alg 21), group frames with π-flipped alternatives, torsion
  angles and masks (supp. 1.9.1), renamed atom14 alternative (Alg 26 input), pseudo-Cβ.
* :mod:`.heads` — distogram (64 bins 2.3125–21.6875 Å, 1.9.8), masked MSA (23 classes, 1.9.9),
  pLDDT (50 bins of lDDT-Cα, Alg 29), optional PAE (64 bins of 0.5 Å, 1.9.7).
* :mod:`.losses` — FAPE (Alg 28; clamp 10 Å, Z = 10 Å): backbone FAPE averaged over the structure
  layers and all-atom FAPE of the final layer after symmetric renaming (Alg 26); torsion and
  angle-norm loss with π-periodic alternatives (Alg 27); distogram, masked-MSA, pLDDT and PAE
  cross-entropies; optional Cα terms. Every term in fp32 with autocast disabled.
* :mod:`.model` — the family (``@register_model("evoformer")``, ``task = "structure"``): presets
  ``cpu_small`` and ``openfold_initial``, recycling (Alg 2, Alg 32), BERT masking (1.2.7).

Loss (supp. 1.9 eq. 7, initial training): 0.5 L_FAPE + 0.5 L_aux + 0.3 L_dist + 2.0 L_msa
+ 0.01 L_conf, with L_aux = backbone FAPE + L_torsion + 0.02 L_anglenorm, plus 0.1 L_pae with the
PAE head (AF2's pTM fine-tuning weight). Backbone FAPE is unclamped in 10 % of training batches
(supp. 1.11.5).

Differences from AF2 / OpenFold:

* No MSA clustering and no extra-MSA stack (Alg 18, 19): the first ``max_msa_clusters`` rows are the
  Evoformer's MSA and the full MSA enters only through the profile / deletion-mean target features
  (``common.target_features``, 45 channels instead of AF2's 22-channel target_feat and 49-channel
  cluster msa_feat). No templates; no violation or experimentally-resolved losses (fine-tuning
  terms of eq. 7).
* The recycle count is drawn uniformly in 0..``max_recycles`` from torch's RNG per forward in
  training (AF2 draws it per batch, shared across devices); eval uses ``max_recycles``.
* Recycled distances use the pseudo-Cβ of the previous cycle's atoms (Alg 32 as in the AF2 code;
  Cα for Gly and X).
* Unknown residues (X) have backbone atoms only (N, CA, C, O with ALA geometry) and no chis.
* Initialisation: AF2's "final" zero init of residual outputs, gate init to 1, identity backbone
  update; other layers use PyTorch defaults (not AF2's LeCun normal).
* Optional Cα loss terms (weight 0 = off = AF2): ``w_ca_lddt`` (AF3 smooth lDDT, AF3 supp. 4.3.2),
  ``w_ca_bond`` (consecutive Cα–Cα distances), ``w_ca_fape`` with ``ca_fape_window`` (FAPE of Cα
  in Cα pseudo-frames); see :mod:`.losses`.

Sizes (:func:`count_parameters`): ``openfold_initial`` 90,084,149 parameters (+8,256 with the PAE
head; no extra-MSA stack and no templates, so fewer than OpenFold's ~93 M); ``cpu_small``
293,469 (2 blocks, c_m 32, c_z 32, c_s 64, 4 structure layers, 16 MSA rows, ≤ 1 recycle).
"""

from foldworks.models.openfold.model import PRESETS, EvoformerModel, count_parameters

__all__ = ["EvoformerModel", "PRESETS", "count_parameters"]
