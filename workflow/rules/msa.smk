# Stage 4: MSA databases, then one alignment per unique sequence hash into the hash-sharded
# store data/msa/<xx>/<hash>.a3m (the same a3m contract with `msa.tool: hhblits` or `mmseqs`).
#
# Databases (`msa.databases`, searched in order, merged into one a3m) are built from FASTA
# (`msa_db`) or fingerprinted when they already exist (`msa_db_external`, e.g. UniRef30). Both
# write a small record data/msa_db/<name>.json whose `content_sha256` hashes the database
# files. The msa jobs take only that record as input, never the large database files (whose
# mtimes would rerun every alignment): a rebuilt byte-identical database rewrites an identical
# record, and Snakemake ignores a newer input of <= 1 MB whose checksum is unchanged; a changed
# database changes the record and reruns every alignment. The database rules are checkpoints
# so that, when one runs, Snakemake re-evaluates the msa jobs after it instead of rerunning
# them because an upstream job ran. The job reads the content hash from the record (and writes
# it into the a3m metadata). A database built from `fasta` files does not depend on the chain
# table, so adding entries schedules MSA jobs only for the new sequences.
# The features stage reads the MSAs through one index, checkpoint `msa_index` (end of this file).

import shlex

from foldworks.msa import rules as msa_rules
from foldworks.msa.config import build_spec, index_sources, resolve_msa_config, search_slice, uses_search

MSA_CFG = resolve_msa_config(config["msa"])
MSA_SOURCES = index_sources(MSA_CFG)
MSA_SEARCHES = uses_search(MSA_CFG)
MSA_IMPORT_INDEX = "data/msa_import/index.tsv"
MSA_DBS = {db["name"]: db for db in MSA_CFG["databases"]}
MSA_MAX_ATTEMPTS = int(MSA_CFG["retries"]) + 1
MSA_SEARCH_PARAMS = json.dumps(search_slice(MSA_CFG), sort_keys=True)
# Two literal calls (a test reads every code-hash call of the rules as literals): with precomputed
# sources the msa shards also hash the import modules.
MSA_SEARCH_CODE = (
    code_hash("msa/search", "msa/postprocess", "msa/a3m", "msa/config", "msa/tools", "msa/fasta",
              "msa/mmseqs_search", "msa/ffindex", "shards/stages/common", "shards/stages/msa",
              "msa/importer", "msa/precomputed", "msa/stockholm")
    if MSA_SOURCES else
    code_hash("msa/search", "msa/postprocess", "msa/a3m", "msa/config", "msa/tools", "msa/fasta",
              "msa/mmseqs_search", "msa/ffindex", "shards/stages/common", "shards/stages/msa")
)


checkpoint msa_db:
    input:
        fasta=lambda wildcards: MSA_DBS[wildcards.name]["fasta"] or ["data/chains.fasta"],
    output:
        multiext(
            "data/msa_db/{name}",
            "_a3m.ffdata", "_a3m.ffindex", "_cs219.ffdata", "_cs219.ffindex",
            "_mmseqs", "_mmseqs.index", "_mmseqs.dbtype", "_mmseqs_h", "_mmseqs_h.index",
            "_mmseqs_h.dbtype", "_mmseqs.lookup", "_mmseqs.source",
        ),
        provenance="data/msa_db/{name}.provenance.json",
        record="data/msa_db/{name}.json",
    wildcard_constraints:
        name=msa_rules.name_regex(MSA_CFG["databases"], external=False),
    params:
        spec=lambda wildcards: json.dumps(build_spec(MSA_DBS[wildcards.name]), sort_keys=True),
        args=lambda wildcards: shlex.join(msa_rules.build_args(MSA_DBS[wildcards.name])),
        code=code_hash("msa/build_db", "msa/cluster", "msa/ffindex", "msa/tools", "msa/fasta"),
    threads: 2
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/msa_db/{name}.log",
    shell:
        "python -m foldworks.msa.build_db --fasta {input.fasta} --out-prefix data/msa_db/{wildcards.name}"
        " {params.args} --record {output.record} --threads {threads} 2> {log}"


checkpoint msa_db_external:
    output:
        record="data/msa_db/{name}.json",
    wildcard_constraints:
        name=msa_rules.name_regex(MSA_CFG["databases"], external=True),
    params:
        args=lambda wildcards: shlex.join(msa_rules.external_args(MSA_DBS[wildcards.name])),
        stamp=lambda wildcards: msa_rules.external_stamp(MSA_DBS[wildcards.name]),
        code=code_hash("msa/build_db"),
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/msa_db/{name}.log",
    shell:
        "python -m foldworks.msa.build_db --external --name {wildcards.name} {params.args}"
        " --record {output.record} 2> {log}"


# One job per sequence-hash shard (data/msa/shards/<prefix>.tsv): the passed chains' unique
# sequences whose hash starts with the prefix (`msa.shard_chars` hex characters; 2: 256 shards
# of ~470 sequences at ~120,000; 3: 4,096 shards of ~30, at ~2.4 ms of DAG building per
# job on every `snakemake` call; with mmseqs `msa.mmseqs.shard_chars`, as its batches
# profit from size). A job runs its queries one after another, each hhblits with {threads} CPUs:
# on a cluster give it more (`--set-threads msa=8`, README "Shards"). Each unique sequence is
# aligned exactly once; a sequence is searched again only when
# its query, a database record or the search code/params changed. A failing search is retried
# inside the job (timeout doubled per attempt, `msa.retries`), then recorded: failure record +
# placeholder a3m, a `failed` manifest row, and the job still succeeds. Snakemake's own
# `retries` (profiles) only cover a killed job (memory, time limit); its items done so far are
# kept (data/msa/shards/.<prefix>.partial.tsv). The shard's hashes are a param, so a new entry
# reruns only the shards that gain a sequence (the queries are content-addressed, never rewritten).
MSA_SHARD_CHARS = int(MSA_CFG["shard_chars"] if MSA_CFG["tool"] == "hhblits" else MSA_CFG["mmseqs"]["shard_chars"])


