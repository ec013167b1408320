"""Structure-comparison metrics on NumPy arrays (no torch): RMSD, lDDT, GDT, TM-score.

Coordinates are in Å. ``pred`` is the model, ``ref`` the experimental reference; residues are
paired by index (position ``i`` of ``pred`` is residue ``i`` of ``ref``).

Definitions
-----------
*Superposition* (:func:`kabsch_superpose`): the rotation ``R`` and translation ``t`` minimising
``sum_i w_i |R x_i + t - y_i|^2`` (Kabsch 1976, proper rotation, ``det R = +1``).

*RMSD* (:func:`rmsd`): ``sqrt(mean_i |R x_i + t - y_i|^2)`` after that optimal superposition of
all paired atoms; on Cα it is TMscore's "RMSD of the common residues". :func:`rmsd_heavy` does the
same over every heavy atom present in both structures (atom37, paired by atom name as given).

*lDDT* (:func:`lddt`, implemented in :mod:`foldworks.evaluate.lddt`), exactly as OpenStructure
2.3.1 ``compare-structures --lddt`` computes it (Mariani et al. 2013): every pair of *resolved
reference* atoms that lie in *different residues* and are closer than the inclusion radius
(``d_ref < 15`` Å) is scored; a pair is conserved at threshold ``t`` when
``|d_pred - d_ref| < t``, for ``t`` in 0.5, 1, 2, 4 Å. Global lDDT = conserved pair-thresholds
pooled over all pairs / (4 x number of pairs) (not a mean of per-residue scores). A pair with a
missing model atom counts as not conserved. Per-residue lDDT of residue ``r`` is the same ratio
over the pairs with one atom in ``r`` (NaN when ``r`` has none). :func:`lddt_ca` is the case of
one atom (Cα) per residue (``compare-structures -ca``). :func:`lddt_all_atom` scores every heavy
atom (atom37; hydrogens are not part of the layout) after resolving symmetric side-chain names
like OpenStructure's ``check_and_swap``: for each ASP (OD1/OD2), GLU (OE1/OE2), PHE and TYR
(CD1/CD2 with CE1/CE2), ARG (NH1/NH2) and, in 2.3.1, also LEU (CD1/CD2) and VAL (CG1/CG2)
residue, the thresholds conserved between its ambiguous atoms and all *unambiguous* atoms of
other residues within 15 Å are counted with the model's names as given and swapped; the model's
names are swapped where that count is strictly higher. OXT is an ordinary atom: a reference
OXT that the model lacks counts as not conserved (OpenStructure removes only hydrogens by
default). Measured against compare-structures on real pairs: |Δ| < 1e-4 (it computes in single
precision; residues it does not know, e.g. UNK, it drops, while these functions score whatever
the masks select).

*TM-score* (:func:`tm_score`, Zhang & Skolnick 2004):
``max over superpositions of (1/L) sum_i 1 / (1 + (d_i / d0)^2)`` with
``d0 = 1.24 (L - 15)^(1/3) - 1.8`` (``d0 = 0.5`` if ``L <= 15``; at least 0.5), ``L`` = the
normalisation length (the reference length; unpaired reference residues contribute 0).

*GDT* (:func:`gdt`): for each cutoff ``c``, the largest fraction of the ``L`` reference residues
with ``d_i <= c`` over the superpositions searched; the GDT score is the mean over cutoffs.
GDT-TS uses 1, 2, 4, 8 Å and GDT-HA 0.5, 1, 2, 4 Å.

*Superposition search* (TMscore 2019/08/22, reproduced step by step so that values agree with
``TMscore model ref``): seed fragments of ``n, n/2, n/4, ...`` consecutive paired residues
(integer halving, down to 4; at most 6 lengths) at every start position; each seed is superposed,
then refined up to 20 times by superposing the residues within ``d0_search + 1`` Å
(``d0_search = clip(d0, 4.5, 8)``; the first selection uses ``d0_search - 1``, and a cutoff is
widened by 0.5 Å until at least 3 residues qualify). TM-score and each GDT count are maximised
independently over every superposition visited. Selections already refined from an earlier or
equal iteration are skipped, which changes no maximum (this also ends a refinement whose selection
no longer changes, TMscore's own stop). The vectorised search is in
:mod:`foldworks.evaluate.superpose`; it gives the same values as an SVD per superposition
to ~1e-13. On real pairs (NMR models of 1L2Y, 2KC9,
3PDZ, 2CRB; noise-perturbed 1UBQ, 1AKI, 2SRC, 5PTI) RMSD, TM-score, GDT-TS and GDT-HA agree with
TMscore to its printed precision (|Δ| < 5e-4 Å RMSD, < 5e-5 for the scores); TMscore computes
distances in single precision, so a distance within ~1e-6 Å of a GDT cutoff could still differ.

*Full metric set* (:class:`ReferenceScorer`, :func:`metric_set`, :func:`score_models`): all of
the above for atom37 models, with the reference side (lDDT pair lists, symmetric-atom tables)
built once per reference and shared by every model scored against it. Timings:
``bench/bench_metrics.py`` (``bench/metrics.md``).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from foldworks.constants import ATOM_TYPE_NUM, CA_INDEX
from foldworks.evaluate.lddt import (  # noqa: F401  (re-exported: one import for all metrics)
    LDDT_INCLUSION_RADIUS, LDDT_THRESHOLDS, SYMMETRIC_ATOMS, LddtReference, cached_reference, lddt,
    lddt_all_atom, lddt_ca,
)
from foldworks.evaluate.superpose import SEARCH_CUTOFFS, rotation_from_covariance, search_all

GDT_TS_CUTOFFS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
GDT_HA_CUTOFFS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
_SEARCH_CUTOFFS: tuple[float, ...] = SEARCH_CUTOFFS


def kabsch_superpose(
    mobile: np.ndarray, target: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Optimal rigid superposition of ``mobile`` onto ``target``.

    ``mobile``, ``target``: ``[..., N, 3]`` (Å, broadcastable); ``weights``: ``[..., N]`` (>= 0,
    default 1). Returns ``(rotation [..., 3, 3], translation [..., 3])`` such that
    ``mobile @ rotation.T + translation`` best fits ``target``. Where all weights are 0 the
    identity and a zero translation are returned (as TMscore's ``u3b`` does).
    """
    mobile = np.asarray(mobile, np.float64)
    target = np.asarray(target, np.float64)
    if weights is None:
        weights = np.ones(np.broadcast_shapes(mobile.shape, target.shape)[:-1])
    weights = np.asarray(weights, np.float64)
    total = weights.sum(-1)
    safe = np.where(total > 0, total, 1.0)[..., None]
    row = weights[..., None, :]  # [..., 1, N]: weighted sums as matrix products
    mobile_centre = (row @ mobile)[..., 0, :] / safe
    target_centre = (row @ target)[..., 0, :] / safe
    covariance = np.swapaxes(mobile * weights[..., None], -1, -2) @ target
    covariance -= total[..., None, None] * mobile_centre[..., :, None] * target_centre[..., None, :]
    return rotation_from_covariance(covariance, mobile_centre, target_centre, total)


