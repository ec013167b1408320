"""One hhblits search per unique sequence and database (the ``msa`` stage, ``tool: hhblits``).

Per query: ``hhblits -all`` against each database in config order (its own iterations,
E-value and ``maxseq``) → merge → ``hhfilter`` → depth cap → metadata line → contract check
→ atomic rename onto ``--out`` (see :mod:`foldworks.msa.postprocess`). Tools run with explicit
argument lists (no shell) in a private temp directory that is always removed.

A database is any HH-suite prefix with ``<prefix>_a3m.ff{data,index}`` and
``<prefix>_cs219.ff{data,index}`` (ours from ``foldworks.msa.build_db``, or UniRef30, BFD...).

CLI (the rule passes the :func:`foldworks.msa.config.search_slice` as ``--params`` and the
database records, which hold the prefixes, as ``--db-records``)::

    python -m foldworks.msa.search --query data/sequences/ab/<hash>.fasta \\
        --db-records data/msa_db/foldworks.json --out data/msa/ab/<hash>.a3m --threads 1 \\
        --params '{"tool": "hhblits", "databases": [{"name": "foldworks", "content_sha256": "...",
                   "iterations": 2, "evalue": 0.001, "maxseq": 100000}],
                   "hhfilter": {"id": 90, "cov": 0, "diff": 0, "max_depth": 512}}' \\
        --timeout-s 900 --attempt 1 --max-attempts 3 --failure-record data/failures/msa/<hash>.json
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
from foldworks.ids import SEQUENCE_HASH_PATTERN, sequence_hash
from foldworks.logutil import setup_logging
from foldworks.msa import tools
from foldworks.msa.a3m import a3m_records
from foldworks.msa.config import HHFILTER_FLAGS, MSA_DEFAULTS, MsaConfigError
from foldworks.msa.fasta import read_fasta
from foldworks.msa.postprocess import apply_policy, finish_a3m, merge_alignments, run_hhfilter

LOG = logging.getLogger("foldworks.msa.search")
#: Flat parameters of :func:`run_hhblits` (one database).
DEFAULT_PARAMS: dict[str, Any] = {
    "iterations": 2, "evalue": 0.001, "maxseq": 1_000_000, "max_hits": 10_000, "timeout_s": 600,
    "hhfilter": dict(MSA_DEFAULTS["hhfilter"]),
}


def resolve_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Merge flat ``params`` over :data:`DEFAULT_PARAMS`; unknown keys raise ``ValueError``."""
    params = dict(params or {})
    filt = dict(params.pop("hhfilter", None) or {})
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    unknown += sorted(f"hhfilter.{k}" for k in set(filt) - {*HHFILTER_FLAGS, "max_depth"})
    if unknown:
        raise ValueError(f"unknown msa params: {', '.join(unknown)}")
    resolved = {**DEFAULT_PARAMS, **params}
    resolved["hhfilter"] = {**DEFAULT_PARAMS["hhfilter"], **filt}
    if int(resolved["hhfilter"]["max_depth"]) < 1:
        raise ValueError("msa params: hhfilter.max_depth must be >= 1")
    return resolved


def read_query(query_fasta: str | os.PathLike[str]) -> tuple[str, str]:
    """``(sequence hash, sequence)`` of a one-record query FASTA.

    If the header's first word looks like a sequence hash it must equal the sequence's hash.
    """
    records = list(read_fasta(query_fasta))
    if len(records) != 1:
        raise ValueError(f"{query_fasta}: expected exactly one FASTA record, found {len(records)}")
    header, sequence = records[0]
    seq_hash = sequence_hash(sequence)
    name = header.split()[0] if header.split() else ""
    if SEQUENCE_HASH_PATTERN.fullmatch(name) and name != seq_hash:
        raise ValueError(f"{query_fasta}: header {name} is not the hash of its sequence ({seq_hash})")
    return seq_hash, sequence


