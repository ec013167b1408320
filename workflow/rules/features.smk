# Stage 5: one cached feature file per chain (sequence, MSA + deletions, masks, coordinates).
# A chain whose MSA search failed (placeholder a3m, failure record in data/failures/msa/) gets
# single-sequence features marked `msa_source: single_sequence_fallback` only when
# `msa.allow_single_sequence_fallback` is true; otherwise its features job fails with an error
# naming the chain and writes data/failures/features/<target>.json (training then cannot run
# without it; `--keep-going` still finishes every other chain).


rule features:
    input:
        unpack(features_inputs),
    output:
        "data/features/{entry}_{chain}.npz",
    params:
        cfg=lambda wildcards: json.dumps(
            {**config["features"],
             "allow_single_sequence_fallback": MSA_CFG["allow_single_sequence_fallback"]},
            sort_keys=True,
        ),
        failure=lambda wildcards: f"data/failures/features/{wildcards.entry}_{wildcards.chain}.json",
        code=code_hash("features", "msa/a3m"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/features/{entry}_{chain}.log",
    shell:
        "python -m foldworks.features --parsed {input.parsed} --chain {wildcards.chain}"
        " --a3m {input.a3m} --target {wildcards.entry}_{wildcards.chain} --out {output}"
        " --params {params.cfg:q} --failure-record {params.failure} 2> {log}"
