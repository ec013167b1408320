"""CLI of the inference stage (what ``workflow/rules/inference.smk`` runs)::

    python -m foldworks.inference query --sequence MKV... --out results/inference/sequences/<hash>.fasta
    python -m foldworks.inference predict --checkpoint best.ckpt --name NAME --sequence MKV... \\
        --a3m results/inference/msa/<hash>.a3m --out-dir results/inference \\
        --record results/inference/records/NAME.json --settings '{"max_memory_gb": 32}'
    python -m foldworks.inference check --fasta queries.fasta --name NAME
    python -m foldworks.inference rank --fasta queries.fasta --records results/inference/records/*.json \\
        --out results/inference/ranking.tsv

``predict`` exits 0 when the record was refused (memory guard) or failed: the record JSON
says so and the ranking lists it; it exits non-zero only for unusable arguments or checkpoint.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from foldworks import fsutil
from foldworks.ids import sequence_hash
from foldworks.inference.fasta import FastaError, check_sequence, read_query_fasta
from foldworks.logutil import setup_logging

LOG = logging.getLogger("foldworks.inference")


def _query(args: argparse.Namespace) -> int:
    sequence, error = check_sequence(args.sequence, f"query {args.out}")
    if error:
        LOG.error("%s", error)
        return 1
    fsutil.write_bytes_atomic(args.out, f">{sequence_hash(sequence)}\n{sequence}\n".encode("ascii"))
    return 0


def _predict(args: argparse.Namespace) -> int:
    import torch

    from foldworks.inference.run import DEFAULT_SETTINGS, predict_record
    from foldworks.models import model_task
    from foldworks.train.checkpoint import model_from_checkpoint

    torch.set_num_threads(max(1, args.threads))
    sequence, error = check_sequence(args.sequence, f"record {args.name!r}")
    settings = {**DEFAULT_SETTINGS, **json.loads(args.settings)}
    if error or set(settings) != set(DEFAULT_SETTINGS):
        LOG.error("%s", error or f"unknown settings: {sorted(set(settings) - set(DEFAULT_SETTINGS))}")
        return 2
    try:
        model, config = model_from_checkpoint(args.checkpoint)
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        LOG.error("%s: not a usable structure checkpoint: %s", args.checkpoint, exc)
        return 1
    if model_task(config["model"]) != "structure":
        LOG.error("%s: family %s predicts sequences, not structures", args.checkpoint, config["model"])
        return 1
    a3m = Path(args.a3m) if args.a3m else None
    a3m_text = a3m.read_text(encoding="utf-8", errors="replace") if a3m and a3m.exists() else None
    # an imported checkpoint has no data section; the evoformer family sizes its MSA input itself
    model_rows = int(config.get("data", {}).get("max_msa_rows", 1))
    record = predict_record(model, model_rows, args.name, sequence, a3m_text,
                            args.out_dir, settings)
    record["checkpoint"] = str(args.checkpoint)
    fsutil.write_json_atomic(args.record, record)
    return 0


def _check(args: argparse.Namespace) -> int:
    try:
        records = read_query_fasta(args.fasta)
    except (FastaError, OSError) as exc:
        LOG.error("%s", exc)
        return 1
    found = [record for record in records if record.name == args.name]
    if not found:
        LOG.error("%s: no record named %r", args.fasta, args.name)
        return 1
    if found[0].error:
        LOG.error("%s", found[0].error)
        return 1
    return 0


def _rank(args: argparse.Namespace) -> int:
    from foldworks.inference.run import RANKING_HEADER, ranking_rows

    try:
        records = read_query_fasta(args.fasta)
    except (FastaError, OSError) as exc:
        LOG.error("%s", exc)
        return 1
    predicted = {}
    for path in filter(None, args.records):
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        predicted[record["name"]] = record
    rows = ranking_rows(records, predicted)
    fsutil.write_tsv_atomic(args.out, RANKING_HEADER, rows)
    counts = {status: sum(row[6] == status for row in rows) for status in {row[6] for row in rows}}
    LOG.info("ranking of %d records -> %s (%s)", len(rows), args.out, counts)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.inference", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    query = sub.add_parser("query", help="write one sequence's query FASTA (>{hash})")
    query.add_argument("--sequence", required=True)
    query.add_argument("--out", required=True, type=Path)
    predict = sub.add_parser("predict", help="predict one FASTA record")
    predict.add_argument("--checkpoint", required=True, type=Path, help="trained or imported structure checkpoint")
    predict.add_argument("--name", required=True, help="the record's safe name")
    predict.add_argument("--sequence", required=True)
    predict.add_argument("--a3m", default="", help="the sequence's alignment (absent: single-sequence policy)")
    predict.add_argument("--out-dir", required=True, type=Path, help="where {name}.cif and {name}_pae.json go")
    predict.add_argument("--record", required=True, type=Path, help="record JSON (status, confidences)")
    predict.add_argument("--settings", default="{}", help="JSON: max_msa_rows, seed, "
                         "allow_single_sequence_fallback, max_memory_gb (GiB, 0: no limit)")
    predict.add_argument("--threads", type=int, default=1)
    check = sub.add_parser("check", help="exit 1 with the reason when the FASTA record is refused")
    check.add_argument("--fasta", required=True, type=Path)
    check.add_argument("--name", required=True, help="the record's safe name")
    rank = sub.add_parser("rank", help="write ranking.tsv of every FASTA record")
    rank.add_argument("--fasta", required=True, type=Path)
    rank.add_argument("--records", nargs="*", default=[], help="record JSON files")
    rank.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    setup_logging("inference")
    return {"query": _query, "predict": _predict, "check": _check, "rank": _rank}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
