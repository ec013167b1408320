"""Plans of one shard's MSA searches (hhblits per sequence, or one MMseqs2 batch); input digest: the
query FASTA and the database records (which hold the databases' content hashes)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable, Sequence

from foldworks.ids import msa_relpath
from foldworks.shards import Row, file_sha256, sha256_bytes, unchanged
from foldworks.shards.run import Outcome, Plan
from foldworks.shards.stages.common import call_cli, failure_reason


def msa_input_digest(query: Path, db_records: Sequence[str]) -> str:
    if not query.is_file():
        raise LookupError(f"msa {query.stem}: query {query} is missing (written by checkpoint chains)")
    return sha256_bytes(file_sha256(query), *(file_sha256(r) for r in db_records))


def msa_outcome(seq_hash: str, a3m: Path, failures_dir: str, status: int) -> Outcome:
    failure = Path(failures_dir) / "msa" / f"{seq_hash}.json"
    if status != 0 or not a3m.is_file():
        return "failed", "none", failure_reason(failure, f"msa {seq_hash}: search failed (see the shard log)")
    if failure.is_file():  # gave up after the last attempt: placeholder a3m + failure record
        return "failed", file_sha256(a3m), failure_reason(failure, f"msa {seq_hash}: failed")
    return "ok", file_sha256(a3m), ""


def hhblits_planner(db_records: Sequence[str], params: str, sequences_dir: str, msa_dir: str,
                    failures_dir: str, threads: int, timeout_s: float, max_attempts: int) -> Callable[[str], Plan]:
    """Plans of one shard's hhblits searches; each attempt doubles the timeout (as the
    per-sequence jobs' ``retries`` did), and the last one gives up with a placeholder."""
    from foldworks.msa.search import main as search_main

    def plan(seq_hash: str) -> Plan:
        query = Path(sequences_dir) / seq_hash[:2] / f"{seq_hash}.fasta"
        a3m = Path(msa_dir).parent / msa_relpath(seq_hash)

        def compute() -> Outcome:
            status = 1
            for attempt in range(1, max_attempts + 1):
                status = call_cli(search_main, [
                    "--query", str(query), "--db-records", *db_records, "--out", str(a3m), "--threads", str(threads),
                    "--params", params, "--timeout-s", str(timeout_s * 2 ** (attempt - 1)),
                    "--attempt", str(attempt), "--max-attempts", str(max_attempts),
                    "--failure-record", str(Path(failures_dir) / "msa" / f"{seq_hash}.json")], f"msa {seq_hash}")
                if status == 0:
                    break
            return msa_outcome(seq_hash, a3m, failures_dir, status)

        return Plan(msa_input_digest(query, db_records), [str(a3m)], compute)

    return plan


def mmseqs_planner(items: Sequence[str], manifest_rows: dict[str, Row], stamp: str, db_records: Sequence[str],
                   params: str, sequences_dir: str, msa_dir: str, failures_dir: str, work_dir: str,
                   threads: int, timeout_s: float, max_attempts: int) -> Callable[[str], Plan]:
    """Plans of one shard's batched MMseqs2 searches: one batch over the items that changed
    (attempts as for hhblits, only the items still failing are searched again), then each
    item's plan moves its a3m from ``work_dir`` into place."""
    from foldworks.msa.mmseqs_search import databases_from_records, search_shard

    queries = {h: Path(sequences_dir) / h[:2] / f"{h}.fasta" for h in items}
    a3ms = {h: Path(msa_dir).parent / msa_relpath(h) for h in items}
    def current(h: str) -> bool:
        row = unchanged(manifest_rows, h, msa_input_digest(queries[h], db_records), stamp)
        return row is not None and row.status == "ok" and a3ms[h].exists()

    todo = [h for h in items if queries[h].is_file() and not current(h)]
    statuses: dict[str, int] = {}
    if todo:
        search = json.loads(params)
        databases = databases_from_records(search, list(db_records), key="mmseqs_db")
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        remaining = list(todo)
        for attempt in range(1, max_attempts + 1):
            done = search_shard([str(queries[h]) for h in remaining], databases, work_dir, threads,
                                search["hhfilter"], search.get("mmseqs"), timeout_s * 2 ** (attempt - 1),
                                attempt, max_attempts, str(Path(failures_dir) / "msa"))
            statuses.update(done)
            remaining = [h for h in remaining if done.get(h, 1) != 0]
            if not remaining:
                break

    def plan(seq_hash: str) -> Plan:
        digest = msa_input_digest(queries[seq_hash], db_records)

        def compute() -> Outcome:
            produced = Path(work_dir) / f"{seq_hash}.a3m"
            if produced.is_file():
                a3ms[seq_hash].parent.mkdir(parents=True, exist_ok=True)
                os.replace(produced, a3ms[seq_hash])
            return msa_outcome(seq_hash, a3ms[seq_hash], failures_dir, statuses.get(seq_hash, 1))

        return Plan(digest, [str(a3ms[seq_hash])], compute)

    return plan


