# Stage 6: one shared Lightning trainer; the experiment names the model family and its config.
# GPU step: profiles/slurm sends it to a GPU partition.
#
# Resume: checkpoints go to results/checkpoints/{experiment}/resume/, which is deliberately NOT an
# output (Snakemake deletes a failed job's outputs, and a directory() output with its contents), so
# rerunning the target after a crash, SIGKILL or preemption continues from the newest checkpoint
# whose config and feature set match. Loader workers = threads - 1; --devices/--num-nodes come
# from the rule's resources (a multi-task Slurm rule runs `srun -n N python -m foldworks.train ...`).


rule train:
    input:
        table="data/chains.parquet",
        features=lambda wildcards: features_of(["train", "val"]),
    output:
        best="results/checkpoints/{experiment}/best.ckpt",
        last="results/checkpoints/{experiment}/last.ckpt",
        metrics="results/checkpoints/{experiment}/metrics.csv",
        config="results/checkpoints/{experiment}/config.json",
    params:
        cfg=lambda wildcards: json.dumps(config["experiments"][wildcards.experiment], sort_keys=True),
        out_dir=lambda wildcards: f"results/checkpoints/{wildcards.experiment}",
        code=code_hash("train", "models"),
    threads: 2
    resources:
        gpu=1,
        nodes=1,
    conda:
        "../../envs/python.yaml"
    log:
        "logs/train/{experiment}.log",
    shell:
        "python -m foldworks.train --experiment {wildcards.experiment} --params {params.cfg:q}"
        " --chains {input.table} --features-dir data/features --out-dir {params.out_dir}"
        " --threads {threads} --devices {resources.gpu} --num-nodes {resources.nodes} 2> {log}"
