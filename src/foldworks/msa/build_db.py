"""Build a searchable single-sequence HH-suite database from FASTA files (the ``msa_db`` stage).

Output, for ``--out-prefix data/msa_db/foldworks``::

    data/msa_db/foldworks_a3m.ffdata / .ffindex     one entry per unique sequence
    data/msa_db/foldworks_cs219.ffdata / .ffindex   cstranslate column-state sequences
    data/msa_db/foldworks.json                      record (content hash, counts, tools)

Identical sequences across all inputs are stored once (first header kept). Entry keys are
``foldworks.ids.sequence_hash`` values (20 hex characters, below ffindex's 31-character
limit); both indexes are byte-sorted and their data files are written in key order, so the
same sequences always give byte-identical files. ``hhm`` files are not built: hhblits does
not need them. Everything is built in a private temp directory beside the output and
renamed into place; the record is written last.

CLI::

    python -m foldworks.msa.build_db --fasta data/chains.fasta [more.fasta ...] \\
        --out-prefix data/msa_db/foldworks --record data/msa_db/foldworks.json --threads 2
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

from foldworks.logutil import setup_logging
from foldworks import fsutil
from foldworks.ids import sequence_hash
from foldworks.msa import ffindex, tools
from foldworks.msa.fasta import read_fasta

LOG = logging.getLogger("foldworks.msa.build_db")
SUFFIXES = ("_a3m.ffdata", "_a3m.ffindex", "_cs219.ffdata", "_cs219.ffindex")


def collect_sequences(fasta_paths: Sequence[str | os.PathLike[str]]) -> tuple[dict[str, tuple[str, str]], list[dict]]:
    """Deduplicate sequences over all inputs: ``{key: (first header, sequence)}`` plus one
    ``{path, sha256, n_records}`` summary per input file."""
    unique: dict[str, tuple[str, str]] = {}
    inputs: list[dict] = []
    for path in fasta_paths:
        n_records = 0
        for header, sequence in read_fasta(path):
            n_records += 1
            key = sequence_hash(sequence)
            if key in unique and unique[key][1] != sequence:
                raise ValueError(f"{path}: record {header!r}: sequence hash collision on key {key}")
            unique.setdefault(key, (header, sequence))
        inputs.append({"path": str(path), "sha256": _file_sha256(Path(path)), "n_records": n_records})
        LOG.info("read %d records from %s", n_records, path)
    if not unique:
        raise ValueError(f"no sequences in {', '.join(map(str, fasta_paths))}")
    return unique, inputs


def content_hash(sequences: Sequence[str]) -> str:
    """SHA-256 over the sorted unique sequences, newline-joined (independent of order,
    headers and duplicates)."""
    return hashlib.sha256("\n".join(sorted(set(sequences))).encode("ascii")).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run_cstranslate(tmp_prefix: Path, threads: int) -> None:
    """Compute ``<prefix>_cs219`` from ``<prefix>_a3m`` (arguments as HH-suite's hhsuitedb.py)."""
    cs219_lib, context_lib = tools.context_libraries()
    args = [tools.cstranslate(), "-A", str(cs219_lib), "-D", str(context_lib),
            "-x", "0.3", "-c", "4", "-I", "a3m", "-b", "-f",
            "-i", f"{tmp_prefix}_a3m", "-o", f"{tmp_prefix}_cs219"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    tools.run_tool(args, f"cstranslate for database {tmp_prefix.name}", env=env)
    ffindex.rewrite_sorted(Path(f"{tmp_prefix}_cs219.ffdata"), Path(f"{tmp_prefix}_cs219.ffindex"))


def _write_database(tmp_prefix: Path, unique: dict[str, tuple[str, str]], threads: int) -> None:
    entries = ((key, f">{header}\n{sequence}\n".encode("ascii", "replace"))
               for key, (header, sequence) in unique.items())
    ffindex.write_ffindex(Path(f"{tmp_prefix}_a3m.ffdata"), Path(f"{tmp_prefix}_a3m.ffindex"), entries)
    _run_cstranslate(tmp_prefix, threads)
    n_cs = len(Path(f"{tmp_prefix}_cs219.ffindex").read_text(encoding="ascii").splitlines())
    if n_cs != len(unique):
        raise tools.ToolError(f"cstranslate wrote {n_cs} entries for {len(unique)} sequences ({tmp_prefix.name})")


def build_database(fasta_paths: Sequence[str | os.PathLike[str]], out_prefix: str | os.PathLike[str],
                   threads: int = 1, record_path: str | os.PathLike[str] | None = None) -> dict:
    """Build the hhblits database ``<out_prefix>_{a3m,cs219}.ff{data,index}``; return its record.

    ``threads`` is the OpenMP thread count of cstranslate (~0.37 ms CPU per residue). The
    record (also written to ``record_path`` when given, after the database files are in
    place) holds ``content_sha256``, ``n_sequences``, ``n_residues``, ``n_input_records``,
    ``inputs``, ``files`` (sha256 of each database file) and ``tools`` versions.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    out_prefix = Path(out_prefix)
    started = time.monotonic()
    unique, inputs = collect_sequences(fasta_paths)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_prefix.name}.", suffix=".tmp", dir=out_prefix.parent))
    try:
        tmp_prefix = tmp_dir / out_prefix.name
        _write_database(tmp_prefix, unique, threads)
        files = {f"{out_prefix.name}{s}": _file_sha256(Path(f"{tmp_prefix}{s}")) for s in SUFFIXES}
        for suffix in SUFFIXES:
            os.replace(f"{tmp_prefix}{suffix}", f"{out_prefix}{suffix}")
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    sequences = [sequence for _, sequence in unique.values()]
    record = {
        "database": str(out_prefix), "content_sha256": content_hash(sequences),
        "n_sequences": len(sequences), "n_residues": sum(map(len, sequences)),
        "n_input_records": sum(item["n_records"] for item in inputs), "inputs": inputs,
        "files": files, "mode": "single-sequence",
        "tools": {"cstranslate": tools.tool_version(tools.cstranslate()),
                  "cstranslate_binary": Path(tools.cstranslate()).name},
    }
    if record_path is not None:
        fsutil.write_json_atomic(record_path, record)
    LOG.info("database %s: %d unique sequences, %d residues in %.1f s",
             out_prefix, record["n_sequences"], record["n_residues"], time.monotonic() - started)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.build_db", description=__doc__.split("\n")[0])
    parser.add_argument("--fasta", nargs="+", required=True, help="input FASTA file(s)")
    parser.add_argument("--out-prefix", required=True, help="database prefix, e.g. data/msa_db/foldworks")
    parser.add_argument("--record", help="JSON record path (default: <out-prefix>.json)")
    parser.add_argument("--threads", type=int, default=1, help="cstranslate OpenMP threads")
    args = parser.parse_args(argv)
    setup_logging("msa_db")
    record_path = args.record or f"{args.out_prefix}.json"
    try:
        build_database(args.fasta, args.out_prefix, args.threads, record_path=record_path)
    except (ValueError, OSError, tools.ToolError) as exc:
        LOG.error("msa_db %s: %s", args.out_prefix, exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
