# Stage 5: one cached feature file per chain (sequence, MSA + deletions, masks, coordinates).


rule features:
    input:
        unpack(features_inputs),
    output:
        "data/features/{entry}_{chain}.npz",
    params:
        cfg=slice_json("features"),
        code=code_hash("features"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/features/{entry}_{chain}.log",
    shell:
        "python -m foldworks.features --parsed {input.parsed} --chain {wildcards.chain}"
        " --a3m {input.a3m} --target {wildcards.entry}_{wildcards.chain} --out {output}"
        " --params {params.cfg:q} 2> {log}"
