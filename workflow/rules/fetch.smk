# Stage 1: download (or copy from a local mirror) each entry, validated, atomically.
#
# The declared output is the fetch *record* data/raw/{entry}.json: `status: ok` (the structure is
# stored beside it as data/raw/{entry}.cif.gz, sha256 in the record, checked by parse) or
# `status: failed` (one-line reason; no structure file at all, never a placeholder). So one bad
# entry never fails a job, and the `chains` checkpoint still runs over everything else.
# Permanent failures (not found, corrupt/HTML/oversized content) are cached like any result.
# Transient ones (network, 5xx, timeout after every retry) are retried by the next `snakemake`
# run: foldworks.fetch.core.next_attempt_token then returns a new value, and the params trigger
# reruns that entry (and only it). A stored entry is refetched with
# `snakemake --forcerun data/raw/<id>.json`.

from foldworks.fetch.core import next_attempt_token


rule fetch:
    output:
        record="data/raw/{entry}.json",
    params:
        raw=lambda wildcards: f"data/raw/{wildcards.entry}.cif.gz",
        source=config["pdb"]["source"],
        cfg=slice_json("fetch"),
        attempt=lambda wildcards: next_attempt_token(f"data/raw/{wildcards.entry}.json"),
        code=code_hash("fetch"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/fetch/{entry}.log",
    resources:
        downloads=1,
    shell:
        "python -m foldworks.fetch --entry {wildcards.entry} --source {params.source:q}"
        " --out {params.raw:q} --record {output.record:q} --params {params.cfg:q}"
        " --failures-dir data/failures --attempt-token {params.attempt:q} 2> {log:q}"


rule fetch_manifest:
    input:
        expand("data/raw/{entry}.json", entry=ENTRIES),
    output:
        "data/raw/manifest.tsv",
    params:
        code=code_hash("fetch"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/fetch_manifest.log",
    shell:
        "python -m foldworks.fetch.manifest --records {input} --out {output:q} 2> {log:q}"
