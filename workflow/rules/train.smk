# Stage 6: one shared Lightning trainer; the experiment names the model family and its config.
# GPU step: profiles/slurm sends it to a GPU partition.
#
# Resume: checkpoints go to results/checkpoints/{experiment}/resume/, which is deliberately NOT an
# output (Snakemake deletes a failed job's outputs, and a directory() output with its contents), so
# rerunning the target after a crash, SIGKILL or preemption continues from the newest checkpoint
# whose config and feature set match. A SIGTERM (Slurm preemption, `scontrol requeue`, time limit)
# makes the trainer finish its step, save resume/step_*.ckpt and exit 143; Slurm's requeue (or the
# profile's `retries`) reruns this job, which resumes. Loader workers = threads - 1.
#
# Processes: one by default (`python -m foldworks.train --devices {gpu}`; on one machine Lightning
# starts any further per-GPU processes itself). DDP across Slurm tasks: resources mpi="srun",
# tasks=T (all nodes together), nodes=N: the shell becomes `srun ... --ntasks=T python -m
# foldworks.train --devices T/N --num-nodes N` inside the job's allocation and Lightning's SLURM
# environment wires up the ranks (README "Multi-GPU and multi-node training on Slurm"); the
# launch line comes from foldworks.train.launch.train_launch().

from foldworks.train.experiments import init_inputs, train_params
from foldworks.train.launch import train_launch


rule train:
    input:
        table="data/chains.parquet",
        features=lambda wildcards: features_of(["train", "val"]),
        init=lambda wildcards: init_inputs(config["experiments"], wildcards.experiment),
        templates=lambda wildcards: template_manifests_of(wildcards.experiment, ["train", "val"]),
    output:
        best="results/checkpoints/{experiment}/best.ckpt",
        last="results/checkpoints/{experiment}/last.ckpt",
        metrics="results/checkpoints/{experiment}/metrics.csv",
        config="results/checkpoints/{experiment}/config.json",
    params:
        cfg=lambda wildcards: train_params(config["experiments"], wildcards.experiment),
        # Trailing options: --init-from and, for a template model, --templates-dir (one param, so an
        # experiment without either keeps its params and command text: no rerun).
        init=lambda wildcards, input: (f" --init-from {input.init[0]}" if input.init else "")
        + templates_arg(wildcards.experiment),
        out_dir=lambda wildcards: f"results/checkpoints/{wildcards.experiment}",
        code=code_hash("train", "models"),
        launch=lambda wildcards, threads, resources: train_launch(threads, resources)[0],
        devices=lambda wildcards, threads, resources: train_launch(threads, resources)[1],
    threads: 2
    resources:
        gpu=1,
        nodes=1,
    conda:
        "../../envs/python.yaml"
    log:
        "logs/train/{experiment}.log",
    shell:
        "{params.launch}python -m foldworks.train --experiment {wildcards.experiment} --params {params.cfg:q}"
        " --chains {input.table} --features-dir data/features --out-dir {params.out_dir}"
        " --threads {threads} --devices {params.devices} --num-nodes {resources.nodes}{params.init} 2> {log}"
