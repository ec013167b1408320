# Stage 7: predicted structures (mmCIF, pLDDT in B-factor) for every test chain, plus a
# deterministic subset of training chains to show what the model fits. GPU step.
# A design family (mpnn) writes sampled sequences instead ({target}.fasta, predict.design settings).


def design_params(wildcards) -> str:
    """`predict.design` merged with the experiment's own `predict` settings (design families; `{}` otherwise)."""
    if EXPERIMENT_TASKS[wildcards.experiment] != "design":
        return "{}"
    merged = {**config["predict"].get("design", {}), **config["experiments"][wildcards.experiment].get("predict", {})}
    return json.dumps(merged, sort_keys=True)


rule predict:
    input:
        checkpoint="results/checkpoints/{experiment}/best.ckpt",
        table="data/chains.parquet",
        features=lambda wildcards: features_of(["train", "test"]),
    output:
        directory("results/predictions/{experiment}"),
    params:
        splits=",".join(config["predict"]["splits"]),
        train_subset=config["predict"]["train_subset"],
        code=code_hash("predict", "models", "train"),
        design=design_params,
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
        " --train-subset {params.train_subset} --threads {threads} --design {params.design:q} 2> {log}"
