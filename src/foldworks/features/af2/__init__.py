"""AlphaFold2's input processing (supp. 1.2.5-1.2.9): foldworks' cached chain features → AF2's
processed feature batch (``target_feat``, ``msa_feat``, extra MSA, masked-MSA targets, atom maps,
templates), with the random draws (:mod:`.draws`) separate from the deterministic transforms
(:mod:`.transforms`)."""

from foldworks.features.af2.config import Af2DataConfig
from foldworks.features.af2.draws import MsaDraw, draw_msa, recycle_rng, sample_rng
from foldworks.features.af2.pipeline import (
    Af2Chain, Af2InputError, chain_from_af2_raw, chain_from_feature_cache, crop_features, make_af2_example,
    process_recycle,
)

__all__ = ["Af2Chain", "Af2DataConfig", "Af2InputError", "MsaDraw", "chain_from_af2_raw", "chain_from_feature_cache",
           "crop_features", "draw_msa", "make_af2_example", "process_recycle", "recycle_rng", "sample_rng"]
