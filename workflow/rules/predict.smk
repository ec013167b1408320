# Stage 7: predicted structures (mmCIF, pLDDT in B-factor) for every test chain, plus a
# deterministic subset of training chains to show what the model fits. GPU step.
# A design family (mpnn) writes sampled sequences instead ({target}.fasta, predict.design settings).


rule predict:
    input:
        checkpoint="results/checkpoints/{experiment}/best.ckpt",
        table="data/chains.parquet",
        features=lambda wildcards: features_of(["train", "test"]),
        templates=lambda wildcards: template_manifests_of(wildcards.experiment, ["train", "test"]),
    output:
        directory("results/predictions/{experiment}"),
    params:
        splits=",".join(config["predict"]["splits"]),
        train_subset=config["predict"]["train_subset"],
        max_memory_gb=config["predict"].get("max_memory_gb", 0),
        precision=config["predict"].get("precision", "fp32"),
        # Trailing options: --chunk-size and, for a template model, --templates-dir (one param, so an
        # experiment without templates keeps its params and command text: no rerun).
        chunk=lambda wildcards: (f" --chunk-size {config['predict']['chunk_size']}"
                                 if config["predict"].get("chunk_size") else "") + templates_arg(wildcards.experiment),
        code=code_hash("predict", "models", "train"),
        design=lambda wildcards: design_params(config, EXPERIMENT_TASKS, wildcards.experiment),
    threads: 2
    resources:
        gpu=1,
    conda:
        "../../envs/python.yaml"
    log:
        "logs/predict/{experiment}.log",
    shell:
        "python -m foldworks.predict --checkpoint {input.checkpoint} --chains {input.table}"
        " --features-dir data/features --out-dir {output} --splits {params.splits}"
        " --train-subset {params.train_subset} --max-memory-gb {params.max_memory_gb}"
        " --precision {params.precision}{params.chunk}"
        " --threads {threads} --design {params.design:q} 2> {log}"
