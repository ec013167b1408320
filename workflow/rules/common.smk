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

from snakemake.logging import logger

from foldworks.fetch.selection import resolve_entries
from foldworks.ids import msa_relpath, normalize_entry, validate_experiment
from foldworks.dagindex import ChainShards, load_chain_shards, msa_digests
from foldworks.msa.index import read_digest_rows, shard_digest
from foldworks.provenance import code_hash
from foldworks.shards import ALL_ENTRIES_KEY, SEQ_SHARD_CHARS, fetch_attempt_token, group_entries, shard_size_note


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
# Entry shards (foldworks.shards): {key: sorted entries}; the key is the divided-layout key (the
# middle two characters) or, with `pdb.shard_chars: 1`, its first character; 0: one shard `all`.
ENTRY_SHARD_CHARS = int(config["pdb"]["shard_chars"])
ENTRY_SHARDS = group_entries(ENTRIES, ENTRY_SHARD_CHARS)
#: The entry shard wildcard of ingest and features: `all` (one shard) or the key's characters.
ENTRY_SHARD_PATTERN = ALL_ENTRIES_KEY if ENTRY_SHARD_CHARS == 0 else r"[a-z0-9]{%d}" % ENTRY_SHARD_CHARS
if (_note := shard_size_note(len(ENTRIES), ENTRY_SHARD_CHARS)):
    logger.warning(_note)
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
    shard=r"[a-z0-9]{1,3}",  # entry shards: ENTRY_SHARD_PATTERN; msa: hex (rules)
    experiment="|".join(EXPERIMENTS),


#: The MSA index (checkpoint msa_index): the features shards' only msa input.
MSA_INDEX = "data/msa/index.tsv"
_CHAINS_DONE: list[str] = []  # the table's path, once checkpoint `chains` is complete


def _chain_index() -> ChainShards:
    """The passed chains of data/chains.parquet by shard (foldworks.dagindex), read once per version.

    Input functions run once per job: re-reading the parquet per job made DAG building
    quadratic. `checkpoints.chains.get()` raises until the checkpoint is complete (that is how a
    caller waits for it) and costs ~1 ms; once it succeeded it stays complete for this process,
    so later calls skip it. Keyed by size and mtime, so a rerun of the checkpoint within one
    Snakemake process is seen; on disk (.snakemake/foldworks/) across processes."""
    if not _CHAINS_DONE:
        _CHAINS_DONE.append(checkpoints.chains.get().output.table)
    stat = Path(_CHAINS_DONE[0]).stat()
    return _read_chain_index(_CHAINS_DONE[0], stat.st_mtime_ns, stat.st_size, MSA_SHARD_CHARS, ENTRY_SHARD_CHARS)


@functools.lru_cache(maxsize=2)
def _read_chain_index(path: str, mtime_ns: int, size: int, msa_chars: int, entry_chars: int) -> ChainShards:
    return load_chain_shards(path, msa_chars, entry_chars=entry_chars)


def manifests(stage_dir: str, keys) -> list[str]:
    """Shard manifests ``<stage_dir>/shards/<key>.tsv`` (see foldworks.shards)."""
    return [f"{stage_dir}/shards/{key}.tsv" for key in keys]


def items_arg(items: list[str] | str, what: str) -> str:
    """A shard's items (a list or already comma-joined) as one shell argument (bounded: Linux's
    128 KiB limit on one argument)."""
    text = items if isinstance(items, str) else ",".join(items)
    if len(text) > 120_000:
        raise ValueError(f"{what}: {text.count(',') + 1} items make a {len(text)}-byte argument; "
                         "use more shard characters")
    return text


def entry_shard_items(wildcards) -> str:
    if wildcards.shard not in ENTRY_SHARDS:
        raise ValueError(f"entry shard {wildcards.shard!r} has no entries in pdb.entries")
    return items_arg(ENTRY_SHARDS[wildcards.shard], f"entry shard {wildcards.shard}")


def features_of(splits) -> list[str]:
    """Feature manifests of the entry shards holding a passed target of ``splits``."""
    index = _chain_index()
    keys = set().union(*(index.shards_of_split.get(split, []) for split in splits))
    return manifests("data/features", sorted(keys))


#: Where the template stage writes per-chain features (templates.smk); read by train and predict.
TEMPLATE_FEATURES_DIR = "data/templates/features"


@functools.lru_cache(maxsize=None)
def _experiment_uses_templates(name: str) -> bool:
    from foldworks.train.run import uses_templates

    return uses_templates(config["experiments"][name])


