"""Predict one FASTA record with a structure checkpoint, and rank all records.

Per record ``name`` (files in ``out_dir``):

- ``{name}.cif``: the whole sequence (no crop), all-atom where the family predicts atom37
  coordinates (Cα trace otherwise), pLDDT × 100 in every atom's B-factor
  (:mod:`foldworks.predict.writer`);
- ``{name}_pae.json``: predicted aligned error in the AlphaFold DB layout, where the family has
  an aligned-error head (then also pTM);
- the record JSON (:func:`predict_record`'s return value): status ``ok``, ``refused`` (the memory
  guard, :mod:`foldworks.predict.memory`) or ``failed`` (features or model error), with the
  one-line reason. A record that is not ``ok`` leaves no structure or PAE file behind.

``ranking.tsv`` (:func:`ranking_rows`): one line per FASTA record, predicted ones first by
ranking confidence (highest first), then the others in file order.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Sequence

from torch import nn

from foldworks.features.build import FeatureError
from foldworks.ids import sequence_hash
from foldworks.inference.confidence import predicted_tm_score, ranking_confidence
from foldworks.inference.fasta import QueryRecord
from foldworks.inference.features import query_features
from foldworks.predict.memory import ChainTooLarge, check_memory
from foldworks.predict.run import predict_chain, write_prediction

log = logging.getLogger(__name__)
RANKING_HEADER = ("name", "sequence_hash", "length", "mean_plddt", "ptm", "ranking_confidence", "status",
                  "reason")
#: Defaults of the per-record settings (:func:`predict_record` ``settings``).
DEFAULT_SETTINGS: dict[str, Any] = {"max_msa_rows": 256, "seed": 0, "allow_single_sequence_fallback": False,
                                    "max_memory_gb": 0.0}


def output_paths(out_dir: Path, name: str) -> tuple[Path, Path]:
    """``({name}.cif, {name}_pae.json)`` in ``out_dir``."""
    return out_dir / f"{name}.cif", out_dir / f"{name}_pae.json"


def _remove_outputs(out_dir: Path, name: str) -> None:
    for path in output_paths(out_dir, name):
        path.unlink(missing_ok=True)


def _predict(model: nn.Module, model_msa_rows: int, name: str, sequence: str, a3m_text: str | None,
             out_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """Features → model → files; the ``ok`` record fields (raises on any failure)."""
    feats = query_features(name, sequence, a3m_text, int(settings["max_msa_rows"]), int(settings["seed"]),
                           bool(settings["allow_single_sequence_fallback"]))
    outputs = predict_chain(model, feats, model_msa_rows)
    write_prediction(output_paths(out_dir, name)[0], sequence, name, outputs)
    mean_plddt = round(float(outputs["plddt"].mean() * 100.0), 3)
    ptm = None
    if "pae_logits" in outputs:
        ptm = round(predicted_tm_score(outputs["pae_logits"], outputs["pae_bin_centers"]), 4)
    return {"status": "ok", "mean_plddt": mean_plddt, "ptm": ptm,
            "ranking_confidence": round(ranking_confidence(mean_plddt, ptm), 3),
            "msa_source": str(feats["msa_source"]), "msa_rows": int(feats["msa"].shape[0])}


def predict_record(model: nn.Module, model_msa_rows: int, name: str, sequence: str, a3m_text: str | None,
                   out_dir: str | Path, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Predict record ``name`` (``sequence``, its a3m text or ``None``) into ``out_dir``.

    ``model_msa_rows``: MSA rows the model sees (the checkpoint's ``data.max_msa_rows``);
    ``settings``: :data:`DEFAULT_SETTINGS` keys (features ``max_msa_rows``/``seed``, fallback
    policy, ``max_memory_gb`` of the memory guard, 0 = no limit). Returns the record dict
    (``name, sequence_hash, length, status, reason, mean_plddt, ptm, ranking_confidence, ...``);
    failures are returned as a status, never raised.
    """
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    out_dir = Path(out_dir)
    record: dict[str, Any] = {"name": name, "sequence_hash": sequence_hash(sequence), "length": len(sequence),
                              "status": "ok", "reason": "", "mean_plddt": None, "ptm": None,
                              "ranking_confidence": None}
    try:
        check_memory(model, name, len(sequence), model_msa_rows, float(settings["max_memory_gb"]))
        record.update(_predict(model, model_msa_rows, name, sequence, a3m_text, out_dir, settings))
    except ChainTooLarge as exc:
        record.update(status="refused", reason=str(exc))
    except (FeatureError, ValueError, RuntimeError) as exc:
        message = str(exc) if str(exc).startswith(name) else f"{name}: {exc}"
        record.update(status="failed", reason=" ".join(message.split()))
    if record["status"] != "ok":
        _remove_outputs(out_dir, name)
        log.error("%s", record["reason"])
    else:
        log.info("%s: %d residues, mean pLDDT %.1f%s", name, len(sequence), record["mean_plddt"],
                 "" if record["ptm"] is None else f", pTM {record['ptm']:.3f}")
    return record


def _number(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def ranking_rows(records: Sequence[QueryRecord], predicted: dict[str, dict[str, Any]]) -> list[tuple]:
    """One ``ranking.tsv`` row (:data:`RANKING_HEADER`) per FASTA record.

    ``predicted``: record dicts of :func:`predict_record` by name; a valid record without one is
    listed as ``missing``, a refused FASTA record as ``invalid`` with its reason. Rows with a
    ranking confidence come first, highest first (ties by name); the rest keep file order.
    """
    rows = []
    for query in records:
        if not query.valid:
            rows.append((query.name, "", "", "", "", "", "invalid", query.error))
            continue
        rec = predicted.get(query.name)
        if rec is None:
            rows.append((query.name, query.sequence_hash, len(query.sequence), "", "", "", "missing",
                         f"{query.name}: no prediction record"))
            continue
        rows.append((query.name, rec["sequence_hash"], rec["length"], _number(rec.get("mean_plddt")),
                     _number(rec.get("ptm")), _number(rec.get("ranking_confidence")), rec["status"],
                     rec.get("reason", "")))
    ranked = sorted((r for r in rows if r[5] != ""), key=lambda r: (-float(r[5]), r[0]))
    return ranked + [r for r in rows if r[5] == ""]

