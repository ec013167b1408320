# Stage 1: download (or copy from a local mirror) the entries, validated, atomically; one job per
# entry shard (foldworks.shards: the middle two characters of the ID, as in the wwPDB divided
# layout), which loops over its entries and writes data/raw/shards/<key>.tsv.
#
# Per entry: the fetch *record* data/raw/{entry}.json: `status: ok` (the structure is stored
# beside it as data/raw/{entry}.cif.gz, sha256 in the record, checked by parse) or `status:
# failed` (one-line reason; no structure file at all, never a placeholder). So one bad entry
# never fails a job, and the `chains` checkpoint still runs over everything else. Permanent
# failures (not found, corrupt/HTML/oversized content) are cached like any result. Transient
# ones (network, 5xx, timeout after every retry) are retried by the next `snakemake` run:
# foldworks.shards.fetch_attempt_token then returns a new value for that shard, the params
# trigger reruns that shard job, and it refetches only its transient entries. With a local
# mirror, `mirror` (one stat per entry) changes when an entry's mirror file changes (size or
# mtime): that reruns its shard, which refetches only that entry. With a URL source a stored
# entry is refetched with: rm data/raw/<id>.json; snakemake --forcerun data/raw/shards/<xy>.tsv

from foldworks.dagindex import normalized_entry_list_digest
from foldworks.entrylist import ENTRY_LIST, write_entry_list
from foldworks.shards.stages import shard_source_stamp


rule fetch:
    output:
        manifest="data/raw/shards/{shard}.tsv",
    wildcard_constraints:
        shard=r"[a-z0-9]{2}",
    params:
        members=entry_shard_items,
        source=config["pdb"]["source"],
        cfg=slice_json("fetch"),
        attempt=lambda wildcards: fetch_attempt_token(f"data/raw/shards/{wildcards.shard}.tsv"),
        mirror=lambda wildcards: shard_source_stamp(config["pdb"]["source"], ENTRY_SHARDS[wildcards.shard]),
        code=code_hash("fetch", "shards"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/fetch/{shard}.log",
    resources:
        downloads=1,
    shell:
        "python -m foldworks.shards fetch --key {wildcards.shard} --items {params.members} --manifest {output.manifest:q}"
        " --source {params.source:q} --params {params.cfg:q} --code {params.code} --attempt {params.attempt:q}"
        " --records-dir data/raw --failures-dir data/failures 2> {log:q}"


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
