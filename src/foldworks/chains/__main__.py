"""CLI of the ``chains`` stage.

python -m foldworks.chains --parsed data/parsed/*.json --out-table data/chains.parquet \
    --out-fasta data/chains.fasta --sequences-dir data/sequences \
    --failures data/parsed/failures.tsv --params '{...}' --threads 2
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pandas as pd

from foldworks.chains.splits import add_clusters_and_splits, check_no_leakage
from foldworks.chains.table import apply_filters, read_parsed_records, rows_to_frame
from foldworks.fsutil import atomic_path, write_bytes_atomic, write_tsv_atomic
from foldworks.logutil import setup_logging

log = logging.getLogger("foldworks.chains")

DEFAULTS = {
    "filters": {"molecule_types": ["protein"], "length_min": 20, "length_max": 300,
                "min_resolved_fraction": 0.5},
    "clustering": {"min_seq_id": 0.4, "coverage": 0.8},
    "splits": {"val": 0.1, "test": 0.15, "seed": 0},
}


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m foldworks.chains", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parsed", nargs="+", required=True, help="parse-stage JSON files")
    parser.add_argument("--out-table", required=True, type=Path)
    parser.add_argument("--out-fasta", required=True, type=Path)
    parser.add_argument("--sequences-dir", required=True, type=Path)
    parser.add_argument("--failures", required=True, type=Path)
    parser.add_argument("--params", default="{}", help="config slice `chains` as JSON")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    setup_logging("chains")

    params = {**DEFAULTS, **json.loads(args.params)}
    rows, failures = read_parsed_records(args.parsed)
    for failure in failures:
        log.warning("entry %s skipped: %s", failure["entry"], failure["reason"])
    frame = apply_filters(rows_to_frame(rows), params["filters"])
    clustering, splits = params["clustering"], params["splits"]
    frame = add_clusters_and_splits(
        frame, float(clustering["min_seq_id"]), float(clustering["coverage"]),
        {"val": float(splits["val"]), "test": float(splits["test"])}, int(splits["seed"]), args.threads)
    check_no_leakage(frame)

    with atomic_path(args.out_table, suffix=".parquet") as tmp:
        frame.to_parquet(tmp, index=False)
    write_bytes_atomic(args.out_fasta, fasta_of_passed(frame))
    written = write_query_fastas(frame, args.sequences_dir)
    write_tsv_atomic(args.failures, ["entry", "stage", "reason"],
                     [[f["entry"], f["stage"], f["reason"]] for f in failures])
    counts = frame[frame["passed_filters"]]["split"].value_counts().to_dict()
    log.info("%d chains, %d passed filters, splits %s, %d new query files, %d failed entries",
             len(frame), int(frame["passed_filters"].sum()), counts, written, len(failures))


if __name__ == "__main__":
    main()
