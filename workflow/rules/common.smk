# Input functions and config slices shared by the rules. No stage logic lives here.

import functools
import json
import os
import sys
from pathlib import Path

SRC_DIR = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC_DIR)
# Jobs run `python -m foldworks.<stage>` from whatever env provides the dependencies (the
# project's .venv, a conda env from envs/, a cluster module): put the package on their path.
shell.prefix(f"set -euo pipefail; export PYTHONPATH='{SRC_DIR}'${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")

import pandas as pd
from snakemake.logging import logger

from foldworks.fetch.selection import resolve_entries
from foldworks.ids import msa_relpath, normalize_entry, validate_experiment
from foldworks.msa.index import read_digest_rows, shard_digest
from foldworks.provenance import code_hash
from foldworks.shards import SEQ_SHARD_CHARS, fetch_attempt_token, group_entries


def read_entries(pdb) -> tuple[list[str], list[dict]]:
    """Config ``pdb`` slice -> (selected IDs, refused/obsolete/absent items as failure-report rows).

    Not fatal: invalid, obsolete or missing entries are skipped and logged (foldworks.fetch.selection)."""
    result = resolve_entries(pdb, workflow.basedir)
    for note in result.notes:
        logger.info(note)
    for problem in result.problems:
        logger.warning(problem["reason"])
    return result.entries, result.problems


def slice_json(*keys: str) -> str:
    """The named top-level config sections as one canonical JSON string (for `params:`)."""
    if len(keys) == 1:
        return json.dumps(config[keys[0]], sort_keys=True)
    return json.dumps({key: config[key] for key in keys}, sort_keys=True)


ENTRIES, ENTRY_PROBLEMS = read_entries(config["pdb"])
# Entry shards (foldworks.shards): {divided-layout key (middle two characters): sorted entries}.
ENTRY_SHARDS = group_entries(ENTRIES)
EXPERIMENTS = [validate_experiment(name) for name in config["experiments"]]
# Task of each experiment's family (structure / design); mismatched settings, unknown tasks and
# bad init_from chains fail here, at config load, naming the experiment (imports torch).
from foldworks.train.experiments import design_params, experiment_tasks

EXPERIMENT_TASKS = experiment_tasks(config["experiments"])
STRUCTURE_EXPERIMENTS = [name for name in EXPERIMENTS if EXPERIMENT_TASKS[name] == "structure"]
DESIGN_EXPERIMENTS = [name for name in EXPERIMENTS if EXPERIMENT_TASKS[name] == "design"]


def experiment_pattern(names) -> str:
    """Wildcard regex matching exactly ``names`` (matches nothing when empty)."""
    return "|".join(names) if names else "(?!x)x"


wildcard_constraints:
    entry=r"[0-9][a-z0-9]{3}",
    chain=r"[A-Za-z0-9]{1,4}",
    shard=r"[a-z0-9]{1,3}",
    experiment="|".join(EXPERIMENTS),


def chain_table():
    """The chain table (shared: do not modify); evaluating this makes the caller wait for
    checkpoint `chains`."""
    return _chain_index()[0]


#: The MSA index (checkpoint msa_index): the features shards' only msa input.
MSA_INDEX = "data/msa/index.tsv"
_CHAINS_DONE: list[str] = []  # the table's path, once checkpoint `chains` is complete


def _chain_index() -> tuple[pd.DataFrame, "ShardIndex"]:
    """(table, its shard index) of data/chains.parquet, read once per version.

    Input functions run once per job: re-reading the parquet per job made DAG building
    quadratic. `checkpoints.chains.get()` raises until the checkpoint is complete (that is how a
    caller waits for it) and costs ~1 ms; once it succeeded it stays complete for this process,
    so later calls skip it. Keyed by mtime, so a rerun of the checkpoint within one Snakemake
    process is seen."""
    if not _CHAINS_DONE:
        _CHAINS_DONE.append(checkpoints.chains.get().output.table)
    stat = Path(_CHAINS_DONE[0]).stat()
    return _read_chain_index(_CHAINS_DONE[0], stat.st_mtime_ns, stat.st_size, MSA_SHARD_CHARS)


