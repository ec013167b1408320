"""CLI of one shard job: ``python -m foldworks.shards <stage> --key K --items A,B,... --manifest M``.

Stages and their extra options (``workflow/rules/*.smk`` passes them)::

    fetch    --source S --params P --code C --attempt T [--records-dir data/raw]
    parse    --fetch-manifest data/raw/shards/K.tsv --params P --code C
    msa      --tool hhblits|mmseqs --db-records R... --params P --code C --timeout-s S --max-attempts N
             [--import-index data/msa_import/index.tsv --chain-table data/chains.parquet]
    features --parse-manifest data/parsed/shards/K.tsv --msa-manifests M... --params P --code C
             (items are ``<target>:<sequence hash>``)

Exit status 0 when the manifest was written, whatever happened to single items (their rows
say ``failed``/``transient``, with failure records under ``--failures-dir``); 2 for invalid
arguments; 1 only when the manifest itself cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from foldworks.logutil import setup_logging
from foldworks.shards import ALL_ENTRIES_KEY, entry_key, key_chars, stamp_of
from foldworks.shards.stages.features import features_planner
from foldworks.shards.stages.fetch import fetch_plan
from foldworks.shards.stages.msa import hhblits_planner, import_planner, mmseqs_planner, remove_work_dir
from foldworks.shards.stages.parse import parse_planner
from foldworks.shards.run import old_rows, run_items

STAGES = ("fetch", "parse", "msa", "features")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.shards", description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=STAGES)
    parser.add_argument("--key", required=True, help="shard key (entry: 2 characters; msa: hash prefix)")
    parser.add_argument("--items", required=True, help="comma-separated items of the shard")
    parser.add_argument("--manifest", required=True, help="output manifest data/<stage>/shards/<key>.tsv")
    parser.add_argument("--params", default="{}", help="the stage's JSON params (part of the stamp)")
    parser.add_argument("--code", default="", help="the stage's code hash (part of the stamp)")
    parser.add_argument("--failures-dir", default="data/failures")
    parser.add_argument("--source", help="fetch: https URL prefix or local mirror directory")
    parser.add_argument("--attempt", default="first", help="fetch: retry token (see fetch_attempt_token)")
    parser.add_argument("--records-dir", default="data/raw")
    parser.add_argument("--fetch-manifest", help="parse: the fetch manifest of the same shard")
    parser.add_argument("--parsed-dir", default="data/parsed")
    parser.add_argument("--tool", choices=("hhblits", "mmseqs"), default="hhblits")
    parser.add_argument("--db-records", nargs="+", default=[], help="msa: database record JSON files")
    parser.add_argument("--sequences-dir", default="data/sequences")
    parser.add_argument("--msa-dir", default="data/msa")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=900.0, help="msa: first attempt's limit (doubles)")
    parser.add_argument("--max-attempts", type=int, default=1)
    parser.add_argument("--work-dir", help="msa (mmseqs): scratch directory of the batch")
    parser.add_argument("--import-index", help="msa: index of precomputed alignments (msa.precomputed)")
    parser.add_argument("--chain-table", help="msa: chain table, to name chains without an alignment")
    parser.add_argument("--parse-manifest", help="features: the parse manifest of the same shard")
    parser.add_argument("--msa-manifests", nargs="*", default=[], help="features: msa manifests of its sequences")
    parser.add_argument("--features-dir", default="data/features")
    return parser


def _items(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    items = [item for item in args.items.split(",") if item]
    if args.stage == "msa" and any(not item.startswith(args.key) for item in items):
        parser.error(f"msa shard {args.key}: every sequence hash must start with the key")
    chars = key_chars(args.key)
    if args.stage in ("fetch", "parse") and (args.key == "" or chars > 2
                                             or any(entry_key(item, chars) != args.key for item in items)):
        parser.error(f"{args.stage} shard {args.key}: the key must be {ALL_ENTRIES_KEY!r} or 1-2 characters"
                     " that start every entry's middle two characters")
    return items


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(f"shards.{args.stage}")
    items = _items(args, parser)
    stamp = stamp_of(args.code, args.params, args.source or "", args.tool if args.stage == "msa" else "")
    attempt = ""
    if args.stage == "fetch":
        if not args.source:
            parser.error("fetch: --source is required")
        attempt = args.attempt
        plan_of = lambda entry: fetch_plan(entry, args.source, args.params, args.records_dir,  # noqa: E731
                                           args.failures_dir, args.attempt)
    elif args.stage == "parse":
        if not args.fetch_manifest:
            parser.error("parse: --fetch-manifest is required")
        plan_of = parse_planner(args.fetch_manifest, args.params, args.records_dir, args.parsed_dir,
                                args.failures_dir)
    elif args.stage == "features":
        if not args.parse_manifest:
            parser.error("features: --parse-manifest is required")
        pairs = dict(item.split(":", 1) for item in items)
        items = sorted(pairs)
        plan_of = features_planner(pairs, args.parse_manifest, args.msa_manifests, args.params,
                                   args.parsed_dir, args.msa_dir, args.features_dir, args.failures_dir)
    elif args.tool == "hhblits":
        plan_of = hhblits_planner(args.db_records, args.params, args.sequences_dir, args.msa_dir,
                                  args.failures_dir, args.threads, args.timeout_s, args.max_attempts)
        if args.import_index:
            search = plan_of if args.db_records else None
            plan_of = import_planner(args.import_index, args.params, args.sequences_dir, args.msa_dir,
                                     args.failures_dir, args.chain_table, search)
    else:
        work_dir = args.work_dir or f"data/msa_batches/mmseqs/{args.key}"
        old = old_rows(args.manifest)
        plan_of = mmseqs_planner(items, old, stamp, args.db_records, args.params, args.sequences_dir,
                                 args.msa_dir, args.failures_dir, work_dir, args.threads, args.timeout_s,
                                 args.max_attempts)
    run_items(args.stage, args.key, items, args.manifest, stamp, plan_of, attempt, args.failures_dir,
              retry_failed=args.stage == "msa")
    if args.stage == "msa" and args.tool == "mmseqs":
        remove_work_dir(args.work_dir or f"data/msa_batches/mmseqs/{args.key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
