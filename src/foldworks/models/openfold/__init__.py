"""OpenFold-class ``evoformer`` family, written in the project from the AF2 supplement (Jumper et al.
2021, "Supplementary information", algorithm numbers below) and the OpenFold paper (Ahdritz et al. 2024).

Modules (each ≤ ~300 lines):

* :mod:`.residue_constants` — ideal residue geometry (Engh & Huber values as tabulated for AF2,
  supp. 1.8 Table 2): rigid groups, atom14 layout, chi atoms, π-periodic chis, symmetric renaming.
* :mod:`.rigid` — frames, quaternions (Alg 23), ``rigidFrom3Points`` (Alg 21), ``makeRotX`` (Alg 24).
* :mod:`.embedders` — InputEmbedder (Alg 3) with relpos ±32 (Alg 4); RecyclingEmbedder (Alg 32).
* :mod:`.evoformer` — row attention with pair bias (Alg 7), column attention (Alg 8), transitions
  (Alg 9, 15), outer-product mean (Alg 10), triangle multiplication out/in (Alg 11, 12), triangle
  attention start/end (Alg 13, 14), block (Alg 6) and stack; gated attention via
  ``F.scaled_dot_product_attention`` with an additive float bias; options: activation
  checkpointing per block (``torch.utils.checkpoint``, non-reentrant) and ``chunk_size``
  (attention / triangle / outer-product ops sliced along rows; identical results, tested).
* :mod:`.structure` — IPA (Alg 22), quaternion backbone update (Alg 23), structure module with
  one shared layer applied ``n_struct_layers`` times, identity ("black hole") initial frames,
  rotation stop-gradient between layers, torsion ResNet (Alg 20 l. 11–14); fp32 always.
* :mod:`.all_atom` — torsions → group frames → atom14 (Alg 24), atom14 ↔ atom37, and from the
  reference atoms: backbone frames (Alg 21), group frames with π-flipped alternatives, torsion
  angles and masks (supp. 1.9.1), renamed atom14 alternative (Alg 26 input), pseudo-Cβ.
* :mod:`.heads` — distogram (64 bins 2.3125–21.6875 Å, 1.9.8), masked MSA (23 classes, 1.9.9),
  pLDDT (50 bins of lDDT-Cα, Alg 29), optional PAE (64 bins of 0.5 Å, 1.9.7).
* :mod:`.losses` — FAPE (Alg 28; clamp 10 Å, Z = 10 Å): backbone FAPE averaged over the structure
  layers and all-atom (side-chain) FAPE of the final layer after symmetric renaming (Alg 26);
  torsion + angle-norm loss with π-periodic alternatives (Alg 27); distogram, masked-MSA, pLDDT and
  PAE cross-entropies. Total = supp. 1.9 eq. 7 (initial training): 0.5 L_FAPE + 0.5 L_aux +
  0.3 L_dist + 2.0 L_msa + 0.01 L_conf, L_aux = bb FAPE + L_torsion + 0.02 L_anglenorm
  (+ ``w_pae`` = 0.1 × L_pae with the PAE head, the weight AF2 used for its pTM fine-tuning).
  Every term in fp32 with autocast disabled.
* :mod:`.model` — the family (``@register_model("evoformer")``, ``task = "structure"``): presets
  ``cpu_small`` and ``openfold_initial``, recycling (Alg 2, Alg 32), BERT masking (1.2.7).

Simplified vs AF2/OpenFold, and why:

* **No MSA clustering and no extra-MSA stack** (Alg 18/19): the first ``max_msa_clusters`` rows are
  the Evoformer's MSA, the full MSA enters only via the profile/deletion-mean target features
  (``common.target_features``, 45 channels instead of AF2's 22-channel target_feat + 49-channel
  cluster msa_feat). The demo's feature cache has shallow MSAs, and clustering belongs in the
  data pipeline. ``openfold_initial`` therefore has 90.1 M parameters vs ~93 M in OpenFold
  (no extra-MSA stack, no templates).
* **No templates**, no violation / experimentally-resolved losses (fine-tuning terms of eq. 7).
  Backbone FAPE is unclamped in ``unclamped_fape_fraction`` (10 %) of training batches as AF2
  (1.11.5), drawn per batch from torch's RNG; side-chain FAPE is always clamped.
* **Recycle count**: uniform 0..``max_recycles`` from torch's RNG per forward in training (AF2
  samples it per batch, shared across devices); eval uses ``max_recycles``.
* **Recycled distances** use the pseudo-Cβ of the previous cycle's atoms (Alg 32 as in the AF2
  code; Cα for Gly and X).
* **Unknown residues (X)**: backbone atoms only (N, CA, C, O with ALA backbone geometry), no chis,
  so their side chains are absent from every loss.
* **Optional Cα smooth-lDDT loss** (``w_ca_lddt``, default 0 = AF2; the demo sets 1.0): AF3's smooth
  lDDT (AF3 supp. 4.3.2, sigmoid of 0.5/1/2/4 Å minus the distance error, pairs < 15 Å) on the final
  Cα. Measured on the demo (79 train chains, 300 steps × batch 2): with AF2's losses alone the
  structure module never leaves the black-hole start (predicted Cα radius of gyration 1.3 Å after
  50 steps, val lDDT-Cα 0.013–0.035 throughout); 15 of the 79 training chains (1FFK, about a
  third of the cluster-weighted samples) have Cα atoms only, hence no frames, and FAPE and the
  torsion loss are 0 on them. With the term: val lDDT-Cα 0.26 after 50 steps, 0.298 at 300.
* **Optional consecutive-Cα distance loss** (``w_ca_bond``, default 0; the demo sets 1.0): mean
  |Δd| of Cα(i)–Cα(i+1) against the reference (Å / 10), the Cα analogue of AF2's peptide-bond
  violation term (supp. 1.9.11). With smooth lDDT alone the demo's predictions are a ball (Rg
  ~6.7 Å for every length, consecutive Cα 8–9 Å apart); with it consecutive Cα are 3.0–3.9 Å
  apart (still too compact: Rg 6.6–7.4 Å vs 11–17 Å) and val lDDT-Cα / GDT-TS / TM reach 0.324 / 0.163 / 0.174 in 450 steps.
* **Optional Cα pseudo-frame FAPE** (``w_ca_fape``, default 0, clamp ``ca_fape_clamp`` 10 Å): FAPE
  (Alg 28) of every Cα in frames built by Alg 21 from (Cα_{i−1}, Cα_i, Cα_{i+1}), for prediction
  and reference, averaged over the structure layers: global, chirality-aware, needs Cα only.
  Measured on the demo cache with single-sequence MSAs (val split, BENCHMARKS.md): it did not
  help (the term stayed at 0.90–0.92 of its clamp over 450 steps; with a 30 Å clamp the run stayed
  collapsed), so the demo leaves it off. ``ca_fape_window`` (residues, default 0 = all pairs) keeps only
  the Cα within that sequence distance of the frame: a local, chirality-aware term (smooth lDDT and the
  distogram cannot tell a right- from a left-handed helix). Measured on val (window 4, weight 1, 450
  steps): no gain, the local term fell only 0.504 → 0.488 while an ideal helix everywhere scores 0.318;
  with ``init_frames: helix`` the output stays the helix (BENCHMARKS.md "Training length and local
  handedness"). With longer training and weight 3 it does help on val (1,500 steps, 2 seeds: lDDT-Cα
  0.355 vs 0.322, GDT-TS 0.175 vs 0.155) without teaching the hand of a helix; the demo uses
  ``w_ca_fape: 3, ca_fape_window: 4`` at 1,000 steps.
* **Optional far-pair Cα term** (``w_ca_far``, default 0): mean relu(15 Å − d_pred) over Cα pairs
  ≥ 15 Å apart in the reference, the pairs smooth lDDT ignores; it leaves the collapsed start
  earlier but, at weight 1, lowered val lDDT-Cα (BENCHMARKS.md), so the demo leaves it off.
* **Optional all-pairs Cα distance term** (``w_ca_dist``, default 0; issue 14): mean |d_pred − d_true|
  (Å / 10) over every resolved Cα pair. Measured cause of the fixed-size ball (BENCHMARKS.md
  "Why a ball of fixed size"): clamped FAPE gives the final Cα ~20× less gradient than the smooth
  lDDT, and unclamped FAPE's descent points inwards (it pulls an orientation-uncertain model to the
  frame origins: ``w_fape``/``w_aux`` 5 give Rg 2.6–3.0 Å), so only the < 15 Å lDDT and the bond term
  shape the structure. This term's descent points outwards, but each of the 4 structure layers
  still moves every residue ~5 Å in an uncoordinated local direction, so the size stays set by the
  losses for a training crop, not by the chain length; it trades val lDDT-Cα for GDT-TS / TM, so the
  demo leaves it off.
* **Optional helix start** (``init_frames: helix``, default ``identity``; issue 14): the structure
  module's starting frames are an ideal, centred α-helix's backbone frames (a prior; AF2 Alg 20 line 2
  starts at the identity). Measured on val: the trained module stays on the helix (~0.7 Å per layer),
  so it scores as the helix baseline (BENCHMARKS.md "Helix start, crop lengths and a length signal").
* **Optional length signal** (``length_signal``, default off; issue 14): a learned linear of
  log(residues present / 64) added to the structure module's single input. With ``data.crop_size_min``
  (crops of several lengths) and ``w_ca_dist`` the ball grows, but its size still does not follow the
  chain length on val.
  ``n_struct_layers: 8`` (AF2's depth, supp. 1.8; the preset has 4) gave a 3-seed val mean lDDT-Cα
  +0.016, GDT-TS / TM within seed noise, and the ball stays (BENCHMARKS.md); the demo keeps 4.
* **Optional local angle term** (``w_ca_local``, default 0; issue 14): 1 − a smooth fraction of Cα
  virtual bond angles and dihedrals within 15/30/60/120° of the reference (``losses.ca_local_geometry_loss``),
  chirality-aware and mode-seeking. **Optional** ``detach_rotations: false`` (default true = Alg 20
  line 20): with the AF2 stop-gradient, Cα-only terms cannot train the rotation updates at all (each
  translation is applied in the previous layer's detached rotation). Measured on the demo (1,000 steps,
  BENCHMARKS.md "Local angles and the rotation stop-gradient"): neither, nor both, raises test GDT-TS /
  TM or teaches the hand of a helix, so the demo leaves both off.
* ``w_distogram`` 3.0 in the demo (AF2: 0.3): with the demo's single-sequence MSAs and 0.3 one
  seed in two stayed on the collapsed plateau for all 450 steps (val lDDT-Cα 0.11); with 3.0 three
  seeds out of three leave it (val 0.317 / 0.305 / 0.299), as msa_trunk's distogram weight (its module docstring).
* Initialisation: AF2's "final" zero init on residual outputs, gating init to 1, identity
  backbone update; other layers use PyTorch defaults (not AF2's LeCun-normal).

Sizes (parameters, measured with :func:`count_parameters`): ``openfold_initial`` 90,084,149
(+8,256 with the PAE head); ``cpu_small`` 293,469 (2 blocks, c_m 32, c_z 32, c_s 64, 4 structure
layers, 16 MSA rows, ≤ 1 recycle). Measured on the shared 2-core dev machine (load average ~10,
so wall times are 3–5× the process CPU times): one ``cpu_small`` AdamW step at crop 64 × batch 8,
one thread, no recycle: 1.8 s CPU (0.75 forward, 0.16 loss, 0.9 backward + step); a recycle adds
a no-grad forward (~0.4 s). Whole-chain inference at 400 residues (2 cycles): peak RSS 2.2 GB
unchunked, 0.69 GB with ``chunk_size=32`` — set ``model.chunk_size`` for long chains
(:meth:`EvoformerModel.estimate_inference_bytes` gives the estimate for a refusal message).
Overfit check (1crn, 46 residues, ``cpu_small``, ``max_recycles=0``, AdamW 1e-3, clip 1, batch 1,
one thread): step 400 lDDT-Cα 0.86 / all-atom lDDT 0.80; step 700 0.944 / 0.893 (518 s wall on
the loaded machine); step 800 0.941 / 0.911, mean pLDDT 0.96.
"""

from foldworks.models.openfold.model import PRESETS, EvoformerModel, count_parameters

__all__ = ["EvoformerModel", "PRESETS", "count_parameters"]
