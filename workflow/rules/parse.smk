# Stage 2: clean each entry with gemmi into per-chain atom37 arrays + metadata.


rule parse:
    input:
        "data/raw/{entry}.cif.gz",
    output:
        npz="data/parsed/{entry}.npz",
        json="data/parsed/{entry}.json",
    params:
        cfg=slice_json("parse"),
        code=code_hash("parse", "fetch/convert"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/parse/{entry}.log",
    shell:
        "python -m foldworks.parse --entry {wildcards.entry} --input {input}"
        " --out-npz {output.npz} --out-json {output.json} --params {params.cfg:q} 2> {log}"