def check_database(db_prefix: str | os.PathLike[str]) -> None:
    """Raise ``FileNotFoundError`` naming the first missing ``_a3m``/``_cs219`` file."""
    for part in ("_a3m.ffdata", "_a3m.ffindex", "_cs219.ffdata", "_cs219.ffindex"):
        if not Path(f"{db_prefix}{part}").is_file():
            raise FileNotFoundError(f"HH-suite database {db_prefix}: {db_prefix}{part} is missing")


def hhblits_args(query: Path, db: dict[str, Any], out: Path, threads: int) -> list[str]:
    """Argument list of one hhblits call (unfiltered result MSA ``-all``, no ``.hhr``).

    ``db``: ``prefix``, ``iterations``, ``evalue``, ``maxseq`` (rows read per alignment),
    ``max_hits`` (hits listed and realigned: ``-Z``, ``-B``, ``-realign_max``; the second
    prefilter lets ``max(20000, max_hits)`` through; ``-all`` still returns every hit's
    sequences, so :func:`search_query` keeps the first ``max_hits`` rows itself).
    """
    hits = int(db.get("max_hits", 10_000))
    return [tools.which("hhblits"), "-i", str(query), "-d", str(db["prefix"]), "-oa3m", str(out),
            "-o", os.devnull, "-n", str(int(db["iterations"])), "-e", str(float(db["evalue"])),
            "-cpu", str(threads), "-all", "-maxseq", str(int(db["maxseq"])),
            "-Z", str(hits), "-B", str(hits), "-realign_max", str(hits), "-maxfilt", str(max(20000, hits)),
            "-v", "1"]


