"""Batched MMseqs2 searches (the ``msa`` stage with ``tool: mmseqs``).

One job per shard of query hashes: ``mmseqs createdb`` of the shard's queries → per database
``mmseqs search`` (its own iterations and E-value; ``sensitivity`` and ``max_seqs`` from
``msa.mmseqs``) + ``mmseqs result2msa --msa-format-mode 5`` (A3M) → per query the same merge,
hhfilter, depth cap and contract check as hhblits (:mod:`foldworks.msa.postprocess`), written
to ``<out-dir>/<hash>.a3m``. MMseqs2 has a fixed cost of a few seconds per call, so batching
queries is what makes it fast.

CLI::

    python -m foldworks.msa.mmseqs_search --queries data/sequences/a*/*.fasta \\
        --db-records data/msa_db/foldworks.json --out-dir data/msa_batches/mmseqs/a \\
        --threads 2 --params '<search slice JSON>' --timeout-s 900 --attempt 1 --max-attempts 3 \\
        --failure-dir data/failures/msa
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from foldworks import fsutil
from foldworks.logutil import setup_logging
from foldworks.msa import ffindex, tools
from foldworks.msa.config import MSA_DEFAULTS
from foldworks.msa.postprocess import apply_policy, finish_a3m, merge_alignments, run_hhfilter
from foldworks.msa.search import add_policy_arguments, databases_from_records, read_query, search_meta

LOG = logging.getLogger("foldworks.msa.mmseqs_search")


def _mmseqs(args: list[str], what: str, threads: int, timeout_s: float | None) -> None:
    tools.run_tool([tools.which("mmseqs"), *args, "-v", "1", "--threads", str(threads)], what,
                   timeout_s=timeout_s, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))


def search_database(query_db: Path, order: list[str], db: dict[str, Any], mmseqs_cfg: dict[str, Any],
                    work: Path, threads: int, timeout_s: float | None) -> dict[str, str]:
    """``{query hash: a3m text}`` of all queries against one MMseqs2 database.

    ``order[i]`` is the hash of query-database internal id ``i``.
    """
    name = db["name"]
    result, msa, tmp = work / f"{name}.res", work / f"{name}.msa", work / f"{name}.tmp"
    _mmseqs(["search", str(query_db), str(db["mmseqs_db"]), str(result), str(tmp),
             "-s", str(float(mmseqs_cfg["sensitivity"])), "-e", str(float(db["evalue"])),
             "--max-seqs", str(int(mmseqs_cfg["max_seqs"])), "--num-iterations", str(int(db["iterations"]))],
            f"mmseqs search of {len(order)} queries on {name}", threads, timeout_s)
    _mmseqs(["result2msa", str(query_db), str(db["mmseqs_db"]), str(result), str(msa), "--msa-format-mode", "5"],
            f"mmseqs result2msa of {len(order)} queries on {name}", threads, timeout_s)
    entries = ffindex.read_ffindex(msa, Path(f"{msa}.index"))
    out = {}
    for internal_id, payload in entries.items():
        index = int(internal_id)
        if not 0 <= index < len(order):
            raise tools.ToolError(f"mmseqs result2msa on {name}: unknown query id {internal_id}")
        out[order[index]] = payload.decode("utf-8", errors="replace")
    missing = sorted(set(order) - set(out))
    if missing:
        raise tools.ToolError(f"mmseqs result2msa on {name}: no alignment for {', '.join(missing[:5])}")
    return out


def run_batch(queries: dict[str, str], databases: list[dict[str, Any]], work: Path, threads: int,
              mmseqs_cfg: dict[str, Any], timeout_s: float | None) -> dict[str, list[tuple[str, str]]]:
    """``{hash: [(database, a3m text)]}`` for ``queries`` (``{hash: sequence}``)."""
    order = sorted(queries)
    fasta = work / "queries.fasta"
    fasta.write_text("".join(f">{h}\n{queries[h]}\n" for h in order), encoding="ascii")
    query_db = work / "queries"
    tools.run_tool([tools.which("mmseqs"), "createdb", str(fasta), str(query_db), "--dbtype", "1",
                    "--shuffle", "0", "-v", "1"], f"mmseqs createdb of {len(order)} queries", timeout_s=timeout_s)
    results: dict[str, list[tuple[str, str]]] = {h: [] for h in order}
    for db in databases:
        for seq_hash, text in search_database(query_db, order, db, mmseqs_cfg, work, threads, timeout_s).items():
            results[seq_hash].append((db["name"], text))
    return results


def search_shard(query_fastas: Sequence[str | os.PathLike[str]], databases: list[dict[str, Any]],
                 out_dir: str | os.PathLike[str], threads: int = 1, hhfilter: dict[str, Any] | None = None,
                 mmseqs_cfg: dict[str, Any] | None = None, timeout_s: float | None = None,
                 attempt: int = 1, max_attempts: int = 1,
                 failure_dir: str | os.PathLike[str] | None = None) -> dict[str, int]:
    """Search a batch of one-record query FASTAs; write ``<out_dir>/<hash>.a3m`` for each.

    ``databases``: ``[{name, mmseqs_db, iterations, evalue[, content_sha256]}]``. Failures
    follow :func:`foldworks.msa.postprocess.apply_policy` per query. Returns ``{hash: exit
    status}`` (1 = retry the batch).
    """
    hhfilter = {**MSA_DEFAULTS["hhfilter"], **(hhfilter or {})}
    mmseqs_cfg = {**MSA_DEFAULTS["mmseqs"], **(mmseqs_cfg or {})}
    queries = dict(read_query(path) for path in query_fastas)
    for db in databases:
        if not Path(f"{db['mmseqs_db']}.dbtype").is_file():
            raise FileNotFoundError(f"MMseqs2 database {db['mmseqs_db']} ({db['name']}) is missing")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    statuses: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="foldworks-mmseqs-") as tmp:
        work = Path(tmp)
        batch_error: Exception | None = None
        try:
            results = run_batch(queries, databases, work, threads, mmseqs_cfg, timeout_s)
        except tools.ToolError as exc:
            batch_error, results = exc, {}
        for seq_hash, sequence in sorted(queries.items()):
            out = out_dir / f"{seq_hash}.a3m"
            meta = search_meta(seq_hash, sequence, databases, "mmseqs")

            def finish(seq_hash: str = seq_hash, sequence: str = sequence, out: Path = out,
                       meta: dict[str, Any] = meta) -> None:
                if batch_error is not None:
                    raise batch_error
                caps = {db["name"]: int(db["max_hits"]) for db in databases if db.get("max_hits")}
                merged, hits = merge_alignments(seq_hash, sequence, results[seq_hash], caps)
                filtered = run_hhfilter(merged, work, hhfilter, seq_hash, timeout_s)
                meta = {**meta, "hits": hits, "raw_depth": 1 + sum(hits.values())}
                text = finish_a3m(filtered, seq_hash, sequence, int(hhfilter["max_depth"]), meta)
                fsutil.write_bytes_atomic(out, text.encode("utf-8"))

            failure = Path(failure_dir) / f"{seq_hash}.json" if failure_dir else None
            statuses[seq_hash] = apply_policy(seq_hash, sequence, out, meta, failure, attempt, max_attempts, finish)
    LOG.info("mmseqs batch: %d queries x %d database(s) in %.1f s", len(queries), len(databases),
             time.monotonic() - started)
    return statuses


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.mmseqs_search", description=__doc__.split("\n")[0])
    parser.add_argument("--queries", nargs="+", required=True, help="one-record query FASTA files")
    parser.add_argument("--db-records", nargs="+", required=True, help="database record JSON files")
    parser.add_argument("--out-dir", required=True, help="directory for <hash>.a3m")
    parser.add_argument("--threads", type=int, default=1, help="mmseqs --threads")
    parser.add_argument("--params", required=True, help="JSON search slice (foldworks.msa.config.search_slice)")
    parser.add_argument("--failure-dir", help="directory for <hash>.json failure records")
    add_policy_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging("msa")
    try:
        search = json.loads(args.params)
        databases = databases_from_records(search, args.db_records, key="mmseqs_db")
        statuses = search_shard(args.queries, databases, args.out_dir, args.threads, search["hhfilter"],
                                search.get("mmseqs"), args.timeout_s or None, args.attempt, args.max_attempts,
                                args.failure_dir)
    except (ValueError, OSError) as exc:
        LOG.error("msa batch %s: %s", args.out_dir, exc)
        return 1
    return max(statuses.values(), default=0)


if __name__ == "__main__":
    raise SystemExit(main())
