"""Build a searchable database from FASTA files, or fingerprint an existing one (``msa_db`` rule).

Output, for ``--out-prefix data/msa_db/foldworks``::

    data/msa_db/foldworks_a3m.ffdata / .ffindex     HH-suite entries (see modes)
    data/msa_db/foldworks_cs219.ffdata / .ffindex   cstranslate column-state sequences
    data/msa_db/foldworks_mmseqs{,.index,...}       MMseqs2 sequence database (tool: mmseqs)
    data/msa_db/foldworks.provenance.json           inputs, tool versions, build time
    data/msa_db/foldworks.json                      record: counts, file hashes, content hash

Modes: ``single`` = one HH-suite entry per unique sequence; ``clustered`` = ``mmseqs cluster``
+ ``result2msa --msa-format-mode 5``, one A3M entry per cluster (hhblits then returns every
member of a matching cluster). Entry keys are sequence hashes (20 hex characters: below the
31-character ffindex limit, whatever the FASTA headers); indexes are byte-sorted and data
files written in key order, cs219 re-sorted after multi-threaded cstranslate, so the same
sequences and settings always give byte-identical files.

The record holds content facts only (no paths of inputs, times or versions: those go to the
provenance file), so a rebuild with identical content rewrites it byte for byte and the msa
jobs, which read it, are not rerun. ``content_sha256`` hashes every database file.

For an existing database (``--external``, e.g. UniRef30) the record fingerprints it instead:
sha256 of its index files plus the sizes of its data files.

CLI::

    python -m foldworks.msa.build_db --fasta data/chains.fasta [more.fasta ...] \\
        --out-prefix data/msa_db/foldworks --mode single --threads 2
    python -m foldworks.msa.build_db --external --name uniref30 \\
        --prefix /db/UniRef30_2023_02/UniRef30_2023_02 --record data/msa_db/uniref30.json
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
from typing import Any, Sequence

from foldworks import fsutil
from foldworks.ids import sequence_hash
from foldworks.logutil import setup_logging
from foldworks.msa import ffindex, tools
from foldworks.msa.cluster import MMSEQS_DB_SUFFIXES, clustered_entries, create_sequence_db
from foldworks.msa.fasta import read_fasta

LOG = logging.getLogger("foldworks.msa.build_db")
HHSUITE_SUFFIXES = ("_a3m.ffdata", "_a3m.ffindex", "_cs219.ffdata", "_cs219.ffindex")
MMSEQS_SUFFIXES = tuple(f"_mmseqs{suffix}" for suffix in MMSEQS_DB_SUFFIXES)
SUFFIXES = HHSUITE_SUFFIXES + MMSEQS_SUFFIXES


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
        inputs.append({"path": str(path), "sha256": file_sha256(Path(path)), "n_records": n_records})
        LOG.info("read %d records from %s", n_records, path)
    if not unique:
        raise ValueError(f"no sequences in {', '.join(map(str, fasta_paths))}")
    return unique, inputs


def file_sha256(path: Path) -> str:
    """SHA-256 (64 hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_hash(files: dict[str, str]) -> str:
    """SHA-256 over the sorted ``suffix<TAB>sha256`` lines of a database's files."""
    lines = "".join(f"{suffix}\t{files[suffix]}\n" for suffix in sorted(files))
    return hashlib.sha256(lines.encode("ascii")).hexdigest()


def _run_cstranslate(tmp_prefix: Path, threads: int) -> None:
    """Compute ``<prefix>_cs219`` from ``<prefix>_a3m`` (arguments as HH-suite's hhsuitedb.py)."""
    cs219_lib, context_lib = tools.context_libraries()
    args = [tools.cstranslate(), "-A", str(cs219_lib), "-D", str(context_lib),
            "-x", "0.3", "-c", "4", "-I", "a3m", "-b", "-f",
            "-i", f"{tmp_prefix}_a3m", "-o", f"{tmp_prefix}_cs219"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    tools.run_tool(args, f"cstranslate for database {tmp_prefix.name}", env=env)
    ffindex.rewrite_sorted(Path(f"{tmp_prefix}_cs219.ffdata"), Path(f"{tmp_prefix}_cs219.ffindex"))


def _write_database(tmp_prefix: Path, unique: dict[str, tuple[str, str]], mode: str,
                    cluster: dict[str, float], threads: int) -> int:
    """Write every database file under ``tmp_prefix``; return the number of HH-suite entries."""
    ordered = sorted(unique.items(), key=lambda item: item[0].encode("ascii"))
    seq_db = Path(f"{tmp_prefix}_mmseqs")
    create_sequence_db([(key, header, seq) for key, (header, seq) in ordered], tmp_prefix.parent, seq_db)
    if mode == "clustered":
        entries = clustered_entries(seq_db, [key for key, _ in ordered], tmp_prefix.parent / "cluster",
                                    float(cluster["min_seq_id"]), float(cluster["coverage"]), threads)
    else:
        entries = {key: f">{header}\n{sequence}\n".encode("ascii", "replace") for key, (header, sequence) in ordered}
    ffindex.write_ffindex(Path(f"{tmp_prefix}_a3m.ffdata"), Path(f"{tmp_prefix}_a3m.ffindex"), entries.items())
    _run_cstranslate(tmp_prefix, threads)
    n_cs = len(Path(f"{tmp_prefix}_cs219.ffindex").read_text(encoding="ascii").splitlines())
    if n_cs != len(entries):
        raise tools.ToolError(f"cstranslate wrote {n_cs} entries for {len(entries)} a3m entries ({tmp_prefix.name})")
    return len(entries)


def build_database(fasta_paths: Sequence[str | os.PathLike[str]], out_prefix: str | os.PathLike[str],
                   threads: int = 1, record_path: str | os.PathLike[str] | None = None,
                   mode: str = "single", cluster: dict[str, float] | None = None) -> dict[str, Any]:
    """Build ``<out_prefix>`` + :data:`SUFFIXES` from ``fasta_paths``; return the record.

    ``mode`` is ``single`` or ``clustered`` (``cluster``: ``min_seq_id``, ``coverage`` as
    fractions). ``threads``: cstranslate/MMseqs2 threads (cstranslate ~0.37 ms CPU per
    residue). Files are built in a private temp directory and renamed into place; the
    provenance file, then the record (when ``record_path`` is given) are written last.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if mode not in ("single", "clustered"):
        raise ValueError(f"database mode {mode!r}: expected single or clustered")
    cluster = {"min_seq_id": 0.3, "coverage": 0.8, **(cluster or {})}
    out_prefix = Path(out_prefix)
    started = time.monotonic()
    unique, inputs = collect_sequences(fasta_paths)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_prefix.name}.", suffix=".tmp", dir=out_prefix.parent))
    try:
        tmp_prefix = tmp_dir / out_prefix.name
        n_entries = _write_database(tmp_prefix, unique, mode, cluster, threads)
        files = {suffix: file_sha256(Path(f"{tmp_prefix}{suffix}")) for suffix in SUFFIXES}
        for suffix in SUFFIXES:
            os.replace(f"{tmp_prefix}{suffix}", f"{out_prefix}{suffix}")
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    sequences = [sequence for _, sequence in unique.values()]
    record: dict[str, Any] = {
        "name": out_prefix.name, "kind": "built", "mode": mode,
        "prefix": str(out_prefix), "mmseqs_db": f"{out_prefix}_mmseqs",
        "n_sequences": len(sequences), "n_residues": sum(map(len, sequences)), "n_entries": n_entries,
        "files": files, "content_sha256": content_hash(files),
    }
    if mode == "clustered":
        record["cluster"] = cluster
    provenance = {"inputs": inputs, "n_input_records": sum(item["n_records"] for item in inputs),
                  "seconds": round(time.monotonic() - started, 1),
                  "tools": {"cstranslate": tools.tool_version(tools.cstranslate()),
                            "cstranslate_binary": Path(tools.cstranslate()).name,
                            "mmseqs": tools.mmseqs_version()}}
    fsutil.write_json_atomic(f"{out_prefix}.provenance.json", provenance)
    if record_path is not None:
        fsutil.write_json_atomic(record_path, record)
    LOG.info("database %s (%s): %d unique sequences, %d residues, %d entries in %.1f s", out_prefix, mode,
             record["n_sequences"], record["n_residues"], n_entries, time.monotonic() - started)
    return record


def _data_size(path: Path) -> int:
    """Size of a data file, or of its ``.0, .1, ...`` parts (MMseqs2 split databases)."""
    if path.is_file():
        return path.stat().st_size
    parts = sorted(path.parent.glob(f"{path.name}.[0-9]*"))
    if not parts:
        raise FileNotFoundError(f"{path} is missing")
    return sum(part.stat().st_size for part in parts)


def external_record(name: str, prefix: str | None, mmseqs_db: str | None) -> dict[str, Any]:
    """Record of an existing database: sha256 of its index files, sizes of its data files.

    ``prefix``: HH-suite prefix (``_a3m``/``_cs219`` ffindex pairs); ``mmseqs_db``: MMseqs2
    sequence database. Raises ``FileNotFoundError`` naming the first missing file.
    """
    if not prefix and not mmseqs_db:
        raise ValueError(f"database {name}: give --prefix and/or --mmseqs-db")
    files: dict[str, str] = {}
    if prefix:
        for part in ("_a3m", "_cs219"):
            files[f"{part}.ffindex"] = file_sha256(Path(f"{prefix}{part}.ffindex"))
            files[f"{part}.ffdata:size"] = str(_data_size(Path(f"{prefix}{part}.ffdata")))
    if mmseqs_db:
        for suffix in (".index", ".dbtype"):
            files[f"_mmseqs{suffix}"] = file_sha256(Path(f"{mmseqs_db}{suffix}"))
        files["_mmseqs:size"] = str(_data_size(Path(mmseqs_db)))
    return {"name": name, "kind": "external", "prefix": prefix, "mmseqs_db": mmseqs_db,
            "files": files, "content_sha256": content_hash(files)}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.msa.build_db", description=__doc__.split("\n")[0])
    parser.add_argument("--fasta", nargs="+", help="input FASTA file(s) (build mode)")
    parser.add_argument("--out-prefix", help="database prefix, e.g. data/msa_db/foldworks (build mode)")
    parser.add_argument("--mode", default="single", choices=("single", "clustered"))
    parser.add_argument("--min-seq-id", type=float, default=0.3, help="clustered mode: identity (fraction)")
    parser.add_argument("--coverage", type=float, default=0.8, help="clustered mode: coverage (fraction)")
    parser.add_argument("--threads", type=int, default=1, help="cstranslate / MMseqs2 threads")
    parser.add_argument("--external", action="store_true", help="fingerprint an existing database")
    parser.add_argument("--name", help="database name (external mode)")
    parser.add_argument("--prefix", help="existing HH-suite prefix (external mode)")
    parser.add_argument("--mmseqs-db", help="existing MMseqs2 database (external mode)")
    parser.add_argument("--record", help="JSON record path (default: <out-prefix>.json)")
    args = parser.parse_args(argv)
    setup_logging("msa_db")
    what = args.name or args.out_prefix
    try:
        if args.external:
            if not args.record:
                raise ValueError("--external needs --record")
            fsutil.write_json_atomic(args.record, external_record(args.name or "external", args.prefix, args.mmseqs_db))
        else:
            if not args.fasta or not args.out_prefix:
                raise ValueError("build mode needs --fasta and --out-prefix")
            build_database(args.fasta, args.out_prefix, args.threads, args.record or f"{args.out_prefix}.json",
                           args.mode, {"min_seq_id": args.min_seq_id, "coverage": args.coverage})
    except (ValueError, OSError, tools.ToolError) as exc:
        LOG.error("msa_db %s: %s", what, exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
