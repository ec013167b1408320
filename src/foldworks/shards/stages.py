"""Per-item plans of the sharded stages (fetch, parse, msa, features); see :mod:`.run`.

Input digests (what makes an item stale besides its stamp):

* fetch: the source and, for a local mirror, size and mtime of the entry's candidate files
  (``<id>.cif.gz``/``.pdb.gz``, flat or divided ``<xy>/`` layout, either case); a URL source
  has nothing local to compare, so a stored entry is refetched by deleting its record.
* parse: the SHA-256 of the entry's fetch record (which holds the stored file's SHA-256).
* msa: the query FASTA and the database records (which hold the databases' content hashes).
* features: the parse output digest of the entry and the a3m digest of the chain's sequence.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Callable, Sequence

from foldworks.ids import msa_relpath, normalize_entry, split_target
from foldworks.shards import Row, file_sha256, rows_by_item, sha256_bytes, unchanged
from foldworks.shards.run import Outcome, Plan

LOG = logging.getLogger("foldworks.shards")


def call_cli(main: Callable[[list[str]], int], argv: list[str], what: str) -> int:
    """Run a stage CLI's ``main`` in this process; an argparse exit becomes ``ValueError``."""
    try:
        return int(main(argv) or 0)
    except SystemExit as exc:
        raise ValueError(f"{what}: invalid arguments (exit {exc.code})") from None


def _failure_reason(path: Path, default: str) -> str:
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("reason") or default)
    except (OSError, ValueError):
        return default


# --- fetch ----------------------------------------------------------------------------------

def source_fingerprint(source: str, entry: str) -> str:
    """``path:size:mtime_ns`` of the first existing candidate file of ``entry`` in a local
    mirror (``<id>.cif.gz`` before ``.pdb.gz``; lower- then upper-case name; flat, then the
    divided ``<xy>/`` layout); ``url`` for a URL source, ``missing`` if there is none."""
    if "://" in source:
        return "url"
    return _fingerprint(_mirror_prefix(source), entry)


def _mirror_prefix(source: str) -> str:
    """``str(Path(source) / name)`` is ``prefix + name``: ``"m/"`` for ``m``, ``""`` for ``.``."""
    return str(Path(source) / "_")[:-1]


def _fingerprint(prefix: str, entry: str, divided_first: bool = False) -> str:
    """:func:`source_fingerprint` with plain strings and ``os.stat``: no ``Path`` per candidate
    (the fetch rule stamps every entry on every ``snakemake`` call, no-op included: 10,000 entries
    of a divided mirror took 0.65 s with ``pathlib``, 0.18 s this way). The strings equal the
    ``pathlib`` ones, so recorded params and manifest digests stay valid. ``divided_first``: try
    ``<xy>/`` before the flat name, the same result when the mirror holds no flat entry file
    (:func:`_flat_files`), with one ``stat`` per entry instead of two."""
    key = entry[1:3]
    for fmt in ("cif", "pdb"):
        for name in (f"{entry}.{fmt}.gz", f"{entry.upper()}.{fmt}.gz"):
            flat, divided = prefix + name, f"{prefix}{key}/{name}"
            for path in ((divided, flat) if divided_first else (flat, divided)):
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    return "missing"


@functools.lru_cache(maxsize=8)
def _flat_files(directory: str, mtime_ns: int) -> bool:
    """Whether ``directory`` itself holds a ``*.cif.gz`` / ``*.pdb.gz`` file (keyed by its mtime,
    which changes when a file is added, removed or renamed in it)."""
    return any(name.endswith((".cif.gz", ".pdb.gz")) for name in os.listdir(directory))


def _divided_only(prefix: str) -> bool:
    directory = prefix or "."
    try:
        return not _flat_files(directory, os.stat(directory).st_mtime_ns)
    except OSError:
        return False


def shard_source_stamp(source: str, entries: Sequence[str]) -> str:
    """The fetch rule's ``mirror`` param of one entry shard: 16 hex characters over its
    entries' :func:`source_fingerprint` (one ``stat`` per entry), so a changed, added or removed
    mirror file reruns exactly its shard; ``url`` for a URL source (nothing local to compare)."""
    if "://" in source:
        return "url"
    prefix = _mirror_prefix(source)
    divided_first = _divided_only(prefix)
    return sha256_bytes(*(_fingerprint(prefix, entry, divided_first) for entry in entries))[:16]


def fetch_plan(entry: str, source: str, params: str, records_dir: str, failures_dir: str,
               attempt: str) -> Plan:
    """Plan of one entry's fetch (``foldworks.fetch``): record ``<records_dir>/<id>.json``."""
    from foldworks.fetch.__main__ import main as fetch_main

    entry = normalize_entry(entry)
    record = Path(records_dir) / f"{entry}.json"

    def compute() -> Outcome:
        call_cli(fetch_main, ["--entry", entry, "--source", source, "--out", str(record.with_suffix(".cif.gz")),
                              "--record", str(record), "--params", params, "--failures-dir", failures_dir,
                              "--attempt-token", attempt], f"fetch {entry}")
        data = json.loads(record.read_text(encoding="utf-8"))
        status = "ok" if data.get("status") == "ok" else "transient" if data.get("transient") else "failed"
        return status, file_sha256(record), str(data.get("reason") or "")

    return Plan(sha256_bytes(source, source_fingerprint(source, entry)), [str(record)], compute,
                verify=lambda row: file_sha256(record) == row.output_sha256)


# --- parse ----------------------------------------------------------------------------------

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


# --- msa ------------------------------------------------------------------------------------

def msa_input_digest(query: Path, db_records: Sequence[str]) -> str:
    if not query.is_file():
        raise LookupError(f"msa {query.stem}: query {query} is missing (written by checkpoint chains)")
    return sha256_bytes(file_sha256(query), *(file_sha256(r) for r in db_records))


def msa_outcome(seq_hash: str, a3m: Path, failures_dir: str, status: int) -> Outcome:
    failure = Path(failures_dir) / "msa" / f"{seq_hash}.json"
    if status != 0 or not a3m.is_file():
        return "failed", "none", _failure_reason(failure, f"msa {seq_hash}: search failed (see the shard log)")
    if failure.is_file():  # gave up after the last attempt: placeholder a3m + failure record
        return "failed", file_sha256(a3m), _failure_reason(failure, f"msa {seq_hash}: failed")
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


# --- features -------------------------------------------------------------------------------

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
                return "failed", "none", _failure_reason(failure, f"features {target}: refused")
            return "ok", file_sha256(out), ""

        digest = sha256_bytes(parsed[entry].output_sha256, aligned[seq_hash].output_sha256)
        return Plan(digest, [], compute, verify=lambda row: row.status != "ok" or out.is_file())

    return plan