def remove_work_dir(work_dir: str) -> None:
    shutil.rmtree(work_dir, ignore_errors=True)


def _chain_names(chain_table: str | None) -> dict[str, list[str]]:
    """``{sequence hash: ["<entry>_<chain>", ...]}`` of the chain table (empty without one)."""
    if not chain_table or not Path(chain_table).is_file():
        return {}
    import pandas as pd

    table = pd.read_parquet(chain_table, columns=["entry", "chain", "sequence_hash"])
    names: dict[str, list[str]] = {}
    for entry, chain, seq_hash in zip(table["entry"], table["chain"], table["sequence_hash"]):
        names.setdefault(str(seq_hash), []).append(f"{entry}_{chain}")
    return names


def import_planner(index_path: str, params: str, sequences_dir: str, msa_dir: str, failures_dir: str,
                   chain_table: str | None, search_plan: Callable[[str], Plan] | None) -> Callable[[str], Plan]:
    """Plans that import each hash's alignment from the precomputed index; a hash the index lacks
    is searched with ``search_plan`` (``missing: search``) or recorded as failed. The input digest
    covers the query and the index row's file digests, so a changed file reruns its hash only."""
    from foldworks.msa.importer import import_one, missing_reason
    from foldworks.msa.precomputed import read_index, row_digest
    from foldworks.msa.search import read_query

    precomputed = json.loads(params)["precomputed"]
    hhfilter = {source["name"]: source["hhfilter"] for source in precomputed["sources"]}
    index = read_index(index_path)
    by_name = {name: row for row in index.values() for name in row["names"].split(",") if name}
    names: list[dict[str, list[str]]] = []  # the chain table, read once and only if needed

    def plan(seq_hash: str) -> Plan:
        row = index.get(seq_hash)
        if row is None and search_plan is not None:
            inner = search_plan(seq_hash)
            return Plan(sha256_bytes(inner.input_sha256, "absent"), inner.outputs, inner.compute)
        query = Path(sequences_dir) / seq_hash[:2] / f"{seq_hash}.fasta"
        a3m = Path(msa_dir).parent / msa_relpath(seq_hash)
        failure = Path(failures_dir) / "msa" / f"{seq_hash}.json"

        def compute() -> Outcome:
            _, sequence = read_query(query)
            reason = ""
            if row is None:
                if not names:
                    names.append(_chain_names(chain_table))
                reason = missing_reason(seq_hash, sequence, names[0].get(seq_hash, []), list(hhfilter), by_name)
            settings = hhfilter[row["source"]] if row is not None else {"max_depth": 1}
            status = import_one(seq_hash, sequence, row, settings, a3m, failure, reason)
            return msa_outcome(seq_hash, a3m, failures_dir, status)

        return Plan(sha256_bytes(msa_input_digest(query, []), row_digest(row)), [str(a3m)], compute)

    return plan
