# foldworks: PDB entries -> parsed chains -> splits -> MSAs -> features -> training -> predictions
# -> metrics -> report. Each stage is a thin rule over `python -m foldworks.<stage>`.
# Usage: make demo   (or: snakemake --cores all [--configfile my.yaml])

from snakemake.utils import min_version, validate

min_version("9.0")


# The configuration is the --configfile files alone (merged in order), or, without any, the demo
# configuration config/config.yaml: a user's file is never merged over the demo's experiments.
# Every key a file leaves out takes its default from the schema (`validate` fills them in).
if not workflow.overwrite_configfiles:
    configfile: f"{workflow.basedir}/config/config.yaml"


validate(config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml", set_default=True)


include: "workflow/rules/common.smk"
include: "workflow/rules/fetch.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/chains.smk"
include: "workflow/rules/msa.smk"
include: "workflow/rules/templates.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/predict.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/design.smk"
include: "workflow/rules/failures.smk"
include: "workflow/rules/inference.smk"


rule all:
    input:
        "data/raw/manifest.tsv",
        "results/summary.tsv",
        "results/failures.tsv",
        "data/msa/summary.tsv",
        ["data/templates/selected.tsv"] if TEMPLATES_ENABLED else [],
        TEMPLATE_FEATURE_MANIFESTS,
        expand("results/metrics/{experiment}.tsv", experiment=EXPERIMENTS),
        ["results/design_summary.tsv"] if DESIGN_EXPERIMENTS else [],
        INFERENCE_TARGETS,
    default_target: True


# `snakemake inference`: predict the sequences of inference.fasta (docs/usage.md).
rule inference:
    input:
        INFERENCE_TARGETS,
    localrule: True
