# Prediction from sequences (a FASTA of proteins, no structure), as OpenFold's inference script:
# align each unique sequence once, build its features, predict the whole sequence (no crop) with a
# trained or imported structure checkpoint, write {name}.cif (pLDDT in B-factors),
# {name}_pae.json (families with an aligned-error head) and one ranking.tsv. Enabled by
# `inference.fasta`; its outputs live under `inference.out_dir` (default results/inference).
#
# The FASTA is read when the workflow is loaded (foldworks.inference.fasta). A record with letters
# outside the 20 amino acids + X, or an empty one, gets a job that fails with one line naming the
# record (and a warning at load): without --keep-going the run stops there; with it, the other
# records are predicted and ranking.tsv lists the refused ones as `invalid`. Nothing is written for
# them. A record the memory guard (predict.max_memory_gb, or inference.max_memory_gb) refuses, or
# whose prediction fails, is recorded (record JSON, ranking status) without failing the run.
# Alignments go to their own tree (<out_dir>/msa/<hash>.a3m) with the msa stage's tool and
# databases; an a3m in `inference.alignments_dir` named <name>.a3m or <hash>.a3m is used instead
# of a search. Templates are not used by this stage. Target: `snakemake inference`.

import re

from foldworks.inference.fasta import read_query_fasta
from foldworks.inference.plan import alignment_path, inference_targets

INF_CFG = config.get("inference") or {}
INF_OUT = str(INF_CFG.get("out_dir") or "results/inference").rstrip("/")
INF_ALL = read_query_fasta(INF_CFG["fasta"]) if INF_CFG.get("fasta") else []
INF_RECORDS = [record for record in INF_ALL if record.valid]
INF_INVALID = [record.name for record in INF_ALL if not record.valid]
for _record in INF_ALL:
    if _record.error:
        logger.warning(f"inference: {_record.error}")
if INF_ALL and not INF_CFG.get("checkpoint"):
    if INF_CFG.get("experiment") not in STRUCTURE_EXPERIMENTS:
        raise ValueError(f"inference: give inference.checkpoint (a .ckpt file) or inference.experiment, one of "
                         f"the structure experiments {STRUCTURE_EXPERIMENTS} (got {INF_CFG.get('experiment')!r})")
INF_BY_NAME = {record.name: record for record in INF_RECORDS}
INF_SEQUENCES = {record.sequence_hash: record.sequence for record in INF_RECORDS}
INF_CHECKPOINT = INF_CFG.get("checkpoint") or f"results/checkpoints/{INF_CFG.get('experiment')}/best.ckpt"
INF_SETTINGS = json.dumps({
    "max_msa_rows": int(config["features"]["max_msa_rows"]), "seed": int(config["features"]["seed"]),
    "allow_single_sequence_fallback": bool(MSA_CFG["allow_single_sequence_fallback"]),
    "max_memory_gb": float(INF_CFG["max_memory_gb"] if INF_CFG.get("max_memory_gb") is not None
                           else config["predict"].get("max_memory_gb", 0)),
}, sort_keys=True)
#: What `snakemake inference` (and `rule all`) asks for: the ranking and the refused records' jobs.
INFERENCE_TARGETS = inference_targets(INF_ALL, INF_OUT)


rule inference_refused:
    input:
        fasta=INF_CFG.get("fasta") or [],
    output:
        record=f"{INF_OUT}/records/{{name}}.json",
    wildcard_constraints:
        name=experiment_pattern([re.escape(name) for name in INF_INVALID]),
    localrule: True
    conda:
        "../../envs/python.yaml"
    log:
        f"logs/inference/predict/{{name}}.log",
    shell:
        "python -m foldworks.inference check --fasta {input.fasta:q} --name {wildcards.name} 2> {log:q}"


rule inference_query:
    output:
        f"{INF_OUT}/sequences/{{seqhash}}.fasta",
    wildcard_constraints:
        seqhash="[0-9a-f]{20}",
    params:
        sequence=lambda wildcards: INF_SEQUENCES[wildcards.seqhash],
    localrule: True
    conda:
        "../../envs/python.yaml"
    log:
        f"logs/inference/query/{{seqhash}}.log",
    shell:
        "python -m foldworks.inference query --sequence {params.sequence} --out {output:q} 2> {log:q}"


rule inference_msa:
    input:
        query=f"{INF_OUT}/sequences/{{seqhash}}.fasta",
        dbs=msa_rules.record_paths(MSA_CFG["databases"]),
    output:
        a3m=f"{INF_OUT}/msa/{{seqhash}}.a3m",
    wildcard_constraints:
        seqhash="[0-9a-f]{20}",
    params:
        search=MSA_SEARCH_PARAMS,
        code=MSA_SEARCH_CODE,
        out_dir=lambda wildcards, output: os.path.dirname(output.a3m),
        failure=f"{INF_OUT}/failures/msa/{{seqhash}}.json",
        failure_dir=f"{INF_OUT}/failures/msa",
    threads: 1 if MSA_CFG["tool"] == "hhblits" else 2
    resources:
        msa_timeout_s=str(float(MSA_CFG["timeout_s"])),
    conda:
        "../../envs/hhsuite.yaml"
    log:
        f"logs/inference/msa/{{seqhash}}.log",
    shell:
        ("python -m foldworks.msa.search --query {input.query:q} --out {output.a3m:q}"
         " --failure-record {params.failure:q}" if MSA_CFG["tool"] == "hhblits" else
         "python -m foldworks.msa.mmseqs_search --queries {input.query:q} --out-dir {params.out_dir:q}"
         " --failure-dir {params.failure_dir:q}")
        + " --db-records {input.dbs} --params {params.search:q} --threads {threads}"
        " --timeout-s {resources.msa_timeout_s} --max-attempts 1 2> {log:q}"


rule inference_predict:
    input:
        checkpoint=INF_CHECKPOINT,
        a3m=lambda wildcards: alignment_path(INF_BY_NAME[wildcards.name], INF_OUT, INF_CFG.get("alignments_dir")),
    output:
        record=f"{INF_OUT}/records/{{name}}.json",
    wildcard_constraints:
        name=experiment_pattern([re.escape(name) for name in INF_BY_NAME]),
    params:
        sequence=lambda wildcards: INF_BY_NAME[wildcards.name].sequence,
        settings=INF_SETTINGS,
        out_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output.record)),
        code=code_hash("inference", "predict", "features", "models"),
    threads: 2
    resources:
        gpu=1,
    conda:
        "../../envs/python.yaml"
    log:
        f"logs/inference/predict/{{name}}.log",
    shell:
        "python -m foldworks.inference predict --checkpoint {input.checkpoint:q} --name {wildcards.name}"
        " --sequence {params.sequence} --a3m {input.a3m:q} --out-dir {params.out_dir:q} --record {output.record:q}"
        " --settings {params.settings:q} --threads {threads} 2> {log:q}"


rule inference_ranking:
    input:
        fasta=INF_CFG.get("fasta") or [],
        records=[f"{INF_OUT}/records/{name}.json" for name in INF_BY_NAME],
    output:
        f"{INF_OUT}/ranking.tsv",
    params:
        code=code_hash("inference"),
    localrule: True
    conda:
        "../../envs/python.yaml"
    log:
        "logs/inference/ranking.log",
    shell:
        "python -m foldworks.inference rank --fasta {input.fasta:q} --records {input.records:q}"
        " --out {output:q} 2> {log:q}"
