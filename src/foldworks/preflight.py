"""Pre-training check: is every train/val chain's data present and consistent?

For each chain of ``data/chains.parquet`` that passed the filters and is in a checked split
(train and val by default), the chain table's sequence is compared with what training reads:

==============================  ============================================================
reason                          meaning
==============================  ============================================================
``table_inconsistent``          the table's ``sequence_hash``/``length`` disagree with its sequence
``structure_missing``           ``data/parsed/<entry>.npz`` lacks the chain
``structure_mismatch``          the parsed chain's residues differ from the table's sequence
``msa_missing``                 no ``data/msa/<xx>/<hash>.a3m``
``msa_failed``                  the a3m is a failed placeholder and single-sequence fallback is off
``msa_mismatch``                the a3m's query row is not the table's sequence
``template_missing``            templates enabled, no readable ``data/templates/features/<target>.npz``
``template_mismatch``           its ``template_aatype`` has another residue count than the chain
``features_missing``            no ``data/features/<target>.npz``
``features_mismatch``           its ``sequence``, ``sequence_hash`` or length differs from the table
==============================  ============================================================

Every reason stops a training run. Prints the count per reason and a TSV (``target split reason
detail``); exit status 1 when any row is reported, 0 otherwise. Snakemake-free::

    python -m foldworks.preflight --configfile config.yaml [--data-dir data] [--splits train,val] [--out rows.tsv]
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
import yaml

from foldworks.constants import RESTYPES
from foldworks.ids import msa_relpath, sequence_hash
from foldworks.msa.a3m import A3MError, a3m_records, match_columns, read_header

COLUMNS = ("target", "split", "reason", "detail")
Problem = tuple[str, str]  # (reason, detail)


def decode(aatype: np.ndarray) -> str:
    """One-letter sequence of residue indices (``RESTYPES``; anything else ``X``)."""
    return "".join(RESTYPES[i] if 0 <= i < len(RESTYPES) else "X" for i in np.asarray(aatype).tolist())


def check_table(chain: pd.Series) -> Iterator[Problem]:
    sequence = str(chain["sequence"])
    if chain["sequence_hash"] != sequence_hash(sequence) or int(chain["length"]) != len(sequence):
        yield "table_inconsistent", (f"hash {chain['sequence_hash']} length {chain['length']}, sequence gives "
                                     f"{sequence_hash(sequence)} length {len(sequence)}")


def check_structure(chain: pd.Series, data: Path) -> Iterator[Problem]:
    path = data / "parsed" / f"{chain['entry']}.npz"
    key = f"{chain['chain']}/aatype"
    try:
        with np.load(path, allow_pickle=False) as arrays:
            aatype = arrays[key] if key in arrays.files else None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        yield "structure_missing", f"{path}: {exc}"
        return
    if aatype is None:
        yield "structure_missing", f"{path} has no chain {chain['chain']}"
    elif decode(aatype) != chain["sequence"]:
        yield "structure_mismatch", f"{path}: {len(aatype)} residues, hash {sequence_hash(decode(aatype))}"


def check_msa(chain: pd.Series, data: Path, allow_fallback: bool) -> Iterator[Problem]:
    path = data / msa_relpath(str(chain["sequence_hash"]))
    if not path.is_file():
        yield "msa_missing", str(path)
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        meta, records = read_header(text) or {}, a3m_records(text)
    except A3MError as exc:
        yield "msa_mismatch", f"{path}: {exc}"
        return
    query = match_columns(records[0][1]) if records else ""
    if query != chain["sequence"]:
        yield "msa_mismatch", f"{path}: query {len(query)} residues, hash {sequence_hash(query) if query else '-'}"
    elif meta.get("status") == "failed" and not allow_fallback:
        yield "msa_failed", f"{path}: {meta.get('reason', 'search failed')}"


def check_features(chain: pd.Series, data: Path, target: str) -> Iterator[Problem]:
    path = data / "features" / f"{target}.npz"
    try:
        with np.load(path, allow_pickle=False) as arrays:
            sequence, seq_hash = str(arrays["sequence"]), str(arrays["sequence_hash"])
            length = len(arrays["aatype"])
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        yield "features_missing", f"{path}: {exc}"
        return
    if (sequence, seq_hash, length) != (chain["sequence"], chain["sequence_hash"], len(chain["sequence"])):
        yield "features_mismatch", f"{path}: hash {seq_hash} length {length}, sequence hash {sequence_hash(sequence)}"


def check_templates(chain: pd.Series, data: Path, target: str) -> Iterator[Problem]:
    """The chain's template features (``data/templates/features/<target>.npz``): present, readable,
    and on the chain's residue axis (``template_aatype [T, N]`` with ``N`` = the sequence length)."""
    path = data / "templates" / "features" / f"{target}.npz"
    if not path.exists():
        yield "template_missing", f"no {path}"
        return
    try:
        with np.load(path, allow_pickle=False) as arrays:
            n_res = arrays["template_aatype"].shape[1]
    except (OSError, EOFError, KeyError, ValueError, IndexError, zipfile.BadZipFile) as exc:
        yield "template_missing", f"{path}: {exc}"
        return
    if n_res != len(chain["sequence"]):
        yield "template_mismatch", f"{path}: {n_res} residues, chain {len(chain['sequence'])}"


