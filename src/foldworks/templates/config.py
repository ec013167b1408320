"""The ``templates:`` config section: defaults, validation and the slices each rule receives.

Layout (``config/config.yaml``)::

    templates:
      enabled: true
      segment_chars: 1              # template DB segments: sequence-hash prefixes of this length
      max_template_date: null       # null: per query chain, its own release date (training)
      max_hits: 20                  # templates featurised per query chain
      min_align_ratio: 0.1          # AF2: drop hits aligning <= this fraction of the query
      max_subsequence_ratio: 0.95   # AF2: drop exact sub-sequences covering > this fraction
      min_template_length: 10       # AF2: drop hits with fewer aligned template residues
      hhsearch: {maxseq: 1000000, min_prob: 20, max_alignments: 500}
      timeout_s: 600
      pdb_seqres: null              # an existing pdb_seqres.txt instead of the parsed chains ...
      mmcif_dir: null               # ... with its mmCIF directory (both or neither)

The search jobs receive :func:`search_slice` only, so changing a filter or the date cutoff
reruns the selection and features, never a search.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

DEFAULTS: dict[str, Any] = {
    "enabled": False,
    "segment_chars": 1,
    "max_template_date": None,
    "max_hits": 20,
    "min_align_ratio": 0.1,
    "max_subsequence_ratio": 0.95,
    "min_template_length": 10,
    "hhsearch": {"maxseq": 1_000_000, "min_prob": 20, "max_alignments": 500},
    "timeout_s": 600,
    "pdb_seqres": None,
    "mmcif_dir": None,
}
#: The one-segment key (``segment_chars: 0``).
ALL_SEGMENTS_KEY = "all"


def resolve_templates_config(section: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults merged with ``section``; raises ``ValueError`` naming the bad key."""
    cfg = copy.deepcopy(DEFAULTS)
    for key, value in (section or {}).items():
        if key not in cfg:
            raise ValueError(f"templates.{key}: unknown key (known: {', '.join(sorted(cfg))})")
        cfg[key] = {**cfg[key], **value} if isinstance(cfg[key], dict) else value
    if cfg["segment_chars"] not in (0, 1, 2, 3):
        raise ValueError(f"templates.segment_chars: expected 0-3, got {cfg['segment_chars']!r}")
    if int(cfg["max_hits"]) < 1:
        raise ValueError(f"templates.max_hits: expected >= 1, got {cfg['max_hits']!r}")
    if (cfg["pdb_seqres"] is None) != (cfg["mmcif_dir"] is None):
        raise ValueError("templates.pdb_seqres and templates.mmcif_dir: set both (an existing database) or neither")
    if cfg["max_template_date"] is not None:
        cfg["max_template_date"] = parse_date(cfg["max_template_date"], "templates.max_template_date")
    return cfg


def parse_date(value: Any, what: str) -> str:
    """An ISO date (``YYYY-MM-DD``) as text; raises ``ValueError`` naming ``what``."""
    try:
        return (value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))).isoformat()
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not a date (YYYY-MM-DD)") from None


def segment_keys(chars: int) -> list[str]:
    """Every segment key: all hex prefixes of ``chars`` characters, or ``["all"]`` for 0."""
    if chars == 0:
        return [ALL_SEGMENTS_KEY]
    return [format(i, f"0{chars}x") for i in range(16 ** chars)]


def segment_of(seq_hash: str, chars: int) -> str:
    """The segment key of a template sequence hash."""
    return ALL_SEGMENTS_KEY if chars == 0 else seq_hash[:chars]


def search_slice(cfg: dict[str, Any]) -> dict[str, Any]:
    """What changes a search result: the hhsearch options (not filters, dates or timeouts)."""
    return {"hhsearch": cfg["hhsearch"]}


def select_slice(cfg: dict[str, Any]) -> dict[str, Any]:
    """What changes the selection: the cutoff date, the hit filters and ``max_hits``."""
    keys = ("max_template_date", "max_hits", "min_align_ratio", "max_subsequence_ratio", "min_template_length")
    return {key: cfg[key] for key in keys}
