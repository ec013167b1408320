# Stage 2: clean each entry with gemmi into per-chain atom37 arrays + metadata, one job per entry
# shard (data/parsed/shards/<key>.tsv); an entry is reparsed only when its fetch record (which
# holds the stored file's sha256) or the parse code/params changed.
# Input is the fetch record: a failed fetch becomes a `status: failed` parsed entry (the chains
# stage lists and skips it); an ok record's stored file is checked against its sha256 first.


rule parse:
    input:
        fetched="data/raw/shards/{shard}.tsv",
    output:
        manifest="data/parsed/shards/{shard}.tsv",
    wildcard_constraints:
        shard=r"[a-z0-9]{2}",
    params:
        members=entry_shard_items,
        cfg=slice_json("parse"),
        code=code_hash("parse", "fetch/convert", "shards"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/parse/{shard}.log",
    shell:
        "python -m foldworks.shards parse --key {wildcards.shard} --items {params.members} --manifest {output.manifest:q}"
        " --fetch-manifest {input.fetched:q} --params {params.cfg:q} --code {params.code} --records-dir data/raw"
        " --parsed-dir data/parsed --failures-dir data/failures 2> {log:q}"
