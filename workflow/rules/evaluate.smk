# Stage 8: RMSD, lDDT-Cα, GDT-TS/HA, TM-score per target against the parsed reference, plus
# per-residue pLDDT / lDDT-Cα (calibration plot).


rule evaluate:
    wildcard_constraints:
        experiment=experiment_pattern(STRUCTURE_EXPERIMENTS),  # design families: rule evaluate_design
    input:
        predictions="results/predictions/{experiment}",
        table="data/chains.parquet",
        features=lambda wildcards: features_of(["train", "test"]),
    output:
        test="results/metrics/{experiment}.tsv",
        train="results/metrics/train/{experiment}.tsv",
        residues="results/metrics/residues/{experiment}.tsv",
    params:
        cfg=slice_json("evaluate"),
        code=code_hash("evaluate"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/evaluate/{experiment}.log",
    shell:
        "python -m foldworks.evaluate --predictions {input.predictions} --chains {input.table}"
        " --features-dir data/features"
        " --out {output.test} --train-out {output.train} --residues-out {output.residues}"
        " --params {params.cfg:q} 2> {log}"


rule evaluate_baseline:
    input:
        table="data/chains.parquet",
        features=lambda wildcards: features_of(["train", "test"]),
    output:
        test="results/metrics/baseline.tsv",
        train="results/metrics/train/baseline.tsv",
    params:
        cfg=slice_json("evaluate"),
        code=code_hash("evaluate"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/evaluate/baseline.log",
    shell:
        "python -m foldworks.evaluate.baseline --chains {input.table} --features-dir data/features"
        " --out {output.test} --train-out {output.train} --params {params.cfg:q} 2> {log}"
