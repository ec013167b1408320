"""hhsearch of each query sequence against each template database segment; hits cached per query.

One job searches the query sequences of one sequence-hash shard (the msa shard's sequences)
against one template segment. Per query the input is its a3m (``data/msa/<xx>/<hash>.a3m``;
the bare sequence from ``data/sequences`` when no a3m exists) and the segment's content hash,
so a query is searched again only when its MSA, the segment's sequences, the hhsearch options
or this code changed. The hits of one query and segment go to::

    data/templates/hits/<segment>/<xx>/<hash>.tsv     (columns: HIT_COLUMNS)

and the job's manifest (``data/templates/hits/shards/<shard>_<segment>.tsv``) holds one row
per query in the layout of :mod:`foldworks.shards`. A failing search gives a ``failed`` row
and a failure record (``data/failures/templates/<hash>_<segment>.json``), never a failed job.

CLI::

    python -m foldworks.templates.search --key 3 --segment a --items 3f..,3a.. \\
        --manifest data/templates/hits/shards/3_a.tsv --db-record data/templates/db/a.json \\
        --params '{"hhsearch": {...}}' --code <hash>
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path
from typing import Any, Sequence

from foldworks import failures, fsutil
from foldworks.ids import msa_relpath
from foldworks.logutil import setup_logging
from foldworks.msa import tools
from foldworks.shards import file_sha256, sha256_bytes, stamp_of
from foldworks.shards.run import Outcome, Plan, run_items
from foldworks.templates.hhr import Hit, parse_hhr

LOG = logging.getLogger("foldworks.templates.search")
HIT_COLUMNS = ("template_hash", "prob", "evalue", "sum_probs", "aligned_cols", "query_start", "template_start",
               "query_aln", "template_aln")


def hits_path(hits_dir: str | Path, segment: str, seq_hash: str) -> Path:
    """Cached hits of query ``seq_hash`` against template segment ``segment``."""
    return Path(hits_dir) / segment / seq_hash[:2] / f"{seq_hash}.tsv"


def query_path(seq_hash: str, msa_dir: str | Path, sequences_dir: str | Path) -> Path:
    """The query's a3m if it exists, else its one-sequence FASTA; ``LookupError`` if neither does."""
    a3m = Path(msa_dir).parent / msa_relpath(seq_hash)
    if a3m.is_file():
        return a3m
    fasta = Path(sequences_dir) / seq_hash[:2] / f"{seq_hash}.fasta"
    if fasta.is_file():
        return fasta
    raise LookupError(f"templates {seq_hash}: neither {a3m} nor {fasta} exists")


def run_hhsearch(query: Path, db_prefix: str, options: dict[str, Any], timeout_s: float) -> list[Hit]:
    """hhsearch ``query`` (a3m or FASTA) against the HH-suite database ``db_prefix``; parsed hits."""
    with tempfile.TemporaryDirectory(prefix="hhsearch.") as tmp:
        out = Path(tmp) / "out.hhr"
        n_alignments = str(int(options["max_alignments"]))
        tools.run_tool(["hhsearch", "-i", str(query), "-d", db_prefix, "-o", str(out), "-cpu", "1", "-v", "1",
                        "-maxseq", str(int(options["maxseq"])), "-p", str(float(options["min_prob"])),
                        "-Z", n_alignments, "-B", n_alignments, "-z", "1", "-b", "1"],
                       f"hhsearch {query.stem} against {Path(db_prefix).name}", timeout_s=timeout_s)
        return parse_hhr(out.read_text(encoding="utf-8", errors="replace"))


def write_hits(path: Path, hits: Sequence[Hit]) -> None:
    rows = [(h.name, h.prob, h.evalue, h.sum_probs, h.aligned_cols, h.query_start, h.template_start,
             h.query_aln, h.template_aln) for h in hits]
    fsutil.write_tsv_atomic(path, HIT_COLUMNS, rows)


def read_hits(path: str | Path) -> list[Hit]:
    """The hits of one cached hits file, in file order."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not lines or tuple(lines[0].split("\t")) != HIT_COLUMNS:
        raise ValueError(f"{path}: not a template hits table (header {lines[:1]})")
    hits = []
    for line in lines[1:]:
        name, prob, evalue, sum_probs, cols, q0, t0, q_aln, t_aln = line.split("\t")
        hits.append(Hit(name, float(prob), float(evalue), float(sum_probs), int(cols), int(q0), int(t0), q_aln, t_aln))
    return hits


def planner(segment: str, record_path: str, options: dict[str, Any], msa_dir: str, sequences_dir: str,
            hits_dir: str, failures_dir: str, timeout_s: float):
    """Plan of one query's search against one segment (see :class:`foldworks.shards.run.Plan`)."""
    record = json.loads(Path(record_path).read_text(encoding="utf-8"))
    if record.get("segment") != segment:
        raise ValueError(f"{record_path}: record of segment {record.get('segment')!r}, not {segment!r}")

    def plan(seq_hash: str) -> Plan:
        query = query_path(seq_hash, msa_dir, sequences_dir)
        out = hits_path(hits_dir, segment, seq_hash)

        def compute() -> Outcome:
            key = f"{seq_hash}_{segment}"
            try:
                hits = run_hhsearch(query, record["prefix"], options, timeout_s) if record["n_sequences"] else []
            except (tools.ToolError, ValueError) as exc:
                reason = failures.one_line(f"templates {key}: {exc}")
                failures.record_failure("templates", key, reason, failures_dir)
                out.unlink(missing_ok=True)  # never leave hits of an older segment content behind
                return "failed", "none", reason
            write_hits(out, hits)
            failures.clear_failure("templates", key, failures_dir)
            return "ok", file_sha256(out), ""

        return Plan(sha256_bytes(file_sha256(query), record["content_sha256"]), [str(out)], compute)

    return plan


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.templates.search", description=__doc__.split("\n")[0])
    parser.add_argument("--key", required=True, help="query shard key (sequence-hash prefix)")
    parser.add_argument("--segment", required=True, help="template segment key")
    parser.add_argument("--items", required=True, help="comma-separated query sequence hashes")
    parser.add_argument("--manifest", required=True, help="output manifest")
    parser.add_argument("--db-record", required=True, help="the segment's record (data/templates/db/<seg>.json)")
    parser.add_argument("--params", required=True, help="JSON search slice (templates.config.search_slice)")
    parser.add_argument("--code", default="", help="code hash (part of each row's stamp)")
    parser.add_argument("--msa-dir", default="data/msa")
    parser.add_argument("--sequences-dir", default="data/sequences")
    parser.add_argument("--hits-dir", default="data/templates/hits")
    parser.add_argument("--failures-dir", default="data/failures")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per hhsearch call (s)")
    args = parser.parse_args(argv)
    setup_logging("templates.search")
    items = [item for item in args.items.split(",") if item]
    if any(not item.startswith(args.key) for item in items):
        parser.error(f"templates shard {args.key}: every sequence hash must start with the key")
    options = json.loads(args.params)["hhsearch"]
    plan_of = planner(args.segment, args.db_record, options, args.msa_dir, args.sequences_dir, args.hits_dir,
                      args.failures_dir, args.timeout_s)
    run_items("templates", f"{args.key}_{args.segment}", items, args.manifest, stamp_of(args.code, args.params),
              plan_of, failures_dir=args.failures_dir, retry_failed=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