def experiment_templates(experiment: str) -> bool:
    """Whether ``experiment`` reads template features: the template stage is enabled and its model
    config uses templates."""
    return bool(TEMPLATES_ENABLED) and _experiment_uses_templates(experiment)


def template_manifests_of(experiment: str, splits) -> list[str]:
    """Template feature manifests of the entry shards holding a passed target of ``splits`` when
    ``experiment`` reads templates, else none (so the rule's inputs are as without templates)."""
    if not experiment_templates(experiment):
        return []
    index = _chain_index()
    keys = set().union(*(index.shards_of_split.get(split, []) for split in splits))
    return manifests(TEMPLATE_FEATURES_DIR, sorted(keys))


def templates_arg(experiment: str) -> str:
    """`` --templates-dir DIR`` for an experiment that reads templates, else an empty string."""
    return f" --templates-dir {TEMPLATE_FEATURES_DIR}" if experiment_templates(experiment) else ""


def all_msas(wildcards) -> list[str]:
    return manifests("data/msa", _chain_index().msa)


def msa_shard_checkpoint(wildcards) -> list[str]:
    """No files: evaluating the chain index makes the msa rule depend on checkpoint `chains` through an
    input function, which a remote (Slurm jobstep) job needs before the shard's params may read the
    chain table ("Rule parameter depends on checkpoint ..."). Returning files instead (the query
    FASTA) would make them inputs that DVC does not version, so a pulled clone would rerun."""
    _chain_index()
    return []


def msa_shard_items(wildcards) -> str:
    hashes = _chain_index().msa.get(wildcards.shard)
    if not hashes:
        raise ValueError(f"msa shard {wildcards.shard!r}: no passed chain's sequence hash starts with it")
    return items_arg(hashes, f"msa shard {wildcards.shard}")


def features_shard_inputs(wildcards) -> dict[str, object]:
    """Parse manifest + the MSA index, `ancient` (see workflow/rules/features.smk): not the msa
    shard manifests, whose edges grew with the entries."""
    index = _chain_index()
    if wildcards.shard not in index.features:
        raise ValueError(f"features shard {wildcards.shard!r}: no passed chain of its entries in data/chains.parquet")
    return {"parsed": f"data/parsed/shards/{wildcards.shard}.tsv", "msa_index": ancient(MSA_INDEX)}


def features_msa_digest(wildcards) -> str:
    """The features shard's `msa` param: digest of the MSA index rows of its sequences
    (foldworks.msa.index.shard_digest); ``no-index`` before checkpoint msa_index first ran."""
    digests = _msa_digests()
    return "no-index" if digests is None else digests[wildcards.shard]


def _msa_digests() -> dict[str, str] | None:
    shards = _chain_index()  # first: waits for checkpoint `chains`
    try:
        stat = os.stat(MSA_INDEX)
    except FileNotFoundError:
        return None
    table = Path(_CHAINS_DONE[0]).stat()
    return _read_msa_digests(MSA_INDEX, stat.st_mtime_ns, stat.st_size, table.st_mtime_ns, table.st_size, shards)


@functools.lru_cache(maxsize=2)
def _read_msa_digests(path: str, mtime_ns: int, size: int, table_mtime_ns: int, table_size: int,
                      shards: ChainShards) -> dict[str, str]:
    """Once per index and table version and Snakemake process (the checkpoints rewrite them: new
    mtime); on disk across processes (foldworks.dagindex)."""
    return msa_digests(path, shards, _CHAINS_DONE[0], MSA_SHARD_CHARS, shard_digest, read_digest_rows,
                       entry_chars=ENTRY_SHARD_CHARS)


def features_shard_items(wildcards) -> str:
    return items_arg(_chain_index().features[wildcards.shard], f"features shard {wildcards.shard}")


# Precomputed alignments (msa.smk): the msa shard's digest of its hashes' import-index rows.
def msa_import_digest(wildcards) -> str:
    """The msa shard's digest of its hashes' precomputed-index rows (``no-index`` before it exists)."""
    try:
        stat = os.stat(MSA_IMPORT_INDEX)
    except FileNotFoundError:
        return "no-index"
    digests = _import_digests(stat.st_mtime_ns, stat.st_size)
    return msa_rules.import_shard_digest(digests, _chain_index().msa.get(wildcards.shard, []))


@functools.lru_cache(maxsize=2)
def _import_digests(mtime_ns: int, size: int) -> dict[str, str]:
    return msa_rules.read_import_digests(MSA_IMPORT_INDEX)
