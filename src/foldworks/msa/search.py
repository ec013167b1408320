"""One hhblits search per unique sequence (the ``msa`` stage).

Pipeline for one query: ``hhblits -all`` (unfiltered result MSA) → ``hhfilter`` (redundancy /
coverage filter) → depth cap (first ``max_depth`` rows, query kept first) → contract check
(:func:`foldworks.msa.a3m.validate_a3m`) → atomic rename onto ``--out``. Tools run with
explicit argument lists (no shell) in a private temp directory that is always removed.

``--db`` is any HH-suite database prefix with ``<prefix>_a3m.ff{data,index}`` and
``<prefix>_cs219.ff{data,index}`` (ours from ``foldworks.msa.build_db`` or e.g. UniRef30).

CLI::

    python -m foldworks.msa.search --query data/sequences/ab/<hash>.fasta \\
        --db data/msa_db/foldworks --out data/msa/ab/<hash>.a3m --threads 1 \\
        --params '{"iterations": 2, "evalue": 0.001, "maxseq": 1000000,
                   "hhfilter": {"id": 90, "cov": 0, "diff": 0, "max_depth": 512}, "timeout_s": 600}'
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

from foldworks.logutil import setup_logging
from foldworks import fsutil
from foldworks.ids import SEQUENCE_HASH_PATTERN, sequence_hash
from foldworks.msa import tools
from foldworks.msa.a3m import A3MError, a3m_records, format_a3m, validate_a3m
from foldworks.msa.fasta import read_fasta

LOG = logging.getLogger("foldworks.msa.search")

DEFAULT_PARAMS: dict[str, Any] = {
    "iterations": 2, "evalue": 0.001, "maxseq": 1_000_000, "timeout_s": 600,
    "maxfilt": None, "realign_max": None,
    "hhfilter": {"id": 90, "cov": 0, "diff": 0, "max_depth": 512},
}
_HHFILTER_FLAGS = ("id", "cov", "diff", "qid", "qsc", "neff")


def resolve_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Merge ``params`` over :data:`DEFAULT_PARAMS`; unknown keys raise ``ValueError``."""
    params = dict(params or {})
    filt = dict(params.pop("hhfilter", None) or {})
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    unknown += sorted(f"hhfilter.{k}" for k in set(filt) - {*_HHFILTER_FLAGS, "max_depth"})
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


def hhblits_args(query: Path, db_prefix: str, out: Path, threads: int, params: dict[str, Any]) -> list[str]:
    """Argument list of the hhblits call (unfiltered result MSA ``-all``, no ``.hhr``)."""
    args = [tools.which("hhblits"), "-i", str(query), "-d", str(db_prefix), "-oa3m", str(out),
            "-o", os.devnull, "-n", str(int(params["iterations"])), "-e", str(float(params["evalue"])),
            "-cpu", str(threads), "-all", "-maxseq", str(int(params["maxseq"])), "-v", "1"]
    for key in ("maxfilt", "realign_max"):
        if params.get(key) is not None:
            args += [f"-{key}", str(int(params[key]))]
    return args


def hhfilter_args(raw: Path, out: Path, params: dict[str, Any]) -> list[str]:
    """Argument list of the hhfilter call (flags present in ``params['hhfilter']`` only)."""
    args = [tools.which("hhfilter"), "-i", str(raw), "-o", str(out), "-v", "1",
            "-maxseq", str(int(params["maxseq"]))]
    for flag in _HHFILTER_FLAGS:
        value = params["hhfilter"].get(flag)
        if value is not None:
            args += [f"-{flag}", str(value)]
    return args


def finish_a3m(text: str, seq_hash: str, sequence: str, max_depth: int) -> str:
    """Rename the query row to ``>{hash}``, cap the depth at ``max_depth`` rows (query first)
    and validate; raises :class:`A3MError` naming ``seq_hash``."""
    records = a3m_records(text)
    if not records:
        raise A3MError(f"{seq_hash}: hhblits produced an empty alignment")
    records = [(seq_hash, records[0][1])] + records[1:max_depth]
    final = format_a3m(records)
    validate_a3m(final, sequence, name=seq_hash)
    return final


def run_hhblits(query_fasta: str | os.PathLike[str], db_prefix: str | os.PathLike[str],
                out_a3m: str | os.PathLike[str], threads: int = 1,
                params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Search one query against ``db_prefix`` and write the validated A3M to ``out_a3m``.

    Returns ``{sequence_hash, length (residues), raw_depth (rows from hhblits), depth (rows
    written), seconds (wall time of the whole call)}``.
    """
    started = time.monotonic()
    resolved = resolve_params(params)
    seq_hash, sequence = read_query(query_fasta)
    check_database(db_prefix)
    timeout = float(resolved["timeout_s"]) if resolved["timeout_s"] else None
    with tempfile.TemporaryDirectory(prefix=f"foldworks-hhblits-{seq_hash}-") as tmp:
        work = Path(tmp)
        query = work / "query.fasta"
        query.write_text(f">{seq_hash}\n{sequence}\n", encoding="ascii")
        tools.run_tool(hhblits_args(query, str(db_prefix), work / "raw.a3m", threads, resolved),
                       f"hhblits for {seq_hash}", timeout_s=timeout, env=_env(threads))
        raw_text = (work / "raw.a3m").read_text(encoding="utf-8", errors="replace")
        tools.run_tool(hhfilter_args(work / "raw.a3m", work / "filtered.a3m", resolved),
                       f"hhfilter for {seq_hash}", timeout_s=timeout)
        text = (work / "filtered.a3m").read_text(encoding="utf-8", errors="replace")
    final = finish_a3m(text, seq_hash, sequence, int(resolved["hhfilter"]["max_depth"]))
    fsutil.write_bytes_atomic(out_a3m, final.encode("utf-8"))
    result = {"sequence_hash": seq_hash, "length": len(sequence), "raw_depth": len(a3m_records(raw_text)),
              "depth": len(a3m_records(final)), "seconds": round(time.monotonic() - started, 3)}
    LOG.info("msa %s: %d residues, %d rows from hhblits, %d written, %.2f s", seq_hash,
             result["length"], result["raw_depth"], result["depth"], result["seconds"])
    return result


def _env(threads: int) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(threads))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.search", description=__doc__.split("\n")[0])
    parser.add_argument("--query", required=True, help="one-record FASTA (>{hash})")
    parser.add_argument("--db", required=True, help="HH-suite database prefix")
    parser.add_argument("--out", required=True, help="output a3m path")
    parser.add_argument("--threads", type=int, default=1, help="hhblits -cpu")
    parser.add_argument("--params", default="{}", help="JSON: iterations, evalue, maxseq, hhfilter{...}, timeout_s")
    args = parser.parse_args(argv)
    setup_logging("msa")
    try:
        run_hhblits(args.query, args.db, args.out, args.threads, json.loads(args.params))
    except (ValueError, OSError, tools.ToolError) as exc:
        LOG.error("msa %s: %s", args.query, exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