def templates_enabled(config: dict[str, Any]) -> bool:
    """Whether the config turns the template stage on (a ``templates`` section not disabled)."""
    section = config.get("templates")
    return isinstance(section, dict) and bool(section.get("enabled", True))


def check_chains(table: pd.DataFrame, data: Path, splits: Sequence[str], allow_fallback: bool,
                 templates: bool) -> list[tuple[str, str, str, str]]:
    """Rows ``(target, split, reason, detail)`` for the passed chains of ``splits``."""
    chosen = table[table["passed_filters"].astype(bool) & table["split"].isin(list(splits))]
    rows = []
    for _, chain in chosen.sort_values(["entry", "chain"]).iterrows():
        target = f"{chain['entry']}_{chain['chain']}"
        problems = [*check_table(chain), *check_structure(chain, data), *check_msa(chain, data, allow_fallback),
                    *check_features(chain, data, target)]
        if templates:
            problems += check_templates(chain, data, target)
        rows += [(target, str(chain["split"]), reason, detail) for reason, detail in problems]
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m foldworks.preflight", description=__doc__.split("\n")[0])
    parser.add_argument("--configfile", required=True, help="the workflow config (msa and templates sections)")
    parser.add_argument("--data-dir", default="data", help="the run's data folder")
    parser.add_argument("--splits", default="train,val", help="comma-separated splits to check")
    parser.add_argument("--out", help="write the TSV here instead of standard output")
    args = parser.parse_args(argv)
    config = yaml.safe_load(Path(args.configfile).read_text(encoding="utf-8")) or {}
    data = Path(args.data_dir)
    table_path = data / "chains.parquet"
    if not table_path.is_file():
        print(f"preflight: {table_path} does not exist (run the chains stage first)", file=sys.stderr)
        return 1
    allow = bool((config.get("msa") or {}).get("allow_single_sequence_fallback", False))
    templates = templates_enabled(config)
    rows = check_chains(pd.read_parquet(table_path), data, args.splits.split(","), allow, templates)
    for reason, count in sorted(Counter(row[2] for row in rows).items()):
        print(f"preflight: {reason}: {count}", file=sys.stderr)
    text = "\t".join(COLUMNS) + "\n" + "".join("\t".join(row) + "\n" for row in rows)
    if args.out:
        from foldworks import fsutil

        fsutil.write_bytes_atomic(args.out, text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    print(f"preflight: {len(rows)} problem(s)" if rows else "preflight: every chain is ready", file=sys.stderr)
    return 1 if rows else 0


if __name__ == "__main__":
    raise SystemExit(main())
