# Stages 1-2 per entry shard: fetch, then parse, in ONE job per shard (foldworks.shards: the middle
# two characters of the ID, as in the wwPDB divided layout). One job instead of a fetch job and a
# parse job: every job costs Snakemake DAG time on every call (~2.4 ms each at 230,000 entries,
# BENCHMARKS.md "fetch and parse in one job") and, under Slurm, one submission with a nested
# Snakemake start-up; the two stages always run back to back on the same shard anyway. Each stage
# keeps its own manifest, log, params and code hash, and its own per-entry stamps
# (foldworks.shards.stages.fetch / .parse), so a parse-only change reruns the job but refetches nothing, and a
# changed mirror file refetches and reparses only that entry.
#
# fetch, per entry: the fetch *record* data/raw/{entry}.json: `status: ok` (the structure is
# stored beside it as data/raw/{entry}.cif.gz, sha256 in the record, checked by parse) or
# `status: failed` (one-line reason; no structure file at all, never a placeholder). So one bad
# entry never fails a job, and the `chains` checkpoint still runs over everything else. Permanent
# failures (not found, corrupt/HTML/oversized content) are cached like any result. Transient
# ones (network, 5xx, timeout after every retry) are retried by the next `snakemake` run:
# foldworks.shards.fetch_attempt_token then returns a new value for that shard, the params
# trigger reruns that shard job, and it refetches only its transient entries. With a local
# mirror, `mirror` (one stat per entry) changes when an entry's mirror file changes (size or
# mtime): that reruns its shard, which refetches only that entry. With a URL source a stored
# entry is refetched with: rm data/raw/<id>.json; snakemake --forcerun data/raw/shards/<xy>.tsv
#
# parse, per entry: gemmi cleaning into per-chain atom37 arrays + metadata (data/parsed); an entry
# is reparsed only when its fetch record (which holds the stored file's sha256) or the parse
# code/params changed. A failed fetch becomes a `status: failed` parsed entry (the chains stage
# lists and skips it).
#
# `downloads` (capped in profiles/default) applies only to an https source: with a local mirror
# the shards run as wide as the cores/cluster allow.


rule ingest:
    output:
        fetched="data/raw/shards/{shard}.tsv",
        parsed="data/parsed/shards/{shard}.tsv",
    wildcard_constraints:
        shard=ENTRY_SHARD_PATTERN,
    params:
        members=entry_shard_items,
        source=config["pdb"]["source"],
        fetch_cfg=slice_json("fetch"),
        parse_cfg=slice_json("parse"),
        attempt=lambda wildcards: fetch_attempt_token(f"data/raw/shards/{wildcards.shard}.tsv"),
        mirror=lambda wildcards: shard_source_stamp(config["pdb"]["source"], ENTRY_SHARDS[wildcards.shard]),
        fetch_code=code_hash("fetch", "shards/stages/common", "shards/stages/fetch"),  # not the shard bookkeeping (see features.smk)
        parse_code=code_hash("parse", "fetch/convert", "shards/stages/common", "shards/stages/parse"),
    conda:
        "../../envs/python.yaml"
    log:
        fetch="logs/fetch/{shard}.log",
        parse="logs/parse/{shard}.log",
    resources:
        downloads=1 if "://" in config["pdb"]["source"] else 0,  # as foldworks.fetch.selection
    shell:
        "python -m foldworks.shards fetch --key {wildcards.shard} --items {params.members}"
        " --manifest {output.fetched:q} --source {params.source:q} --params {params.fetch_cfg:q}"
        " --code {params.fetch_code} --attempt {params.attempt:q} --records-dir data/raw"
        " --failures-dir data/failures 2> {log.fetch:q}"
        " && python -m foldworks.shards parse --key {wildcards.shard} --items {params.members}"
        " --manifest {output.parsed:q} --fetch-manifest {output.fetched:q} --params {params.parse_cfg:q}"
        " --code {params.parse_code} --records-dir data/raw --parsed-dir data/parsed"
        " --failures-dir data/failures 2> {log.parse:q}"