def search_meta(seq_hash: str, sequence: str, databases: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    """The metadata line's fixed part (tool, query, database content hashes)."""
    return {"tool": tool, "sequence_hash": seq_hash, "length": len(sequence),
            "databases": {db["name"]: str(db.get("content_sha256", ""))[:16] for db in databases}}


def search_query(query_fasta: str | os.PathLike[str], databases: list[dict[str, Any]],
                 out_a3m: str | os.PathLike[str], threads: int = 1,
                 hhfilter: dict[str, Any] | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """Search one query against every database and write the contract a3m to ``out_a3m``.

    ``databases``: ``[{name, prefix, iterations, evalue, maxseq[, max_hits, content_sha256]}]``,
    searched in order (one hhblits call each); at most ``max_hits`` rows (best first) of each.
    Returns ``{sequence_hash, length (residues), hits ({database: rows kept}), raw_depth (rows
    before hhfilter), depth (rows written), hhblits_calls, seconds}``.
    """
    started = time.monotonic()
    hhfilter = {**MSA_DEFAULTS["hhfilter"], **(hhfilter or {})}
    seq_hash, sequence = read_query(query_fasta)
    for db in databases:
        check_database(db["prefix"])
    with tempfile.TemporaryDirectory(prefix=f"foldworks-hhblits-{seq_hash}-") as tmp:
        work = Path(tmp)
        query = work / "query.fasta"
        query.write_text(f">{seq_hash}\n{sequence}\n", encoding="ascii")
        results = []
        for db in databases:
            raw = work / f"{db['name']}.a3m"
            tools.run_tool(hhblits_args(query, db, raw, threads), f"hhblits for {seq_hash} on {db['name']}",
                           timeout_s=timeout_s, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
            results.append((db["name"], raw.read_text(encoding="utf-8", errors="replace")))
        caps = {db["name"]: int(db["max_hits"]) for db in databases if db.get("max_hits")}
        merged, hits = merge_alignments(seq_hash, sequence, results, caps)
        filtered = run_hhfilter(merged, work, hhfilter, seq_hash, timeout_s)
    raw_depth = 1 + sum(hits.values())
    meta = {**search_meta(seq_hash, sequence, databases, "hhblits"), "hits": hits, "raw_depth": raw_depth}
    final = finish_a3m(filtered, seq_hash, sequence, int(hhfilter["max_depth"]), meta)
    fsutil.write_bytes_atomic(out_a3m, final.encode("utf-8"))
    result = {"sequence_hash": seq_hash, "length": len(sequence), "hits": hits, "raw_depth": raw_depth,
              "depth": len(a3m_records(final)), "hhblits_calls": len(databases),
              "seconds": round(time.monotonic() - started, 3)}
    LOG.info("msa %s: %d residues, %d rows from %d hhblits call(s), %d written, %.2f s", seq_hash,
             result["length"], raw_depth, len(databases), result["depth"], result["seconds"])
    return result


def run_hhblits(query_fasta: str | os.PathLike[str], db_prefix: str | os.PathLike[str],
                out_a3m: str | os.PathLike[str], threads: int = 1,
                params: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`search_query` against one database with flat ``params`` (``iterations``,
    ``evalue``, ``maxseq``, ``max_hits``, ``hhfilter``, ``timeout_s``; see :data:`DEFAULT_PARAMS`)."""
    resolved = resolve_params(params)
    db = {"name": Path(db_prefix).name, "prefix": str(db_prefix),
          **{key: resolved[key] for key in ("iterations", "evalue", "maxseq", "max_hits")}}
    timeout = float(resolved["timeout_s"]) if resolved["timeout_s"] else None
    return search_query(query_fasta, [db], out_a3m, threads, resolved["hhfilter"], timeout)


def databases_from_records(search: dict[str, Any], record_paths: Sequence[str | os.PathLike[str]],
                           key: str = "prefix") -> list[dict[str, Any]]:
    """The ``search`` slice's databases with ``prefix``, ``mmseqs_db`` and ``content_sha256``
    from their records (``data/msa_db/<name>.json``); the record field ``key`` must be set.

    Raises :class:`MsaConfigError` naming a database without a record or without ``key``.
    """
    records = {}
    for path in record_paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        records[record["name"]] = record
    out = []
    for db in search["databases"]:
        record = records.get(db["name"])
        if record is None:
            raise MsaConfigError(f"database {db['name']}: no record among {', '.join(map(str, record_paths))}")
        if not record.get(key):
            raise MsaConfigError(f"database {db['name']}: its record has no {key}")
        out.append({**db, "prefix": record.get("prefix"), "mmseqs_db": record.get("mmseqs_db"),
                    "content_sha256": record["content_sha256"]})
    return out


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options shared by both backends: timeout, attempts, failure records."""
    parser.add_argument("--timeout-s", type=float, default=None, help="limit per tool call (seconds)")
    parser.add_argument("--attempt", type=int, default=1, help="this attempt (Snakemake's `attempt`)")
    parser.add_argument("--max-attempts", type=int, default=1, help="1 + the rule's retries")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.search", description=__doc__.split("\n")[0])
    parser.add_argument("--query", required=True, help="one-record FASTA (>{hash})")
    parser.add_argument("--db-records", nargs="+", required=True, help="database record JSON files")
    parser.add_argument("--out", required=True, help="output a3m path")
    parser.add_argument("--threads", type=int, default=1, help="hhblits -cpu")
    parser.add_argument("--params", required=True, help="JSON search slice (foldworks.msa.config.search_slice)")
    parser.add_argument("--failure-record", help="failure record path (written after the last attempt)")
    add_policy_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging("msa")
    try:
        search = json.loads(args.params)
        databases = databases_from_records(search, args.db_records)
        seq_hash, sequence = read_query(args.query)
    except (ValueError, OSError) as exc:
        LOG.error("msa %s: %s", args.query, exc)
        return 1
    meta = search_meta(seq_hash, sequence, databases, "hhblits")
    timeout = args.timeout_s or None

    def run() -> None:
        search_query(args.query, databases, args.out, args.threads, search["hhfilter"], timeout)

    try:
        return apply_policy(seq_hash, sequence, args.out, meta, args.failure_record, args.attempt,
                            args.max_attempts, run)
    except (ValueError, OSError) as exc:
        LOG.error("msa %s: %s", seq_hash, exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
