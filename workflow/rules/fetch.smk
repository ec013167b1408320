# Stage 1: download (or copy from a local mirror) each entry, validated, atomically.
#
# The declared output is the fetch *record* data/raw/{entry}.json: `status: ok` (the structure is
# stored beside it as data/raw/{entry}.cif.gz, sha256 in the record, checked by parse) or
# `status: failed` (one-line reason; no structure file at all, never a placeholder). So one bad
# entry never fails a job, and the `chains` checkpoint still runs over everything else.
# Permanent failures (not found, corrupt/HTML/oversized content) are cached like any result.
# Transient ones (network, 5xx, timeout after every retry) are retried by the next `snakemake`
# run: foldworks.fetch.core.next_attempt_token then returns a new value, and the params trigger
# reruns that entry (and only it). A stored entry is refetched with
# `snakemake --forcerun data/raw/<id>.json`.

from foldworks.entrylist import ENTRY_LIST, entry_list_digest, write_entry_list
from foldworks.fetch.core import next_attempt_token


rule fetch:
    output:
        record="data/raw/{entry}.json",
    params:
        raw=lambda wildcards: f"data/raw/{wildcards.entry}.cif.gz",
        source=config["pdb"]["source"],
        cfg=slice_json("fetch"),
        attempt=lambda wildcards: next_attempt_token(f"data/raw/{wildcards.entry}.json"),
        code=code_hash("fetch"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/fetch/{entry}.log",
    resources:
        downloads=1,
    shell:
        "python -m foldworks.fetch --entry {wildcards.entry} --source {params.source:q}"
        " --out {params.raw:q} --record {output.record:q} --params {params.cfg:q}"
        " --failures-dir data/failures --attempt-token {params.attempt:q} 2> {log:q}"


# The run's entries as one file (foldworks.entrylist): the rules over every entry (fetch_manifest,
# chains, failures_report) pass it to their CLI instead of one path per entry, which would exceed
# Linux's 128 KiB limit on one argument (MAX_ARG_STRLEN) from ~5,900 entries. Their expand()
# inputs stay, for the DAG. The params trigger reruns this job only when the set of entries
# changes (the digest ignores order and duplicates); otherwise the file and its mtime stay, and
# its consumers are not rerun. In data/raw, so DVC versions it with the fetch records. `run:`, in
# this process: a shell command could not carry the list either (conda: unused, house convention).
# Under `--rerun-triggers` without `params`, delete data/raw/entries.txt after editing pdb.entries.
rule entry_list:
    output:
        ENTRY_LIST,
    params:
        digest=entry_list_digest(ENTRIES),
    localrule: True
    conda:
        "../../envs/python.yaml"
    log:
        "logs/entry_list.log",
    run:
        Path(log[0]).write_text(write_entry_list(ENTRIES, output[0]) + "\n")


rule fetch_manifest:
    input:
        records=expand("data/raw/{entry}.json", entry=ENTRIES),
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
