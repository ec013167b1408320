# Input functions and config slices shared by the rules. No stage logic lives here.

import functools
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

from foldworks.fetch.selection import resolve_entries
from foldworks.ids import msa_relpath, normalize_entry, validate_experiment
from foldworks.provenance import code_hash


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
    xx=r"[0-9a-f]{2}",
    seqhash=r"[0-9a-f]{20}",
    experiment="|".join(EXPERIMENTS),


def chain_table():
    """The chain table (shared: do not modify); evaluating this makes the caller wait for
    checkpoint `chains`."""
    return _chain_index()[0]


_CHAINS_DONE: list[str] = []  # the table's path, once checkpoint `chains` is complete


def _chain_index() -> tuple[pd.DataFrame, dict[tuple[str, str], str]]:
    """(table, {(entry, chain): sequence_hash}) of data/chains.parquet, read once per version.

    Input functions run once per job: at 10^4 chains, re-reading the parquet and scanning the
    table per `features` job made DAG building quadratic. `checkpoints.chains.get()` raises
    until the checkpoint is complete (that is how a caller waits for it) and costs ~1 ms; once it
    succeeded it stays complete for this process, so later calls skip it. Keyed by mtime, so a
    rerun of the checkpoint within one Snakemake process is seen."""
    if not _CHAINS_DONE:
        _CHAINS_DONE.append(checkpoints.chains.get().output.table)
    stat = Path(_CHAINS_DONE[0]).stat()
    return _read_chain_index(_CHAINS_DONE[0], stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _read_chain_index(path: str, mtime_ns: int, size: int):
    table = pd.read_parquet(path)
    hashes = dict(zip(zip(table["entry"], table["chain"]), table["sequence_hash"]))
    return table, hashes


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
    _, hashes = _chain_index()
    seqhash = hashes.get((wildcards.entry, wildcards.chain))
    if seqhash is None:
        raise ValueError(f"target {wildcards.entry}_{wildcards.chain} is not in data/chains.parquet")
    return {
        "parsed": f"data/parsed/{wildcards.entry}.npz",
        "a3m": f"data/{msa_relpath(seqhash)}",
    }


# --- Group jobs at scale (cluster execution) --------------------------------------------------
# profiles/slurm batches the per-entry stages with `groups` + `group-components` (N jobs of one
# stage per Slurm job). Snakemake 9.27's group code (unchanged since 7.x) breaks down at 10^4
# jobs in two ways, both fixed here by replacing three DAG methods (see bench/dryrun.md):
# 1. Snowballing: each chunk of N components is merged *in place* into the chunk's first
#    GroupJob, an object Snakemake's GroupJobFactory caches under its original one-job key. The
#    DAG is postprocessed again (twice in a dry run, after finished jobs in a real run) and that
#    pass chunks the merged groups once more: groups of 100 become one group of every entry
#    (cf. snakemake issues #1217, #1628), and one Slurm job would run 10,000 fetches in a row.
# 2. Quadratic validation: the checks that no dependency path leaves a group and re-enters it
#    walk the whole upstream DAG from every job of a group, once per job *and* per member (for
#    features after the chains checkpoint: 10^4 jobs x 10^2 members x 2*10^4 upstream jobs).
# The replacements build each chunk as a new GroupJob (cached by its full job set), cut chunks in
# a stable order, mutate no cached group, and check each group once by one walk over the jobs
# that still have to run (a finished job cannot take part in a scheduling cycle).


def _component_key(group) -> tuple:
    """Stable sort key of a connected component: its smallest (rule, outputs) pair."""
    return min((job.rule.name, tuple(sorted(map(str, job.output)))) for job in group.jobs)


def _bounded_group_components(dag) -> None:
    """``DAG._update_group_components``: merge at most ``--group-components`` components per group."""
    by_id = {}
    for group in set(dag._group.values()):
        by_id.setdefault(group.groupid, []).append(group)
    for groupid, components in by_id.items():
        lookup_id = dag.workflow.parent_groupids.get(groupid, groupid)
        size = dag.workflow.group_settings.group_components.get(lookup_id, 1)
        if size <= 1 or len(components) <= 1:
            continue
        components.sort(key=_component_key)
        for start in range(0, len(components), size):
            chunk = components[start:start + size]
            if len(chunk) == 1:
                continue
            jobs = [job for component in chunk for job in component.jobs]
            merged = dag.group_job_factory.new(groupid, jobs, dag.workflow.global_resources)
            for job in jobs:
                dag._group[job] = merged
    for group in set(dag._group.values()):
        group.finalize()


def _check_group_cycle(dag, group) -> None:
    """Raise if a path of to-be-run jobs leaves ``group`` and re-enters it (the group would wait
    for itself). One walk over the needrun jobs upstream of the group's outside dependencies."""
    from snakemake.exceptions import WorkflowError

    members = group.jobs
    stack = [dep for job in members for dep in dag._dependencies[job] if dep not in members]
    seen = set(stack)
    while stack:
        outside = stack.pop()
        if not dag.needrun(outside):
            continue
        for dep in dag._dependencies[outside]:
            if dep in members:
                raise WorkflowError(
                    f"Group {group.groupid} depends on itself: rule {outside.rule.name} (outside the"
                    f" group) needs {dep.rule.name} from inside it. Add {outside.rule.name} to the"
                    " group or remove the group's rules from it."
                )
            if dep not in seen:
                seen.add(dep)
                stack.append(dep)


def _check_all_groups(dag) -> None:
    """``DAG._check_groups``: the cycle check once per group (not once per member)."""
    for group in set(dag._group.values()):
        _check_group_cycle(dag, group)


def _install_group_fixes() -> None:
    from snakemake.dag import DAG

    names = ("_update_group_components", "_check_groups", "validate_group")
    if not all(hasattr(DAG, name) for name in names):
        logger.warning("Snakemake changed its group handling: check group sizes in a dry run (-n)")
        return
    DAG._update_group_components = _bounded_group_components
    DAG._check_groups = _check_all_groups
    DAG.validate_group = _check_group_cycle


_install_group_fixes()
