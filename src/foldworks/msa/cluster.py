"""MMseqs2 pieces of database building: the sequence database (``createdb``) that the mmseqs
backend searches, and clustered HH-suite entries (``cluster`` + ``result2msa`` in A3M format).

``createdb`` numbers sequences 0..N-1 in input order; we feed sequences in key order, so
internal id ``i`` is the ``i``-th key. ``result2msa --msa-format-mode 5`` writes one A3M per
cluster, keyed by the representative's internal id, with entries in a thread-dependent byte
order: :func:`clustered_entries` re-keys them (representative's sequence hash, ≤ 31 chars)
and the caller writes them byte-sorted, so identical input gives identical files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from foldworks.msa import ffindex, tools

#: Files of an MMseqs2 sequence database ``<db>`` (suffixes appended to the db path).
MMSEQS_DB_SUFFIXES: tuple[str, ...] = ("", ".index", ".dbtype", "_h", "_h.index", "_h.dbtype", ".lookup", ".source")


def _mmseqs(args: list[str], what: str, threads: int = 1) -> None:
    tools.run_tool([tools.which("mmseqs"), *args, "-v", "1", *(["--threads", str(threads)] if threads else [])],
                   what, env=dict(os.environ, OMP_NUM_THREADS=str(max(threads, 1))))


def create_sequence_db(entries: list[tuple[str, str, str]], work: Path, db_path: Path) -> None:
    """``mmseqs createdb`` of ``[(key, header, sequence)]`` (already in key order) at ``db_path``.

    The input FASTA is always named ``sequences.fasta`` so the ``.source`` file, and with it
    every database byte, depends only on the entries.
    """
    fasta = work / "sequences.fasta"
    fasta.write_text("".join(f">{header}\n{sequence}\n" for _, header, sequence in entries), encoding="ascii",
                     errors="replace")
    cwd, target = os.getcwd(), db_path.resolve()
    try:  # run in `work` so .source records the bare file name
        os.chdir(work)
        _mmseqs(["createdb", fasta.name, str(target), "--dbtype", "1", "--shuffle", "0"],
                f"mmseqs createdb for {db_path.name}", threads=0)
    finally:
        os.chdir(cwd)
    fasta.unlink()


def clustered_entries(seq_db: Path, keys: list[str], work: Path, min_seq_id: float, coverage: float,
                      threads: int) -> dict[str, bytes]:
    """Cluster ``seq_db`` (``keys[i]`` = internal id ``i``) and return ``{representative key:
    A3M bytes}`` (representative first, members aligned to it, lower-case insertions)."""
    work.mkdir(parents=True, exist_ok=True)
    clu, msa, tmp = work / "clu", work / "clu_msa", work / "clu_tmp"
    _mmseqs(["cluster", str(seq_db), str(clu), str(tmp), "--min-seq-id", str(min_seq_id), "-c", str(coverage),
             "--cov-mode", "0"], f"mmseqs cluster of {seq_db.name}", threads)
    _mmseqs(["result2msa", str(seq_db), str(seq_db), str(clu), str(msa), "--msa-format-mode", "5"],
            f"mmseqs result2msa of {seq_db.name}", threads)
    raw = ffindex.read_ffindex(msa, Path(f"{msa}.index"))
    out: dict[str, bytes] = {}
    for internal_id, payload in raw.items():
        index = int(internal_id)
        if not 0 <= index < len(keys):
            raise tools.ToolError(f"mmseqs result2msa of {seq_db.name}: unknown representative id {internal_id}")
        out[keys[index]] = payload if payload.endswith(b"\n") else payload + b"\n"
    shutil.rmtree(tmp, ignore_errors=True)
    return out
