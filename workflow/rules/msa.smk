# Stage 4: an HH-suite database (built from FASTA unless msa.database names one), then hhblits
# once per unique sequence hash into the hash-sharded store data/msa/<xx>/<hash>.a3m.
# The database is built from msa.extra_fasta alone when given, so it does not depend on the
# chain table: it builds while entries are fetched and parsed, and adding entries does not
# change it (only the new sequences get MSA jobs). With no extra FASTA (tiny test configs) it
# is built from the chains' own sequences.


rule msa_db:
    input:
        fasta=config["msa"]["extra_fasta"] or ["data/chains.fasta"],
    output:
        multiext("data/msa_db/foldworks", "_a3m.ffdata", "_a3m.ffindex", "_cs219.ffdata", "_cs219.ffindex"),
        record="data/msa_db/foldworks.json",
    params:
        prefix=lambda wildcards, output: output.record.removesuffix(".json"),
        code=code_hash("msa"),
    threads: 2
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/msa_db.log",
    shell:
        "python -m foldworks.msa.build_db --fasta {input.fasta}"
        " --out-prefix {params.prefix} --record {output.record} --threads {threads} 2> {log}"


rule msa:
    input:
        query="data/sequences/{xx}/{seqhash}.fasta",
        db=MSA_DB_FILES,
    output:
        "data/msa/{xx}/{seqhash}.a3m",
    params:
        db=lambda wildcards, input: input.db[0].removesuffix("_a3m.ffdata") if input.db else MSA_DB_PREFIX,
        cfg=json.dumps(config["msa"]["hhblits"], sort_keys=True),
        code=code_hash("msa"),
    threads: 1
    conda:
        "../../envs/hhsuite.yaml"
    log:
        "logs/msa/{xx}/{seqhash}.log",
    shell:
        "python -m foldworks.msa.search --query {input.query} --db {params.db:q} --out {output}"
        " --threads {threads} --params {params.cfg:q} 2> {log}"
