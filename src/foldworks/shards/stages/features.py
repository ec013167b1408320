"""Plans of one shard's feature files; input digest: the parse output digest of the entry and the a3m
digest of the chain's sequence."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from foldworks.ids import msa_relpath, split_target
from foldworks.shards import file_sha256, rows_by_item, sha256_bytes
from foldworks.shards.run import Outcome, Plan
from foldworks.shards.stages.common import call_cli, failure_reason


def features_planner(target_hashes: dict[str, str], parse_manifest: str, msa_manifests: Sequence[str],
                     params: str, parsed_dir: str, msa_dir: str, out_dir: str,
                     failures_dir: str) -> Callable[[str], Plan]:
    """Plans of one shard's feature files (``foldworks.features``); a refused target (its MSA
    failed and fallback is off) gets a ``failed`` row and its failure record."""
    from foldworks.features.__main__ import main as features_main

    parsed, aligned = rows_by_item([parse_manifest]), rows_by_item(msa_manifests)

    def plan(target: str) -> Plan:
        entry, chain = split_target(target)
        seq_hash = target_hashes[target]
        if entry not in parsed or seq_hash not in aligned:
            missing = parse_manifest if entry not in parsed else f"the msa manifests (sequence {seq_hash})"
            raise LookupError(f"target {target}: not in {missing}")
        out = Path(out_dir) / f"{target}.npz"
        failure = Path(failures_dir) / "features" / f"{target}.json"

        def compute() -> Outcome:
            status = call_cli(features_main, [
                "--parsed", f"{parsed_dir}/{entry}.npz", "--chain", chain,
                "--a3m", str(Path(msa_dir).parent / msa_relpath(seq_hash)), "--target", target,
                "--out", str(out), "--params", params, "--failure-record", str(failure)], f"features {target}")
            if status != 0:
                out.unlink(missing_ok=True)
                return "failed", "none", failure_reason(failure, f"features {target}: refused")
            return "ok", file_sha256(out), ""

        digest = sha256_bytes(parsed[entry].output_sha256, aligned[seq_hash].output_sha256)
        return Plan(digest, [], compute, verify=lambda row: row.status != "ok" or out.is_file())

    return plan
