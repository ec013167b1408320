# Stage 3: chain table, filters, MMseqs2 clusters and leakage-free splits. A checkpoint: the
# chains it keeps decide which MSA, feature and prediction jobs exist.


checkpoint chains:
    input:
        parsed=expand("data/parsed/shards/{shard}.tsv", shard=ENTRY_SHARDS),  # for the DAG; the CLI reads the list
        entries=ENTRY_LIST,
    output:
        table="data/chains.parquet",
        fasta="data/chains.fasta",
        failures="data/parsed/failures.tsv",
    params:
        cfg=slice_json("chains"),
        code=code_hash("chains", "entrylist"),
    threads: 2
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/chains.log",
    shell:
        "python -m foldworks.chains --entries {input.entries} --parsed-dir data/parsed --out-table {output.table}"
        " --out-fasta {output.fasta} --sequences-dir data/sequences"
        " --failures {output.failures} --failures-dir data/failures --params {params.cfg:q}"
        " --threads {threads} 2> {log}"
