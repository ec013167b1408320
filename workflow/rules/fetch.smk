# Stage 1: download (or copy from a local mirror) each entry, validated, atomically.


rule fetch:
    output:
        raw="data/raw/{entry}.cif.gz",
        record="data/raw/{entry}.json",
    params:
        source=config["pdb"]["source"],
        cfg=slice_json("fetch"),
        code=code_hash("fetch"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/fetch/{entry}.log",
    resources:
        downloads=1,
    shell:
        "python -m foldworks.fetch --entry {wildcards.entry} --source {params.source:q}"
        " --out {output.raw} --record {output.record} --params {params.cfg:q} 2> {log}"


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
        "python -m foldworks.fetch.manifest --records {input} --out {output} 2> {log}"