def apply_transform(coords: np.ndarray, rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
    """``coords [..., N, 3] @ rotation.T + translation`` (Å)."""
    return coords @ np.swapaxes(rotation, -1, -2) + translation[..., None, :]


def rmsd(pred: np.ndarray, ref: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray | float:
    """Root-mean-square deviation (Å) of ``pred [..., N, 3]`` from ``ref [..., N, 3]`` after the
    optimal superposition of the atoms selected by ``mask [..., N]`` (default: all)."""
    pred = np.asarray(pred, np.float64)
    ref = np.asarray(ref, np.float64)
    weights = np.ones(pred.shape[:-1]) if mask is None else np.asarray(mask, np.float64)
    rotation, translation = kabsch_superpose(pred, ref, weights)
    squared = np.sum((apply_transform(pred, rotation, translation) - ref) ** 2, axis=-1)
    value = np.sqrt(np.sum(squared * weights, -1) / np.maximum(weights.sum(-1), 1e-12))
    return float(value) if np.ndim(value) == 0 else value


def rmsd_heavy(pred: np.ndarray, ref: np.ndarray, ref_mask: np.ndarray,
               pred_mask: np.ndarray | None = None) -> np.ndarray | float:
    """All-heavy-atom RMSD (Å) of atom37 models ``pred [..., L, 37, 3]`` against ``ref [L, 37, 3]``
    after the optimal superposition of the atoms present in both (``ref_mask [L, 37]``,
    ``pred_mask [..., L, 37]``); atoms are paired by name as given (no symmetry swaps). 0 where
    no atom is shared. Only the shared atoms are gathered, model by model."""
    pred = np.asarray(pred, np.float64)
    n_res, n_atom = np.shape(ref)[:2]
    batch_shape = pred.shape[:-3]
    both = np.asarray(ref_mask, bool) & (True if pred_mask is None else np.asarray(pred_mask, bool))
    both = np.broadcast_to(both, pred.shape[:-1]).reshape(-1, n_res * n_atom)
    flat_ref = np.asarray(ref, np.float64).reshape(n_res * n_atom, 3)
    flat_pred = pred.reshape(-1, n_res * n_atom, 3)
    values = np.zeros(len(flat_pred))
    for index, (model, shared) in enumerate(zip(flat_pred, both)):
        atoms = np.flatnonzero(shared)
        if len(atoms):
            values[index] = _centred_rmsd(np.nan_to_num(model.take(atoms, 0)),
                                          np.nan_to_num(flat_ref.take(atoms, 0)))
    values = values.reshape(batch_shape)
    return float(values) if values.ndim == 0 else values


def _centred_rmsd(pred: np.ndarray, ref: np.ndarray) -> float:
    """:func:`rmsd` of one pair of ``[N, 3]`` arrays (N > 0), without the batch machinery."""
    pred, ref = pred - pred.mean(0), ref - ref.mean(0)
    zeros = np.zeros((1, 3))
    rotation = rotation_from_covariance((pred.T @ ref)[None], zeros, zeros, np.ones(1))[0][0]
    delta = pred @ rotation.T - ref
    return float(np.sqrt(np.einsum("ij,ij->", delta, delta) / len(pred)))


# -------------------------------------------------------------------- TM-score / GDT search

class SuperpositionScores(NamedTuple):
    """Result of the TMscore-style search for one model/reference pair."""

    rmsd: float          #: Å, optimal superposition of all paired residues
    tm_score: float      #: normalised by ``length``
    gdt_counts: dict[float, int]  #: cutoff (Å) -> max number of residues with d <= cutoff
    length: int          #: normalisation length (reference residues)
    d0: float            #: TM-score distance scale (Å)

    def gdt(self, cutoffs: Sequence[float]) -> float:
        """Mean over ``cutoffs`` of the best fraction of reference residues within each."""
        return float(np.mean([self.gdt_counts[float(c)] for c in cutoffs]) / self.length)


def tm_d0(length: int) -> float:
    """TM-score distance scale d0 (Å) for a reference of ``length`` residues (>= 0.5)."""
    d0 = 1.24 * (length - 15) ** (1.0 / 3.0) - 1.8 if length > 15 else 0.5
    return max(d0, 0.5)


def superposition_scores(
    pred: np.ndarray, ref: np.ndarray, length: int | None = None
) -> SuperpositionScores:
    """TMscore-style search (module docstring) for paired Cα traces ``pred``, ``ref`` ``[n, 3]``.

    ``length`` is the normalisation length ``L`` (default ``n``); pass the number of reference
    residues when some of them have no model counterpart.
    """
    pred = np.asarray(pred, np.float64)
    ref = np.asarray(ref, np.float64)
    n = pred.shape[0]
    if pred.shape != ref.shape or pred.ndim != 2 or pred.shape[1] != 3 or n == 0:
        raise ValueError(f"expected two non-empty [n, 3] arrays, got {pred.shape} and {ref.shape}")
    if not (np.all(np.isfinite(pred)) and np.all(np.isfinite(ref))):
        raise ValueError("coordinates must be finite (pass only paired, present residues)")
    pred, ref = pred - pred.mean(0), ref - ref.mean(0)  # distances are translation invariant
    length = n if length is None else int(length)
    d0 = tm_d0(length)
    d0_search = min(max(d0, 4.5), 8.0)
    state = search_all(pred, ref, d0, d0_search)
    return SuperpositionScores(
        rmsd=float(rmsd(pred, ref)),
        tm_score=state.tm / length,
        gdt_counts=dict(state.counts),
        length=length,
        d0=d0,
    )


def tm_score(pred: np.ndarray, ref: np.ndarray, length: int | None = None) -> float:
    """TM-score of paired Cα traces ``[n, 3]`` normalised by ``length`` (default ``n``)."""
    return superposition_scores(pred, ref, length).tm_score


def gdt(pred: np.ndarray, ref: np.ndarray, cutoffs: Sequence[float] = GDT_TS_CUTOFFS,
        length: int | None = None) -> float:
    """GDT (fraction in [0, 1]) of paired Cα traces for ``cutoffs`` (Å; each one of 0.5, 1, 2,
    4, 8), normalised by ``length`` (default ``n``). Default cutoffs give GDT-TS."""
    unknown = [c for c in cutoffs if float(c) not in _SEARCH_CUTOFFS]
    if unknown:
        raise ValueError(f"GDT cutoffs must be among {_SEARCH_CUTOFFS} Å, got {unknown}")
    return superposition_scores(pred, ref, length).gdt(cutoffs)


def gdt_ts(pred: np.ndarray, ref: np.ndarray, length: int | None = None) -> float:
    """GDT-TS: mean best fraction within 1, 2, 4, 8 Å."""
    return gdt(pred, ref, GDT_TS_CUTOFFS, length)


def gdt_ha(pred: np.ndarray, ref: np.ndarray, length: int | None = None) -> float:
    """GDT-HA: mean best fraction within 0.5, 1, 2, 4 Å."""
    return gdt(pred, ref, GDT_HA_CUTOFFS, length)


# ------------------------------------------------------------ full metric set, many models

class MetricSet(NamedTuple):
    """Every metric of one atom37 model against its reference (:class:`ReferenceScorer`)."""

    rmsd_ca: float        #: Å over the paired resolved Cα (NaN when none is paired)
    tm_score: float       #: normalised by the resolved reference residues
    gdt_ts: float
    gdt_ha: float
    lddt_ca: float
    lddt_all_atom: float  #: heavy atoms, symmetric side-chain names resolved
    rmsd_heavy: float     #: Å over the heavy atoms present in both, names as given
    lddt_ca_residues: np.ndarray  #: ``[L]`` per-residue lDDT-Cα (NaN where a residue has no pair)


class ReferenceScorer:
    """The full metric set (:class:`MetricSet`) of any number of atom37 models against one
    reference, whose lDDT pair lists and symmetric-atom tables are built once (and cached, so a
    second scorer of the same reference is free).

    ``ref [L, 37, 3]`` (Å), ``ref_mask [L, 37]`` (resolved atoms), ``aatype [L]``. Residues are
    paired by index. The Cα metrics use the resolved reference Cα (``ref_mask[:, CA]``) and are
    normalised by their number; a model atom is absent where its mask is false or a coordinate
    is not finite.
    """

    def __init__(self, ref: np.ndarray, ref_mask: np.ndarray, aatype: np.ndarray,
                 inclusion_radius: float = LDDT_INCLUSION_RADIUS) -> None:
        self.ref = np.asarray(ref, np.float64)
        self.ref_mask = np.asarray(ref_mask, bool)
        if self.ref.shape[1:] != (ATOM_TYPE_NUM, 3) or self.ref_mask.shape != self.ref.shape[:2]:
            raise ValueError(f"expected atom37 reference [L, {ATOM_TYPE_NUM}, 3] with mask [L, "
                             f"{ATOM_TYPE_NUM}], got {self.ref.shape} and {self.ref_mask.shape}")
        self.resolved = self.ref_mask[:, CA_INDEX]
        self.n_resolved = int(self.resolved.sum())
        if self.n_resolved == 0:
            raise ValueError("the reference has no resolved CA atom")
        self.ca = self.ref[:, CA_INDEX]
        self.ca_lddt = cached_reference(self.ca[:, None], self.resolved[:, None], None, inclusion_radius)
        self.all_atom_lddt = cached_reference(self.ref, self.ref_mask, aatype, inclusion_radius)

    def score(self, pred: np.ndarray, pred_mask: np.ndarray | None = None) -> MetricSet:
        """Metrics of one model ``pred [L, 37, 3]`` (Å), present atoms ``pred_mask [L, 37]``."""
        pred = np.asarray(pred, np.float64)
        if pred.shape != self.ref.shape:
            raise ValueError(f"model {pred.shape} does not match the reference {self.ref.shape}")
        finite = np.isfinite(pred).all(-1)
        present = finite if pred_mask is None else finite & np.asarray(pred_mask, bool)
        if not finite.all():
            pred = np.where(finite[..., None], pred, 0.0)
        pred_ca, ca_present = pred[:, CA_INDEX], present[:, CA_INDEX]
        paired = self.resolved & ca_present
        rmsd_ca, tm, ts, ha = np.nan, 0.0, 0.0, 0.0
        if paired.any():
            found = superposition_scores(pred_ca[paired], self.ca[paired], length=self.n_resolved)
            rmsd_ca, tm = found.rmsd, found.tm_score
            ts, ha = found.gdt(GDT_TS_CUTOFFS), found.gdt(GDT_HA_CUTOFFS)
        lddt_ca, lddt_ca_residues = self.ca_lddt.score_both(pred_ca[:, None], ca_present[:, None])
        return MetricSet(
            rmsd_ca=float(rmsd_ca), tm_score=float(tm), gdt_ts=ts, gdt_ha=ha, lddt_ca=lddt_ca,
            lddt_all_atom=self.all_atom_lddt.score(pred, present),
            rmsd_heavy=rmsd_heavy(pred, self.ref, self.ref_mask, present),
            lddt_ca_residues=lddt_ca_residues,
        )

    def score_batch(self, preds: np.ndarray, pred_masks: np.ndarray | None = None) -> list[MetricSet]:
        """Metrics of models ``preds [B, L, 37, 3]`` (present atoms ``pred_masks [B, L, 37]``)."""
        preds = np.asarray(preds, np.float64)
        masks = [None] * len(preds) if pred_masks is None else np.asarray(pred_masks, bool)
        return [self.score(pred, mask) for pred, mask in zip(preds, masks)]


def metric_set(pred: np.ndarray, ref: np.ndarray, ref_mask: np.ndarray, aatype: np.ndarray,
               pred_mask: np.ndarray | None = None) -> MetricSet:
    """Full metric set of one atom37 model against its reference (:class:`ReferenceScorer`)."""
    return ReferenceScorer(ref, ref_mask, aatype).score(pred, pred_mask)


def score_models(preds: np.ndarray, ref: np.ndarray, ref_mask: np.ndarray, aatype: np.ndarray,
                 pred_masks: np.ndarray | None = None) -> list[MetricSet]:
    """Full metric sets of a batch of models ``[B, L, 37, 3]`` against one reference."""
    return ReferenceScorer(ref, ref_mask, aatype).score_batch(preds, pred_masks)