# Precomputed alignments (`msa.precomputed`, docs/alignments.md): checkpoint msa_import reads every
# source once into data/msa_import/index.tsv (one row per query sequence hash, with each file's
# SHA-256). It reruns when a source file's path, size or mtime changes (`stamp`, a walk of the
# sources at DAG time); the msa shards take the index `ancient` plus a param digest of exactly
# their hashes' rows, so a changed alignment reruns only the shard (and inside it the hash) whose
# row changed, once the checkpoint has run. Imported hashes make no search tool call.
if MSA_SOURCES:

    checkpoint msa_import:
        output:
            index=MSA_IMPORT_INDEX,
            problems="data/msa_import/problems.tsv",
        params:
            sources=json.dumps(MSA_SOURCES, sort_keys=True),
            stamp=lambda wildcards: ",".join(msa_rules.source_stamps(MSA_SOURCES)),
            code=code_hash("msa/precomputed", "msa/stockholm", "msa/a3m"),
        conda:
            "../../envs/hhsuite.yaml"
        log:
            "logs/msa_import.log",
        shell:
            "python -m foldworks.msa.precomputed --sources {params.sources:q} --out {output.index:q}"
            " --problems {output.problems:q} 2> {log:q}"


# Without precomputed sources the msa rule's command and params are exactly those of a search-only
# workflow (a changed command or param set would rerun every finished shard).
MSA_SOURCE_ARGS = "".join((
    "--db-records {input.dbs} " if MSA_SEARCHES else "",
    f"--import-index {MSA_IMPORT_INDEX} --chain-table data/chains.parquet " if MSA_SOURCES else ""))
MSA_IMPORT_PARAMS = {"imported": msa_import_digest} if MSA_SOURCES else {}


rule msa:
    input:
        dbs=msa_rules.record_paths(MSA_CFG["databases"]) if MSA_SEARCHES else [],
        imported=[ancient(MSA_IMPORT_INDEX)] if MSA_SOURCES else [],
        checkpoint=msa_shard_checkpoint,
    output:
        manifest="data/msa/shards/{shard}.tsv",
    wildcard_constraints:
        shard="[0-9a-f]{%d}" % MSA_SHARD_CHARS,
    params:
        members=msa_shard_items,
        search=MSA_SEARCH_PARAMS,
        tool=MSA_CFG["tool"],
        code=MSA_SEARCH_CODE,
        **MSA_IMPORT_PARAMS,
    threads: 1 if MSA_CFG["tool"] == "hhblits" else 2
    resources:
        # not params: a new timeout or number of attempts must not make finished shards outdated
        msa_timeout_s=str(float(MSA_CFG["timeout_s"])),
        msa_max_attempts=MSA_MAX_ATTEMPTS,
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/msa/{shard}.log",
    shell:
        "python -m foldworks.shards msa --tool {params.tool} --key {wildcards.shard} --items {params.members}"
        f" --manifest {{output.manifest:q}} {MSA_SOURCE_ARGS}--params {{params.search:q}} --code {{params.code}}"
        " --threads {threads} --timeout-s {resources.msa_timeout_s} --max-attempts {resources.msa_max_attempts}"
        " --sequences-dir data/sequences --msa-dir data/msa --work-dir data/msa_batches/mmseqs/{wildcards.shard}"
        " --failures-dir data/failures 2>> {log:q}"


rule msa_summary:
    input:
        table="data/chains.parquet",
        a3m=all_msas,
    output:
        "data/msa/summary.tsv",
    params:
        code=code_hash("msa/summary", "msa/a3m"),
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/msa_summary.log",
    shell:
        "python -m foldworks.msa.summary --table {input.table} --data-dir data --out {output} 2> {log}"


# The MSA index (foldworks.msa.index): every msa shard's rows in one file, the only msa input of
# the features shards (listing each features shard's msa manifests made ~650,000
# features->msa edges at 230,000 entries, resolved on every `snakemake` call, no-op included;
# this is <= 256 edges at msa.shard_chars 2). A checkpoint, so that when it has run Snakemake re-evaluates the
# features shards (update_checkpoint_dependencies): each one's `msa` param is a digest of
# exactly its sequences' index rows, read at DAG time, so a changed a3m reruns exactly the
# features shards whose chains use it, and no other (their index input is `ancient`).
# Consequence: while this checkpoint will rerun, a dry run shows the msa shards and it, but no
# features shard and nothing downstream (as behind `chains`); they are planned once it has run.
checkpoint msa_index:
    input:
        table="data/chains.parquet",
        manifests=all_msas,
    output:
        index=MSA_INDEX,
    params:
        code=code_hash("msa/index", "shards/__init__"),  # the manifest helpers it imports, not the planners
    localrule: True  # reads <= 4,096 small manifests; on the critical path (msa -> features)
    conda:
        "../../envs/hhsuite.yaml"  # the msa package's env (tests/test_envs.py), as msa_summary
    log:
        "logs/msa_index.log",
    shell:
        "python -m foldworks.msa.index --table {input.table} --shards-dir data/msa/shards"
        " --shard-chars %d --out {output.index:q} 2> {log:q}" % MSA_SHARD_CHARS
