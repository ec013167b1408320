"""CLI of the ``chains`` stage.

python -m foldworks.chains --entries data/raw/entries.txt --parsed-dir data/parsed \
    --out-table data/chains.parquet --out-fasta data/chains.fasta --sequences-dir data/sequences \
    --failures data/parsed/failures.tsv --params '{...}' --threads 2 [--failures-dir data/failures]

reads ``<parsed-dir>/<entry>.json`` for each entry of the list file (one ID per line, see
foldworks.entrylist; the workflow's form: one argument for any number of entries). For a few
files, ``--parsed a.json b.json ...`` still works instead of ``--entries``/``--parsed-dir``.

Entries that failed earlier (fetch, parse) are listed in ``--failures`` and skipped. With
``--failures-dir``, every entry none of whose chains is kept (all filtered, e.g. a DNA-only
entry under a protein-only config, or a chain of only unknown residues) gets a failure record
``<dir>/chains/<entry>.json``; records of entries that now keep a chain are removed.
Exit status 1 only when no chain at all is left (every entry failed or was filtered).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import pandas as pd

from foldworks import failures as failure_records
from foldworks.chains.leakage import LeakageError, check_no_leakage
from foldworks.chains.splits import add_clusters_and_splits
from foldworks.chains.table import (EmptyDatasetError, apply_filters, empty_message, entries_without_chains,
                                    read_parsed_records, rows_to_frame)
from foldworks.entrylist import EntryListError, entry_files, read_entry_list
from foldworks.fsutil import atomic_path, write_bytes_atomic, write_tsv_atomic
from foldworks.ids import ENTRY_PATTERN
from foldworks.logutil import setup_logging

log = logging.getLogger("foldworks.chains")

DEFAULTS = {
    "filters": {"molecule_types": ["protein"], "length_min": 20, "length_max": 300,
                "min_resolved_fraction": 0.5},
    "clustering": {"min_seq_id": 0.4, "coverage": 0.8},
    "splits": {"val": 0.1, "test": 0.15, "seed": 0, "test_release_after": None},
}


def merge_params(overrides: dict) -> dict:
    """``DEFAULTS`` updated per section with ``overrides`` (the config slice ``chains``)."""
    unknown = sorted(set(overrides) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown chains section(s) {unknown}")
    return {name: {**section, **(overrides.get(name) or {})} for name, section in DEFAULTS.items()}


def write_query_fastas(frame: pd.DataFrame, sequences_dir: Path) -> int:
    """Write ``{dir}/{xx}/{hash}.fasta`` for each unique passed sequence if absent; return count written.

    Content-addressed and never rewritten, so existing MSA jobs keep their inputs' mtimes.
    """
    written = 0
    passed = frame[frame["passed_filters"]].drop_duplicates("sequence_hash")
    for seq_hash, sequence in zip(passed["sequence_hash"], passed["sequence"]):
        path = sequences_dir / seq_hash[:2] / f"{seq_hash}.fasta"
        if not path.exists():
            write_bytes_atomic(path, f">{seq_hash}\n{sequence}\n".encode())
            written += 1
    return written


def fasta_of_passed(frame: pd.DataFrame) -> bytes:
    """Unique sequences of passed chains as FASTA (header = sequence hash), sorted by hash."""
    passed = frame[frame["passed_filters"]].drop_duplicates("sequence_hash").sort_values("sequence_hash")
    return "".join(f">{h}\n{s}\n" for h, s in zip(passed["sequence_hash"], passed["sequence"])).encode()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.chains", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--entries", type=Path, help="entry list file (one PDB ID per line); with --parsed-dir")
    source.add_argument("--parsed", nargs="+", help="parse-stage JSON files (small runs, tests)")
    parser.add_argument("--parsed-dir", type=Path, default=None,
                        help="folder of the parse-stage <entry>.json files of the --entries list")
    parser.add_argument("--out-table", required=True, type=Path)
    parser.add_argument("--out-fasta", required=True, type=Path)
    parser.add_argument("--sequences-dir", required=True, type=Path)
    parser.add_argument("--failures", required=True, type=Path)
    parser.add_argument("--params", default="{}", help="config slice `chains` as JSON")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--failures-dir", type=Path, default=None,
                        help="write/clear <dir>/chains/<entry>.json for entries with no chain kept")
    return parser


def sync_chain_failures(frame: pd.DataFrame, entries: list[str], failures_dir: Path | None) -> int:
    """Record entries of ``frame`` with no chain kept, clear the others' records; returns the count."""
    lost = entries_without_chains(frame)
    for entry, reason in lost.items():
        log.warning("%s", reason)
    if failures_dir is None:
        return len(lost)
    for entry in entries:
        if entry in lost:
            failure_records.record_failure("chains", entry, lost[entry], failures_dir)
        else:
            failure_records.clear_failure("chains", entry, failures_dir)
    return len(lost)


def parsed_paths(args: argparse.Namespace) -> list[Path]:
    """The parse-stage JSON files to read: ``--parsed``, or ``--parsed-dir``/<entry>.json for
    every entry of ``--entries``."""
    if args.entries is None:
        return [Path(p) for p in args.parsed]
    return entry_files(read_entry_list(args.entries), args.parsed_dir)


def run(args: argparse.Namespace, params: dict) -> None:
    """Build, filter, cluster, split and leakage-check the chain table; write every output."""
    rows, failures = read_parsed_records(parsed_paths(args))
    for failure in failures:
        log.warning("entry %s skipped: %s", failure["entry"], failure["reason"])
    entries = sorted(e for e in {row["entry"] for row in rows} | {f["entry"] for f in failures}
                     if ENTRY_PATTERN.fullmatch(e))
    if not rows:
        raise EmptyDatasetError(f"no chains: all {len(failures)} parsed entries failed (see their reasons above)")
    frame = apply_filters(rows_to_frame(rows), params["filters"], allow_empty=True)
    if not frame["passed_filters"].any():
        sync_chain_failures(frame, entries, args.failures_dir)
        raise EmptyDatasetError(empty_message(frame.attrs.get("emptied_by", "?")))
    min_seq_id, coverage = float(params["clustering"]["min_seq_id"]), float(params["clustering"]["coverage"])
    frame = add_clusters_and_splits(frame, min_seq_id, coverage, params["splits"], args.threads)
    check_no_leakage(frame, min_seq_id, coverage, args.threads)
    sync_chain_failures(frame, entries, args.failures_dir)

    with atomic_path(args.out_table, suffix=".parquet") as tmp:
        frame.to_parquet(tmp, index=False)
    write_bytes_atomic(args.out_fasta, fasta_of_passed(frame))
    written = write_query_fastas(frame, args.sequences_dir)
    write_tsv_atomic(args.failures, ["entry", "stage", "reason"],
                     [[f["entry"], f["stage"], f["reason"]] for f in failures])
    counts = frame[frame["passed_filters"]]["split"].value_counts().to_dict()
    log.info("%d chains, %d passed filters, splits %s, %d new query files, %d failed entries",
             len(frame), int(frame["passed_filters"].sum()), counts, written, len(failures))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.entries is None) != (args.parsed_dir is None):
        parser.error("--entries and --parsed-dir go together (or give --parsed files instead)")
    setup_logging("chains")
    try:
        params = merge_params(json.loads(args.params))
    except (ValueError, TypeError) as exc:
        parser.error(f"--params: {exc}")
    try:
        run(args, params)
    except (EmptyDatasetError, LeakageError, EntryListError) as exc:
        log.error("chains stage failed: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
