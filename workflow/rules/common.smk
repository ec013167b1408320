# Input functions and config slices shared by the rules. No stage logic lives here.

import json
import sys
from pathlib import Path

SRC_DIR = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC_DIR)
# Jobs run `python -m foldworks.<stage>` from whatever env provides the dependencies (the
# project's .venv, a conda env from envs/, a cluster module): put the package on their path.
shell.prefix(f"set -euo pipefail; export PYTHONPATH='{SRC_DIR}'${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")

import pandas as pd
from snakemake.logging import logger

from foldworks.ids import msa_relpath, normalize_entry, validate_experiment
from foldworks.provenance import code_hash


def read_entries(spec) -> list[str]:
    """Config ``pdb: entries`` (a list, or a file of IDs) -> validated, de-duplicated lower-case IDs."""
    if isinstance(spec, str):
        path = Path(spec) if Path(spec).exists() else Path(workflow.basedir) / spec
        lines = path.read_text().splitlines()
        spec = [line.split("#")[0].strip() for line in lines]
        spec = [item for item in spec if item]
    entries = []
    for raw in spec:
        entry = normalize_entry(raw)
        if entry in entries:
            logger.warning(f"entry {raw!r} listed twice in pdb.entries; using it once")
            continue
        entries.append(entry)
    return entries


def slice_json(*keys: str) -> str:
    """The named top-level config sections as one canonical JSON string (for `params:`)."""
    if len(keys) == 1:
        return json.dumps(config[keys[0]], sort_keys=True)
    return json.dumps({key: config[key] for key in keys}, sort_keys=True)


ENTRIES = read_entries(config["pdb"]["entries"])
EXPERIMENTS = [validate_experiment(name) for name in config["experiments"]]
MSA_DB_PREFIX = config["msa"]["database"] or "data/msa_db/foldworks"
MSA_DB_FILES = (
    []
    if config["msa"]["database"]
    else [f"{MSA_DB_PREFIX}_{kind}.{ext}" for kind in ("a3m", "cs219") for ext in ("ffdata", "ffindex")]
)


wildcard_constraints:
    entry=r"[0-9][a-z0-9]{3}",
    chain=r"[A-Za-z0-9]{1,4}",
    xx=r"[0-9a-f]{2}",
    seqhash=r"[0-9a-f]{20}",
    experiment="|".join(EXPERIMENTS),


def chain_table():
    """The chain table; evaluating this makes the caller wait for checkpoint `chains`."""
    return pd.read_parquet(checkpoints.chains.get().output.table)


def targets_in(splits) -> list[str]:
    table = chain_table()
    chosen = table[table["passed_filters"] & table["split"].isin(splits)]
    return sorted(f"{e}_{c}" for e, c in zip(chosen["entry"], chosen["chain"]))


def features_of(splits) -> list[str]:
    return [f"data/features/{target}.npz" for target in targets_in(splits)]


def all_msas(wildcards) -> list[str]:
    table = chain_table()
    hashes = sorted(set(table.loc[table["passed_filters"], "sequence_hash"]))
    return [f"data/{msa_relpath(h)}" for h in hashes]


def features_inputs(wildcards) -> dict[str, str]:
    table = chain_table()
    row = table[(table["entry"] == wildcards.entry) & (table["chain"] == wildcards.chain)]
    if row.empty:
        raise ValueError(f"target {wildcards.entry}_{wildcards.chain} is not in data/chains.parquet")
    return {
        "parsed": f"data/parsed/{wildcards.entry}.npz",
        "a3m": f"data/{msa_relpath(row['sequence_hash'].iloc[0])}",
    }
