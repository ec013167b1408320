# Stage 1: download (or copy from a local mirror) the entries; the per-shard job is `ingest`
# (workflow/rules/ingest.smk: fetch + parse of one entry shard in one job). This file keeps the
# whole-run rules of the stage: the entry list and the fetch manifest.

from foldworks.dagindex import normalized_entry_list_digest
from foldworks.entrylist import ENTRY_LIST, write_entry_list
from foldworks.shards.stages.fetch import shard_source_stamp


# The run's entries as one file (foldworks.entrylist): the rules over every entry (fetch_manifest,
# chains, failures_report) pass it to their CLI instead of one path per entry, which would exceed
# Linux's 128 KiB limit on one argument (MAX_ARG_STRLEN) from ~5,900 entries. Their inputs are
# the shard manifests (they order the DAG). The params trigger reruns this job only when the set of entries
# changes (the digest ignores order and duplicates); otherwise the file and its mtime stay, and
# its consumers are not rerun. In data/raw, so DVC versions it with the fetch records. `run:`, in
# this process: a shell command could not carry the list either (conda: unused, house convention).
# Under `--rerun-triggers` without `params`, delete data/raw/entries.txt after editing pdb.entries.
rule entry_list:
    output:
        ENTRY_LIST,
    params:
        digest=normalized_entry_list_digest(ENTRIES),  # = entrylist.entry_list_digest(ENTRIES)
    localrule: True
    conda:
        "../../envs/python.yaml"
    log:
        "logs/entry_list.log",
    run:
        Path(log[0]).write_text(write_entry_list(ENTRIES, output[0]) + "\n")


rule fetch_manifest:
    input:
        records=expand("data/raw/shards/{shard}.tsv", shard=ENTRY_SHARDS),
        entries=ENTRY_LIST,
    output:
        "data/raw/manifest.tsv",
    params:
        code=code_hash("fetch", "entrylist"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/fetch_manifest.log",
    shell:
        "python -m foldworks.fetch.manifest --entries {input.entries:q} --records-dir data/raw --out {output:q}"
        " 2> {log:q}"
