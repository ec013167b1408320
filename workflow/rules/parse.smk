# Stage 2: clean each entry with gemmi into per-chain atom37 arrays + metadata.
# Input is the fetch record: a failed fetch becomes a `status: failed` parsed entry (the chains
# stage lists and skips it); an ok record's stored file is checked against its sha256 first.


rule parse:
    input:
        record="data/raw/{entry}.json",
    output:
        npz="data/parsed/{entry}.npz",
        json="data/parsed/{entry}.json",
    params:
        raw=lambda wildcards: f"data/raw/{wildcards.entry}.cif.gz",
        cfg=slice_json("parse"),
        code=code_hash("parse", "fetch/convert"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/parse/{entry}.log",
    shell:
        "python -m foldworks.parse --entry {wildcards.entry} --fetch-record {input.record:q} --input {params.raw:q}"
        " --out-npz {output.npz:q} --out-json {output.json:q} --params {params.cfg:q}"
        " --failures-dir data/failures 2> {log:q}"
