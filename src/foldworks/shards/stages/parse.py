"""Plans of one shard's parses; input digest: the SHA-256 of the entry's fetch record (which holds
the stored file's SHA-256)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from foldworks.shards import file_sha256, rows_by_item, sha256_bytes
from foldworks.shards.run import Outcome, Plan
from foldworks.shards.stages.common import call_cli


def parse_planner(fetch_manifest: str, params: str, records_dir: str, out_dir: str,
                  failures_dir: str) -> Callable[[str], Plan]:
    """Plans of one shard's parses; the input digest of an entry is its fetch record's SHA-256."""
    from foldworks.parse.__main__ import main as parse_main

    fetched = rows_by_item([fetch_manifest])

    def plan(entry: str) -> Plan:
        if entry not in fetched:
            raise LookupError(f"entry {entry}: not in the fetch manifest {fetch_manifest}")
        npz, out_json = Path(out_dir) / f"{entry}.npz", Path(out_dir) / f"{entry}.json"

        def compute() -> Outcome:
            call_cli(parse_main, ["--entry", entry, "--fetch-record", f"{records_dir}/{entry}.json",
                                  "--input", f"{records_dir}/{entry}.cif.gz", "--out-npz", str(npz),
                                  "--out-json", str(out_json), "--params", params,
                                  "--failures-dir", failures_dir], f"parse {entry}")
            data = json.loads(out_json.read_text(encoding="utf-8"))
            return (str(data.get("status", "failed")), sha256_bytes(file_sha256(out_json), file_sha256(npz)),
                    str(data.get("reason") or ""))

        return Plan(fetched[entry].output_sha256, [str(npz), str(out_json)], compute)

    return plan
