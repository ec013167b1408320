# Stage 4b: templates (docs/templates.md). Every protein chain of the parsed entries is a template;
# each unique query sequence is searched once with hhsearch, per template database segment; each
# query chain then gets its own templates (other entries, released strictly before it).
#
# Database: checkpoint template_db splits the chains' unique sequences into segments by hash
# prefix (`templates.segment_chars`) and writes one small record per segment whose
# content_sha256 changes exactly when a sequence enters or leaves the segment. The search jobs
# take only their segment's record as input: a rebuild that leaves a segment's sequences as they
# were rewrites an identical record, which Snakemake ignores (checksum of a small input), and
# because the rule is a checkpoint the search jobs are re-evaluated after it ran.
#
# Search: one job per (msa shard, segment): the shard's query hashes against the segment. So a
# new entry reruns the row of each msa shard that gains a query (all segments, new queries
# only: the other rows are kept per query) and the column of each segment that gains a template
# sequence (every query against that segment only); nothing else. Hits are cached per query
# hash and segment (data/templates/hits/<segment>/<xx>/<hash>.tsv).
#
# Selection (one local job, cheap) and features (one job per entry shard) follow.

import shlex

from foldworks.templates.config import resolve_templates_config, search_slice, segment_keys, select_slice

TEMPLATES_CFG = resolve_templates_config(config.get("templates"))
TEMPLATES_ENABLED = bool(TEMPLATES_CFG["enabled"])
TEMPLATE_SEGMENT_CHARS = int(TEMPLATES_CFG["segment_chars"])
TEMPLATE_SEGMENTS = segment_keys(TEMPLATE_SEGMENT_CHARS)
# An existing pdb_seqres.txt + mmCIF directory instead of the parsed chains (docs/templates.md).
TEMPLATE_SEQRES = TEMPLATES_CFG["pdb_seqres"]
TEMPLATE_MMCIF_ARG = f"--mmcif-dir {shlex.quote(TEMPLATES_CFG['mmcif_dir'])}" if TEMPLATE_SEQRES else ""
TEMPLATE_PARSED_DIR = "data/templates/parsed" if TEMPLATE_SEQRES else "data/parsed"


# rule all's input: the template features manifest of every entry shard with a passed chain.
TEMPLATE_FEATURE_MANIFESTS = lambda wildcards: (
    manifests("data/templates/features", sorted(_chain_index().features)) if TEMPLATES_ENABLED else []
)


checkpoint template_db:
    input:
        source=TEMPLATE_SEQRES or "data/chains.parquet",
    output:
        records=expand("data/templates/db/{segment}.json", segment=TEMPLATE_SEGMENTS),
        members="data/templates/db/members.tsv",
    params:
        segment_chars=TEMPLATE_SEGMENT_CHARS,
        source="--seqres" if TEMPLATE_SEQRES else "--table",
        code=code_hash("templates/db", "templates/seqres", "templates/config", "msa/ffindex", "msa/tools"),
    threads: 2
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/templates/db.log",
    shell:
        "python -m foldworks.templates.db {params.source} {input.source:q} --out-dir data/templates/db"
        " --segment-chars {params.segment_chars} --threads {threads} 2> {log:q}"


rule template_search:
    input:
        msa="data/msa/shards/{shard}.tsv",
        db="data/templates/db/{segment}.json",
        checkpoint=msa_shard_checkpoint,
    output:
        manifest="data/templates/hits/shards/{shard}_{segment}.tsv",
    wildcard_constraints:
        shard="[0-9a-f]{%d}" % MSA_SHARD_CHARS,
        segment="|".join(TEMPLATE_SEGMENTS),
    params:
        members=msa_shard_items,
        search=json.dumps(search_slice(TEMPLATES_CFG), sort_keys=True),
        code=code_hash("templates/search", "templates/hhr", "msa/tools"),
    resources:
        # not a param: a new timeout must not make finished searches outdated
        template_timeout_s=str(float(TEMPLATES_CFG["timeout_s"])),
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/templates/search/{shard}_{segment}.log",
    shell:
        "python -m foldworks.templates.search --key {wildcards.shard} --segment {wildcards.segment}"
        " --items {params.members} --manifest {output.manifest:q} --db-record {input.db:q}"
        " --params {params.search:q} --code {params.code} --msa-dir data/msa --sequences-dir data/sequences"
        " --hits-dir data/templates/hits --failures-dir data/failures"
        " --timeout-s {resources.template_timeout_s} 2> {log:q}"


rule template_select:
    input:
        table="data/chains.parquet",
        members="data/templates/db/members.tsv",
        # every (msa shard, segment) search of the passed chains' query hashes
        searches=lambda wildcards: [f"data/templates/hits/shards/{shard}_{segment}.tsv"
                                    for shard in _chain_index().msa for segment in TEMPLATE_SEGMENTS],
    output:
        "data/templates/selected.tsv",
    params:
        cfg=json.dumps(select_slice(TEMPLATES_CFG), sort_keys=True),
        segment_chars=TEMPLATE_SEGMENT_CHARS,
        mmcif=TEMPLATE_MMCIF_ARG,
        code=code_hash("templates/select", "templates/search", "templates/hhr", "templates/db", "templates/seqres"),
    localrule: True
    conda:
        "../../envs/hhsuite.yaml"  # the templates package's env (tests/test_envs.py)
    log:
        "logs/templates/select.log",
    shell:
        "python -m foldworks.templates.select --table {input.table} --members {input.members}"
        " --hits-dir data/templates/hits --segment-chars {params.segment_chars} --params {params.cfg:q}"
        " {params.mmcif} --out {output:q} 2> {log:q}"


rule template_features:
    input:
        table="data/chains.parquet",
        selected="data/templates/selected.tsv",
        parsed="data/parsed/shards/{shard}.tsv",
    output:
        manifest="data/templates/features/shards/{shard}.tsv",
    wildcard_constraints:
        shard=ENTRY_SHARD_PATTERN,
    params:
        members=features_shard_items,
        mmcif=TEMPLATE_MMCIF_ARG,
        code=code_hash("templates/features", "templates/hhr", "templates/search", "templates/seqres", "parse"),
    conda:
        "../../envs/hhsuite.yaml"  # the templates package's env (tests/test_envs.py)
    log:
        "logs/templates/features/{shard}.log",
    shell:
        "python -m foldworks.templates.features --key {wildcards.shard} --items {params.members}"
        " --manifest {output.manifest:q} --table {input.table} --selected {input.selected}"
        " --code {params.code} --hits-dir data/templates/hits --parsed-dir %s {params.mmcif}"
        " --features-dir data/templates/features --failures-dir data/failures 2> {log:q}" % TEMPLATE_PARSED_DIR
