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

import shlex

from foldworks.msa import rules as msa_rules
from foldworks.msa.config import build_spec, resolve_msa_config, search_slice

MSA_CFG = resolve_msa_config(config["msa"])
MSA_DBS = {db["name"]: db for db in MSA_CFG["databases"]}
MSA_MAX_ATTEMPTS = int(MSA_CFG["retries"]) + 1
MSA_SHARD_CHARS = int(MSA_CFG["mmseqs"]["shard_chars"])
MSA_SEARCH_PARAMS = json.dumps(search_slice(MSA_CFG), sort_keys=True)
MSA_SEARCH_CODE = code_hash("msa/search", "msa/postprocess", "msa/a3m", "msa/config", "msa/tools", "msa/fasta",
                            "msa/mmseqs_search", "msa/ffindex")


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


if MSA_CFG["tool"] == "hhblits":

    rule msa:
        input:
            query="data/sequences/{xx}/{seqhash}.fasta",
            dbs=msa_rules.record_paths(MSA_CFG["databases"]),
        output:
            "data/msa/{xx}/{seqhash}.a3m",
        params:
            search=MSA_SEARCH_PARAMS,
            failure=lambda wildcards: f"data/failures/msa/{wildcards.seqhash}.json",
            code=MSA_SEARCH_CODE,
        threads: 1
        retries: MSA_MAX_ATTEMPTS - 1
        resources:
            # not params: a new attempt or timeout must not make finished alignments outdated
            msa_attempt=lambda wildcards, attempt: attempt,
            msa_max_attempts=MSA_MAX_ATTEMPTS,
            msa_timeout_s=lambda wildcards, attempt: str(float(MSA_CFG["timeout_s"]) * 2 ** (attempt - 1)),
        conda:
            "../../envs/hhsuite.yaml"
        log:
            "logs/msa/{xx}/{seqhash}.log",
        shell:
            "python -m foldworks.msa.search --query {input.query} --db-records {input.dbs} --out {output}"
            " --threads {threads} --params {params.search:q} --timeout-s {resources.msa_timeout_s}"
            " --attempt {resources.msa_attempt} --max-attempts {resources.msa_max_attempts}"
            " --failure-record {params.failure} 2>> {log}"

else:

    rule msa_mmseqs_batch:
        input:
            queries=lambda wildcards: msa_rules.shard_queries(chain_table(), wildcards.shard),
            dbs=msa_rules.record_paths(MSA_CFG["databases"]),
        output:
            temp(directory("data/msa_batches/mmseqs/{shard}")),
        wildcard_constraints:
            shard="[0-9a-f]{%d}" % MSA_SHARD_CHARS,
        params:
            search=MSA_SEARCH_PARAMS,
            code=MSA_SEARCH_CODE,
        threads: 2
        retries: MSA_MAX_ATTEMPTS - 1
        resources:
            msa_attempt=lambda wildcards, attempt: attempt,
            msa_max_attempts=MSA_MAX_ATTEMPTS,
            msa_timeout_s=lambda wildcards, attempt: str(float(MSA_CFG["timeout_s"]) * 2 ** (attempt - 1)),
        conda:
            "../../envs/hhsuite.yaml"
        log:
            "logs/msa_batches/mmseqs/{shard}.log",
        shell:
            "python -m foldworks.msa.mmseqs_search --queries {input.queries} --db-records {input.dbs}"
            " --out-dir {output} --threads {threads} --params {params.search:q}"
            " --timeout-s {resources.msa_timeout_s} --attempt {resources.msa_attempt}"
            " --max-attempts {resources.msa_max_attempts} --failure-dir data/failures/msa 2>> {log}"

    rule msa:
        input:
            batch=lambda wildcards: f"data/msa_batches/mmseqs/{wildcards.seqhash[:MSA_SHARD_CHARS]}",
        output:
            "data/msa/{xx}/{seqhash}.a3m",
        localrule: True
        conda:
            "../../envs/hhsuite.yaml"
        log:
            "logs/msa/{xx}/{seqhash}.log",
        shell:
            "cp {input.batch}/{wildcards.seqhash}.a3m {output} 2> {log}"


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
