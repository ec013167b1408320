# Design families (task "design", e.g. mpnn): evaluation and report. Training is rule `train` and
# prediction rule `predict` (both task-aware); structure families use rules evaluate/report.
# An experiment with `weights:` (a released ProteinMPNN file) is not trained: rule
# import_design_weights converts the file into its checkpoint, so predict/evaluate/report treat
# it like a trained experiment (its training log has no rows).

IMPORTED_EXPERIMENTS = [name for name in DESIGN_EXPERIMENTS if config["experiments"][name].get("weights")]
for _name, _spec in config["experiments"].items():
    if _spec.get("weights") and _spec["model"] != "mpnn":
        raise ValueError(f"experiment {_name}: 'weights' (a released ProteinMPNN file) needs model mpnn, "
                         f"not {_spec['model']!r}")


rule import_design_weights:
    wildcard_constraints:
        experiment=experiment_pattern(IMPORTED_EXPERIMENTS),
    input:
        weights=lambda wildcards: config["experiments"][wildcards.experiment]["weights"],
    output:
        best="results/checkpoints/{experiment}/best.ckpt",
        metrics="results/checkpoints/{experiment}/metrics.csv",
    params:
        code=code_hash("models"),
    localrule: True
    conda:
        "../../envs/python.yaml"
    log:
        "logs/train/{experiment}.log",
    shell:
        "python -m foldworks.models.weights.proteinmpnn --weights {input.weights} --out {output.best}"
        " --training-log {output.metrics} 2> {log}"


ruleorder: import_design_weights > train


rule evaluate_design:
    wildcard_constraints:
        experiment=experiment_pattern(DESIGN_EXPERIMENTS),
    input:
        predictions="results/predictions/{experiment}",
        checkpoint="results/checkpoints/{experiment}/best.ckpt",
        table="data/chains.parquet",
        features=lambda wildcards: features_of(["train", "test"]),
    output:
        test="results/metrics/{experiment}.tsv",
        train="results/metrics/train/{experiment}.tsv",
    params:
        cfg=slice_json("evaluate"),
        code=code_hash("evaluate", "models"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/evaluate/{experiment}.log",
    shell:
        "python -m foldworks.evaluate.design --predictions {input.predictions} --checkpoint {input.checkpoint}"
        " --chains {input.table} --features-dir data/features --out {output.test} --train-out {output.train}"
        " --params {params.cfg:q} 2> {log}"


rule report_design:
    input:
        metrics=expand("results/metrics/{experiment}.tsv", experiment=DESIGN_EXPERIMENTS),
        train_metrics=expand("results/metrics/train/{experiment}.tsv", experiment=DESIGN_EXPERIMENTS),
        logs=expand("results/checkpoints/{experiment}/metrics.csv", experiment=DESIGN_EXPERIMENTS),
    output:
        summary=report("results/design_summary.tsv", caption="../report/design_summary.rst", category="Design"),
        plot=report("results/plots/design_recovery.png", caption="../report/design_recovery.rst", category="Design"),
    params:
        code=code_hash("report"),
    localrule: True  # small tables and a plot, as rule report
    conda:
        "../../envs/python.yaml"
    log:
        "logs/report_design.log",
    shell:
        "python -m foldworks.report.design --metrics {input.metrics} --train-metrics {input.train_metrics}"
        " --train-logs {input.logs} --summary {output.summary} --plot {output.plot} 2> {log}"
