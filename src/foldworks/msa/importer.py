"""Writing the contract a3m of one sequence from an indexed precomputed alignment (``tool: import``).

Per sequence hash found in the index (:mod:`foldworks.msa.precomputed`): read each file of its
group (Stockholm converted to A3M rows), check its query against the chain's sequence, then the
same steps as a search: merge (query once, files in index order) → ``hhfilter`` → depth cap →
metadata line → contract check → atomic rename. The metadata records ``tool: import``, the
source, group and every file's SHA-256 (first 16 hex characters). A hash without an alignment,
a file whose query differs from the sequence, or a malformed file ends in a failure record and
the query-only placeholder, exactly as a search that gave up; no search tool is called.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from foldworks import fsutil
from foldworks.ids import sequence_hash
from foldworks.msa.a3m import A3MError, a3m_records, format_a3m, validate_a3m
from foldworks.msa.postprocess import apply_policy, finish_a3m, merge_alignments, run_hhfilter
from foldworks.msa.precomputed import member_records, normalize_query, read_member, row_digest

LOG = logging.getLogger("foldworks.msa.importer")


def import_meta(seq_hash: str, sequence: str, row: Mapping[str, Any] | None) -> dict[str, Any]:
    """The metadata line's fixed part: tool, query, source, group and file digests."""
    meta: dict[str, Any] = {"tool": "import", "sequence_hash": seq_hash, "length": len(sequence)}
    if row is not None:
        meta.update(databases={row["source"]: row_digest(row)}, source=row["source"], group=row["group"],
                    files={label: digest[:16] for label, _, digest in row["files"]})
    return meta


def member_a3m(seq_hash: str, sequence: str, label: str, locator: str, data: bytes) -> str:
    """One file's alignment as A3M text whose first row is exactly ``sequence``; :class:`A3MError`
    names ``locator`` and both queries' hashes and lengths when the query differs."""
    records = member_records(label, data, locator)
    try:
        query = normalize_query(records[0][1])
    except A3MError as exc:
        raise A3MError(f"{locator}: {exc}") from exc
    if query != sequence:
        raise A3MError(f"{locator}: alignment query {sequence_hash(query)} ({len(query)} residues) is not the "
                       f"chain sequence {seq_hash} ({len(sequence)} residues)")
    text = format_a3m([(seq_hash, sequence)] + records[1:])
    validate_a3m(text, sequence, name=locator)
    return text


def import_alignment(seq_hash: str, sequence: str, row: Mapping[str, Any], hhfilter: Mapping[str, Any],
                     out_a3m: str | os.PathLike[str], timeout_s: float | None = None) -> dict[str, Any]:
    """Write the contract a3m of ``sequence`` from its index ``row`` (files read from ``row['root']``).

    ``hhfilter``: ``id``/``cov``/``diff``/... flags and ``max_depth`` (rows kept, query included).
    Returns ``{sequence_hash, hits ({file label: rows}), raw_depth, depth}``. Raises
    :class:`A3MError` naming the file for a changed, unreadable, malformed or mismatched one.
    """
    root = Path(row["root"])
    results = []
    for label, locator, digest in row["files"]:
        try:
            data = read_member(root, locator)
        except OSError as exc:
            raise A3MError(f"{locator}: cannot be read: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise A3MError(f"{locator}: changed since the alignment index was built (rerun msa_import)")
        results.append((label, member_a3m(seq_hash, sequence, label, locator, data)))
    merged, hits = merge_alignments(seq_hash, sequence, results)
    with tempfile.TemporaryDirectory(prefix=f"foldworks-import-{seq_hash}-") as tmp:
        filtered = run_hhfilter(merged, Path(tmp), dict(hhfilter), seq_hash, timeout_s)
    raw_depth = 1 + sum(hits.values())
    meta = {**import_meta(seq_hash, sequence, row), "hits": hits, "raw_depth": raw_depth}
    final = finish_a3m(filtered, seq_hash, sequence, int(hhfilter["max_depth"]), meta)
    fsutil.write_bytes_atomic(out_a3m, final.encode("utf-8"))
    depth = len(a3m_records(final))
    LOG.info("msa %s: imported from %s/%s, %d rows, %d written", seq_hash, row["source"], row["group"], raw_depth, depth)
    return {"sequence_hash": seq_hash, "hits": hits, "raw_depth": raw_depth, "depth": depth}


def missing_reason(seq_hash: str, sequence: str, chains: Iterable[str], sources: Iterable[str],
                   by_name: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: no alignment has this query; for each of ``chains`` (``<pdb>_<chain>``) that a
    source holds under another query, that file and both hashes and lengths."""
    reason = f"no alignment whose query is sequence {seq_hash} ({len(sequence)} residues) in msa sources {', '.join(sources)}"
    for chain in sorted(set(chains)):
        row = by_name.get(chain)
        if row is not None:
            reason += (f"; {row['source']} holds {chain} in {row['files'][0][1]} with query {row['sequence_hash']}"
                       f" ({row['length']} residues)")
    return reason


def import_one(seq_hash: str, sequence: str, row: Mapping[str, Any] | None, hhfilter: Mapping[str, Any],
               out_a3m: str | os.PathLike[str], failure_path: str | os.PathLike[str], missing: str) -> int:
    """Import under the msa retry policy (one attempt: a file does not change between attempts).
    ``row`` None: failure record + placeholder with ``missing`` as the reason. Exit status 0."""
    def run() -> None:
        if row is None:
            raise A3MError(missing)
        import_alignment(seq_hash, sequence, row, hhfilter, out_a3m)

    return apply_policy(seq_hash, sequence, out_a3m, import_meta(seq_hash, sequence, row), failure_path, 1, 1, run)
