# Stage 5: one cached feature file per chain (sequence, MSA + deletions, masks, coordinates),
# built by one job per entry shard (data/features/shards/<key>.tsv); a target is rebuilt only
# when its parsed entry, its sequence's a3m or the features code/params changed.
# MSA input: only the MSA index (checkpoint msa_index, data/msa/index.tsv), `ancient` so that a
# rerun of the msa stage does not rerun every features shard by mtime; the `msa` param (a digest
# of exactly the index rows of the shard's sequences, read at DAG time) reruns the shard when one
# of its a3m files changed. Snakemake re-evaluates these shards after the checkpoint has run, so
# the real run reruns exactly the affected ones; but while msa_index will rerun, a dry run lists
# no features shard and nothing after them (dag.py update_needrun skips the reasons of jobs
# downstream of a job that will run): run `snakemake data/msa/index.tsv` first to see them.
# A chain whose MSA search failed (placeholder a3m, failure record in data/failures/msa/) gets
# single-sequence features marked `msa_source: single_sequence_fallback` only when
# `msa.allow_single_sequence_fallback` is true; otherwise it is refused: no feature file, a
# `failed` manifest row and data/failures/features/<target>.json (the shard job still succeeds
# and builds every other chain; training skips chains without features, with a warning).


rule features:
    input:
        unpack(features_shard_inputs),
    output:
        manifest="data/features/shards/{shard}.tsv",
    wildcard_constraints:
        shard=ENTRY_SHARD_PATTERN,
    params:
        members=features_shard_items,
        msa=features_msa_digest,
        cfg=json.dumps(
            {**config["features"],
             "allow_single_sequence_fallback": MSA_CFG["allow_single_sequence_fallback"]},
            sort_keys=True,
        ),
        # The per-item stamps hash the stage's code and its planner (shards/stages/features.py), not the shard
        # bookkeeping (manifests, keys, the item loop: shards/__init__, run, __main__), whose edits
        # change no per-item output and would otherwise recompute every item of the PDB; nor
        # features/af2 (AlphaFold2's input processing, run at training time from these files).
        code=code_hash("features/__init__", "features/__main__", "features/build", "msa/a3m", "shards/stages/common", "shards/stages/features"),
    conda:
        "../../envs/python.yaml"
    log:
        "logs/features/{shard}.log",
    shell:
        "python -m foldworks.shards features --key {wildcards.shard} --items {params.members}"
        " --manifest {output.manifest:q} --parse-manifest {input.parsed:q} --msa-manifests {input.msa_index:q}"
        " --params {params.cfg:q} --code {params.code} --parsed-dir data/parsed --msa-dir data/msa"
        " --features-dir data/features --failures-dir data/failures 2> {log:q}"
