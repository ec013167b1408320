# Stage 9: summary table and seaborn plots, collected by `snakemake --report results/report.html`.


rule report:
    input:
        metrics=expand("results/metrics/{experiment}.tsv", experiment=STRUCTURE_EXPERIMENTS),
        train_metrics=expand("results/metrics/train/{experiment}.tsv", experiment=STRUCTURE_EXPERIMENTS + ["baseline"]),
        baseline="results/metrics/baseline.tsv",
        logs=expand("results/checkpoints/{experiment}/metrics.csv", experiment=STRUCTURE_EXPERIMENTS),
        residues=expand("results/metrics/residues/{experiment}.tsv", experiment=STRUCTURE_EXPERIMENTS),
    output:
        summary=report("results/summary.tsv", caption="../report/summary.rst", category="Summary"),
        distribution=report("results/plots/lddt_ca_distribution.png", caption="../report/lddt_ca_distribution.rst", category="Accuracy"),
        vs_length=report("results/plots/lddt_ca_vs_length.png", caption="../report/lddt_ca_vs_length.rst", category="Accuracy"),
        curves=report("results/plots/training_curves.png", caption="../report/training_curves.rst", category="Training"),
        per_target=report("results/plots/per_target_comparison.png", caption="../report/per_target_comparison.rst", category="Accuracy"),
        calibration=report("results/plots/plddt_calibration.png", caption="../report/plddt_calibration.rst", category="Confidence"),
    params:
        code=code_hash("report"),
    localrule: True  # small tables and plots: a Slurm job would cost more than the work
    conda:
        "../../envs/python.yaml"
    log:
        "logs/report.log",
    shell:
        "python -m foldworks.report --metrics {input.metrics} --baseline {input.baseline}"
        " --train-metrics {input.train_metrics} --train-logs {input.logs} --residues {input.residues}"
        " --summary {output.summary} --plots-dir results/plots 2> {log}"
