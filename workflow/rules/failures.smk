# The failures report: results/failures.tsv (stage, key, one-line reason), one line per item that
# did not make it through. Every stage writes its failure records as JSON to
# data/failures/<stage>/<key>.json (foldworks.failures.record_failure) and removes them when the
# item later succeeds; refused pdb.entries items come from the workflow load (ENTRY_PROBLEMS).
# The rule builds the report once the chain table exists; the onsuccess/onerror hooks rebuild it
# at the end of every (non-dry) run, adding later stages' records (msa, ...) and any job that
# failed outright (rule name, wildcards, last line of its log), so a `--keep-going` run always
# ends with one complete report.

from foldworks.failures import extra_argument, refresh_after_run


rule failures_report:
    input:
        records=expand("data/raw/shards/{shard}.tsv", shard=ENTRY_SHARDS),
        parsed=expand("data/parsed/shards/{shard}.tsv", shard=ENTRY_SHARDS),
        entries=ENTRY_LIST,  # the CLI reads this list, not one path per entry (128 KiB argument limit)
        table="data/chains.parquet",
    output:
        "results/failures.tsv",
    params:
        # bounded (32 KiB, quoted): one shell argument; the hooks add every refused item
        extra=extra_argument(ENTRY_PROBLEMS),
        code=code_hash("failures", "entrylist"),
    localrule: True  # reads the failure records and the entry list only
    conda:
        "../../envs/python.yaml"
    log:
        "logs/failures_report.log",
    shell:
        "python -m foldworks.failures --root data/failures --out {output:q} --entries {input.entries:q}"
        " --chains {input.table:q} --extra {params.extra:q} 2> {log:q}"


onsuccess:
    logger.info(refresh_after_run(workflow, ENTRIES, ENTRY_PROBLEMS))


onerror:
    logger.warning(refresh_after_run(workflow, ENTRIES, ENTRY_PROBLEMS))