class ShardIndex:
    """The passed chains of the table, by shard: built once per table version.

    One plain pass over the rows: pandas groupby over the table's pyarrow strings took ~4 s at
    690,000 chains (230,000 entries), this ~2 s (issue 16, no-op dry run)."""

    def __init__(self, table: pd.DataFrame, msa_chars: int) -> None:
        passed = table[table["passed_filters"].astype(bool)]
        columns = [passed[name].astype(str).tolist() for name in ("entry", "chain", "sequence_hash", "split")]
        features, shards_of_split, msa, hashes_of = {}, {}, {}, {}
        for entry, chain, seq_hash, split in zip(*columns):
            key = entry[1:3]
            features.setdefault(key, []).append(f"{entry}_{chain}:{seq_hash}")
            shards_of_split.setdefault(split, set()).add(key)
            hashes_of.setdefault(key, set()).add(seq_hash)
            msa.setdefault(seq_hash[:msa_chars], set()).add(seq_hash)
        #: entry shard -> "target:hash" items (features), sorted
        self.features = {key: sorted(features[key]) for key in sorted(features)}
        #: split -> entry shards with a passed target of that split
        self.shards_of_split = shards_of_split
        #: msa shard -> sorted unique hashes
        self.msa = {key: sorted(msa[key]) for key in sorted(msa)}
        #: entry shard -> unique sequence hashes of its targets (the features shard's msa digest)
        self.hashes_of_entry_shard = hashes_of


@functools.lru_cache(maxsize=2)
def _read_chain_index(path: str, mtime_ns: int, size: int, msa_chars: int):
    table = pd.read_parquet(path)
    return table, ShardIndex(table, msa_chars)


def manifests(stage_dir: str, keys) -> list[str]:
    """Shard manifests ``<stage_dir>/shards/<key>.tsv`` (see foldworks.shards)."""
    return [f"{stage_dir}/shards/{key}.tsv" for key in keys]


def items_arg(items: list[str], what: str) -> str:
    """A shard's items as one comma-separated shell argument (bounded: Linux's 128 KiB limit)."""
    text = ",".join(items)
    if len(text) > 120_000:
        raise ValueError(f"{what}: {len(items)} items make a {len(text)}-byte argument; use more shard characters")
    return text


def entry_shard_items(wildcards) -> str:
    if wildcards.shard not in ENTRY_SHARDS:
        raise ValueError(f"entry shard {wildcards.shard!r} has no entries in pdb.entries")
    return items_arg(ENTRY_SHARDS[wildcards.shard], f"entry shard {wildcards.shard}")


def features_of(splits) -> list[str]:
    """Feature manifests of the entry shards holding a passed target of ``splits``."""
    index = _chain_index()[1]
    keys = set().union(*(index.shards_of_split.get(split, set()) for split in splits))
    return manifests("data/features", sorted(keys))


def all_msas(wildcards) -> list[str]:
    return manifests("data/msa", _chain_index()[1].msa)


def msa_shard_checkpoint(wildcards) -> list[str]:
    """No files: evaluating the chain index makes the msa rule depend on checkpoint `chains` through an
    input function, which a remote (Slurm jobstep) job needs before the shard's params may read the
    chain table ("Rule parameter depends on checkpoint ..."). Returning files instead (the query
    FASTA) would make them inputs that DVC does not version, so a pulled clone would rerun."""
    _chain_index()
    return []


def msa_shard_items(wildcards) -> str:
    hashes = _chain_index()[1].msa.get(wildcards.shard)
    if not hashes:
        raise ValueError(f"msa shard {wildcards.shard!r}: no passed chain's sequence hash starts with it")
    return items_arg(hashes, f"msa shard {wildcards.shard}")


def features_shard_inputs(wildcards) -> dict[str, object]:
    """Parse manifest + the MSA index, `ancient` (see workflow/rules/features.smk): not the msa
    shard manifests, whose edges grew with the entries (issue 16)."""
    index = _chain_index()[1]
    if wildcards.shard not in index.features:
        raise ValueError(f"features shard {wildcards.shard!r}: no passed chain of its entries in data/chains.parquet")
    return {"parsed": f"data/parsed/shards/{wildcards.shard}.tsv", "msa_index": ancient(MSA_INDEX)}


def features_msa_digest(wildcards) -> str:
    """The features shard's `msa` param: digest of the MSA index rows of its sequences
    (foldworks.msa.index.shard_digest); ``no-index`` before checkpoint msa_index first ran."""
    rows = _msa_index_rows()
    if rows is None:
        return "no-index"
    return shard_digest(rows, _chain_index()[1].hashes_of_entry_shard[wildcards.shard])


def _msa_index_rows() -> dict[str, str] | None:
    try:
        stat = os.stat(MSA_INDEX)
    except FileNotFoundError:
        return None
    return _read_msa_index(MSA_INDEX, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _read_msa_index(path: str, mtime_ns: int, size: int) -> dict[str, str]:
    """Read once per index version and Snakemake process (the checkpoint rewrites it: new mtime)."""
    return read_digest_rows(path)


def features_shard_items(wildcards) -> str:
    return items_arg(_chain_index()[1].features[wildcards.shard], f"features shard {wildcards.shard}")
