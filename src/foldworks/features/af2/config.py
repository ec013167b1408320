"""Settings of AlphaFold2's input processing (AF2 ``config.data``), with AF2's defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping


@dataclass(frozen=True)
class Af2DataConfig:
    """Sizes and probabilities of the AF2 input pipeline (supp. 1.2.5-1.2.9).

    ``max_msa_clusters`` MSA cluster centres (reduced by ``max_templates`` when
    ``reduce_msa_clusters_by_max_templates``, as AF2 does for its template models, so centres +
    template rows stay ``max_msa_clusters``); ``max_extra_msa`` extra rows; ``num_recycle``
    recycles (``num_recycle + 1`` feature sets); masked-MSA fractions as AF2's ``masked_msa``;
    block deletion (training only) removes ``block_delete_num_blocks`` blocks of
    ``block_delete_fraction`` of the rows; ``crop_size`` residues (``None`` = whole chain; training
    only) with a spatial crop with probability ``spatial_crop_prob``.
    """

    max_msa_clusters: int = 512
    max_extra_msa: int = 5120
    max_templates: int = 4
    use_templates: bool = True
    reduce_msa_clusters_by_max_templates: bool = True
    num_recycle: int = 3
    resample_msa_in_recycling: bool = True
    masked_msa_replace_fraction: float = 0.15
    uniform_prob: float = 0.1
    profile_prob: float = 0.1
    same_prob: float = 0.1
    block_delete_msa: bool = True
    block_delete_fraction: float = 0.3
    block_delete_num_blocks: int = 5
    crop_size: int | None = None
    spatial_crop_prob: float = 0.0

    def __post_init__(self) -> None:
        if self.num_clusters < 1:
            raise ValueError(f"max_msa_clusters ({self.max_msa_clusters}) leaves no MSA cluster after "
                             f"reserving {self.max_templates} template rows")
        if self.max_extra_msa < 1 or self.num_recycle < 0:
            raise ValueError("max_extra_msa must be >= 1 and num_recycle >= 0")
        if self.uniform_prob + self.profile_prob + self.same_prob > 1.0:
            raise ValueError("masked_msa uniform_prob + profile_prob + same_prob exceeds 1")

    @property
    def num_clusters(self) -> int:
        """MSA cluster rows of the processed batch."""
        reserve = self.max_templates if self.reduce_msa_clusters_by_max_templates else 0
        return self.max_msa_clusters - reserve

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "Af2DataConfig":
        """Defaults overridden by ``values`` (unknown keys raise ``ValueError`` naming them)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown AF2 data setting(s): {', '.join(unknown)}")
        return replace(cls(), **dict(values))

    @classmethod
    def from_af2_config(cls, config: Mapping[str, Any], mode: str = "eval") -> "Af2DataConfig":
        """Settings of an AF2 ``config`` dict: its ``data`` section (or ``full_config.data``) for
        ``mode`` ``"eval"`` / ``"train"``; a top-level ``crop`` sets ``crop_size``."""
        data = config.get("full_config", config)["data"]
        if mode not in data:
            raise ValueError(f"AF2 config has no data.{mode} section")
        common, stage = data["common"], data[mode]
        if not common.get("msa_cluster_features", True):
            raise ValueError("AF2 config data.common.msa_cluster_features = false is not supported")
        masked = common["masked_msa"]
        return cls(
            max_msa_clusters=int(stage["max_msa_clusters"]), max_extra_msa=int(common["max_extra_msa"]),
            max_templates=int(stage["max_templates"]), use_templates=bool(common["use_templates"]),
            reduce_msa_clusters_by_max_templates=bool(common["reduce_msa_clusters_by_max_templates"]),
            num_recycle=int(common["num_recycle"]),
            resample_msa_in_recycling=bool(common.get("resample_msa_in_recycling", True)),
            masked_msa_replace_fraction=float(stage["masked_msa_replace_fraction"]),
            uniform_prob=float(masked["uniform_prob"]), profile_prob=float(masked["profile_prob"]),
            same_prob=float(masked["same_prob"]), block_delete_msa=mode == "train",
            crop_size=None if config.get("crop") is None else int(config["crop"]))
