"""The template database: every protein chain of every parsed entry, split into segments.

Templates are the chains of ``data/chains.parquet`` with ``molecule_type == protein`` (all of
them, whether or not they passed the training filters), deduplicated by sequence hash. Each
unique sequence belongs to the segment named by the first ``segment_chars`` hex characters of
its hash; a segment is an HH-suite database of one single-sequence entry per hash::

    data/templates/db/<seg>_a3m.ff{data,index}     entries keyed by sequence hash
    data/templates/db/<seg>_cs219.ff{data,index}   column-state sequences (cstranslate)
    data/templates/db/<seg>.json                   record: segment, n_sequences, content_sha256
    data/templates/db/members.tsv                  sequence_hash, entry, chain, release_date, length

``content_sha256`` hashes the segment's sorted ``hash<TAB>sequence`` lines, so a segment's
record changes exactly when a sequence enters or leaves it: a new entry whose chains repeat
known sequences changes no record, and one with a new sequence changes one record. The
search jobs read the records only (see ``workflow/rules/templates.smk``). A segment whose
digest is unchanged is not rebuilt (its digest is kept in ``.<seg>.digest`` beside it).

With ``--seqres pdb_seqres.txt`` instead of ``--table``, the protein records of an existing
wwPDB sequence file are the templates (docs/templates.md).

CLI::

    python -m foldworks.templates.db --table data/chains.parquet --out-dir data/templates/db \\
        --segment-chars 1 --threads 2
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from foldworks import fsutil
from foldworks.logutil import setup_logging
from foldworks.msa import ffindex, tools
from foldworks.templates.config import segment_keys, segment_of

LOG = logging.getLogger("foldworks.templates.db")
MEMBER_COLUMNS = ("sequence_hash", "entry", "chain", "release_date", "length")
DB_SUFFIXES = ("_a3m.ffdata", "_a3m.ffindex", "_cs219.ffdata", "_cs219.ffindex")


class EmptyTemplateDatabaseError(ValueError):
    """No protein chain to build a template database from."""


def template_members(table: pd.DataFrame, source: str = "chain table") -> pd.DataFrame:
    """One row per protein chain with a sequence (:data:`MEMBER_COLUMNS`), sorted by hash,
    entry, chain. Raises :class:`EmptyTemplateDatabaseError` naming ``source`` when none."""
    protein = table[(table["molecule_type"] == "protein") & (table["sequence"].str.len() > 0)]
    if protein.empty:
        raise EmptyTemplateDatabaseError(f"template database: no protein chain with a sequence in {source}")
    members = protein.assign(release_date=protein["release_date"].map(_iso_date), length=protein["sequence"].str.len())
    return members.loc[:, list(MEMBER_COLUMNS)].sort_values(["sequence_hash", "entry", "chain"]).reset_index(drop=True)


def _iso_date(value: Any) -> str:
    if value is None or value == "" or pd.isna(value):
        return ""
    return pd.Timestamp(value).date().isoformat()


def segment_sequences(table: pd.DataFrame, chars: int) -> dict[str, dict[str, str]]:
    """``{segment: {sequence hash: sequence}}`` over every segment key (empty ones included)."""
    segments: dict[str, dict[str, str]] = {key: {} for key in segment_keys(chars)}
    protein = table[(table["molecule_type"] == "protein") & (table["sequence"].str.len() > 0)]
    for seq_hash, sequence in zip(protein["sequence_hash"], protein["sequence"]):
        segments[segment_of(seq_hash, chars)][seq_hash] = sequence
    return segments


def segment_digest(sequences: dict[str, str]) -> str:
    """SHA-256 (hex) over the sorted ``hash<TAB>sequence`` lines of one segment."""
    text = "".join(f"{key}\t{sequences[key]}\n" for key in sorted(sequences))
    return hashlib.sha256(text.encode("ascii", "replace")).hexdigest()


def _write_hhsuite_db(prefix: Path, sequences: dict[str, str], threads: int) -> None:
    """Single-sequence HH-suite database (a3m + cs219 ffindex pairs, byte-sorted keys) at ``prefix``."""
    entries = [(key, f">{key}\n{sequences[key]}\n".encode("ascii", "replace")) for key in sorted(sequences)]
    ffindex.write_ffindex(Path(f"{prefix}_a3m.ffdata"), Path(f"{prefix}_a3m.ffindex"), entries)
    cs219_lib, context_lib = tools.context_libraries()
    tools.run_tool([tools.cstranslate(), "-A", str(cs219_lib), "-D", str(context_lib), "-x", "0.3", "-c", "4",
                    "-I", "a3m", "-b", "-f", "-i", f"{prefix}_a3m", "-o", f"{prefix}_cs219"],
                   f"cstranslate for template segment {prefix.name}", env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    ffindex.rewrite_sorted(Path(f"{prefix}_cs219.ffdata"), Path(f"{prefix}_cs219.ffindex"))


def build_segment(out_dir: Path, key: str, sequences: dict[str, str], threads: int = 1) -> dict[str, Any]:
    """Build (or keep, when its digest is unchanged) segment ``key``; write and return its record."""
    digest = segment_digest(sequences)
    prefix, stamp = out_dir / key, out_dir / f".{key}.digest"
    current = stamp.is_file() and stamp.read_text().strip() == digest
    if sequences and not (current and all(Path(f"{prefix}{s}").is_file() for s in DB_SUFFIXES)):
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=out_dir))
        try:
            _write_hhsuite_db(tmp_dir / key, sequences, threads)
            for suffix in DB_SUFFIXES:
                os.replace(f"{tmp_dir / key}{suffix}", f"{prefix}{suffix}")
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        LOG.info("segment %s: built, %d sequences", key, len(sequences))
    elif not sequences:
        for suffix in DB_SUFFIXES:
            Path(f"{prefix}{suffix}").unlink(missing_ok=True)
    fsutil.write_bytes_atomic(stamp, (digest + "\n").encode("ascii"))
    record = {"segment": key, "prefix": str(prefix), "n_sequences": len(sequences),
              "n_residues": sum(map(len, sequences.values())), "content_sha256": digest}
    fsutil.write_json_atomic(out_dir / f"{key}.json", record)
    return record


def build_database(table_path: str | Path | None, out_dir: str | Path, chars: int, threads: int = 1,
                   seqres: str | Path | None = None) -> list[dict[str, Any]]:
    """Members table + every segment of the template database; the records. Sequences from the
    chain table ``table_path``, or from a ``pdb_seqres.txt`` (``seqres``; release dates are then
    read later, per hit, by :mod:`foldworks.templates.seqres`)."""
    if seqres is not None:
        from foldworks.templates.seqres import read_seqres

        table, source = read_seqres(seqres), str(seqres)
    else:
        table, source = pd.read_parquet(table_path), str(table_path)
    members = template_members(table, source)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fsutil.write_tsv_atomic(out / "members.tsv", MEMBER_COLUMNS, members.itertuples(index=False, name=None))
    records = [build_segment(out, key, seqs, threads) for key, seqs in segment_sequences(table, chars).items()]
    LOG.info("template database: %d chains, %d unique sequences in %d segments", len(members),
             sum(r["n_sequences"] for r in records), len(records))
    return records


def read_members(path: str | Path) -> pd.DataFrame:
    """``members.tsv`` with every column as text."""
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.templates.db", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--table", help="chain table (data/chains.parquet): its protein chains are the templates")
    source.add_argument("--seqres", help="an existing pdb_seqres.txt: its protein records are the templates")
    parser.add_argument("--out-dir", required=True, help="database directory (data/templates/db)")
    parser.add_argument("--segment-chars", type=int, default=1, help="hash prefix length of a segment (0: one)")
    parser.add_argument("--threads", type=int, default=1, help="cstranslate threads")
    args = parser.parse_args(argv)
    setup_logging("templates.db")
    try:
        build_database(args.table, args.out_dir, args.segment_chars, args.threads, seqres=args.seqres)
    except (EmptyTemplateDatabaseError, OSError, ValueError) as exc:
        LOG.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
