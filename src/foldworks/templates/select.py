"""Choose each query chain's templates: release-date cutoff, AlphaFold's hit filters, ranking.

Per query chain (not per sequence: two chains with one sequence can have different release
dates), over the cached hits of its sequence against every segment:

1. the cutoff date is ``templates.max_template_date`` when set (inference), else the query
   chain's own entry release date (training); a chain with neither gets no templates;
2. a hit's template sequence stands for every chain with that sequence; the template chain is
   the earliest released one (then by entry, chain) that is not of the query's own entry and
   was released **strictly before** the cutoff; a hit with none is dropped;
3. AlphaFold's ``_assess_hhsearch_hit`` (``alphafold/data/templates.py``): drop a hit whose
   aligned columns cover <= ``min_align_ratio`` of the query, whose aligned template residues
   are a sub-sequence of the query longer than ``max_subsequence_ratio`` of it (a duplicate of
   the query), or that aligns fewer than ``min_template_length`` template residues;
4. rank by ``sum_probs`` (descending; then E-value, template hash) and keep ``max_hits``.

CLI::

    python -m foldworks.templates.select --table data/chains.parquet \\
        --members data/templates/db/members.tsv --hits-dir data/templates/hits \\
        --segment-chars 1 --params '{...}' --out data/templates/selected.tsv
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from foldworks import fsutil
from foldworks.ids import target_id
from foldworks.logutil import setup_logging
from foldworks.templates.config import segment_keys
from foldworks.templates.db import read_members
from foldworks.templates.hhr import Hit
from foldworks.templates.search import hits_path, read_hits

LOG = logging.getLogger("foldworks.templates.select")
SELECTED_COLUMNS = (
    "query", "query_sequence_hash", "query_release_date", "cutoff_date", "rank", "template",
    "template_sequence_hash", "template_release_date", "segment", "prob", "evalue", "sum_probs",
    "aligned_cols", "identity", "coverage",
)
#: A template chain: (release date, entry, chain); dates are ISO text, so they sort as dates.
Member = tuple[str, str, str]


def assess_hit(hit: Hit, query_sequence: str, cfg: dict[str, Any]) -> str | None:
    """Why AlphaFold would drop ``hit`` for ``query_sequence`` (a one-line reason), or None."""
    template = hit.template_aln.replace("-", "")
    if hit.aligned_cols / len(query_sequence) <= float(cfg["min_align_ratio"]):
        return f"aligned columns {hit.aligned_cols} <= {cfg['min_align_ratio']} of the query"
    if template in query_sequence and len(template) / len(query_sequence) > float(cfg["max_subsequence_ratio"]):
        return "duplicate: the aligned template is a sub-sequence covering most of the query"
    if len(template) < int(cfg["min_template_length"]):
        return f"template aligns {len(template)} < {cfg['min_template_length']} residues"
    return None


def template_chain(members: Sequence[Member], query_entry: str, cutoff: str) -> Member | None:
    """The earliest released member not of ``query_entry`` released strictly before ``cutoff``."""
    eligible = [m for m in members if m[1] != query_entry and m[0] and m[0] < cutoff]
    return min(eligible) if eligible else None


def select_for_chain(entry: str, sequence: str, release_date: str, hits: Sequence[tuple[str, Hit]],
                     members: dict[str, list[Member]], cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Selected rows (:data:`SELECTED_COLUMNS` but the query's) of one chain, best first."""
    cutoff = cfg["max_template_date"] or release_date
    if not cutoff:
        return []
    rows: list[dict[str, Any]] = []
    for segment, hit in sorted(hits, key=lambda sh: (-sh[1].sum_probs, sh[1].evalue, sh[1].name)):
        chosen = template_chain(members.get(hit.name, []), entry, cutoff)
        if chosen is None or assess_hit(hit, sequence, cfg) is not None:
            continue
        rows.append({"cutoff_date": cutoff, "rank": len(rows) + 1, "template": target_id(chosen[1], chosen[2]),
                     "template_sequence_hash": hit.name, "template_release_date": chosen[0], "segment": segment,
                     "prob": hit.prob, "evalue": hit.evalue, "sum_probs": hit.sum_probs,
                     "aligned_cols": hit.aligned_cols, "identity": round(hit.identity(), 4),
                     "coverage": round(len(hit.index_pairs()) / len(sequence), 4)})
        if len(rows) == int(cfg["max_hits"]):
            break
    return rows


def members_by_hash(members: pd.DataFrame) -> dict[str, list[Member]]:
    """``{sequence hash: [(release date, entry, chain)]}`` of the template members table."""
    grouped: dict[str, list[Member]] = {}
    for seq_hash, entry, chain, date in zip(members["sequence_hash"], members["entry"], members["chain"],
                                            members["release_date"]):
        grouped.setdefault(seq_hash, []).append((date, entry, chain))
    return grouped


def load_hits(seq_hash: str, hits_dir: str | Path, segments: Sequence[str]) -> list[tuple[str, Hit]]:
    """``[(segment, hit)]`` of one query over every segment; a segment without a hits file (a
    failed search, recorded under data/failures/templates) is skipped with a warning."""
    found: list[tuple[str, Hit]] = []
    for segment in segments:
        path = hits_path(hits_dir, segment, seq_hash)
        if not path.is_file():
            LOG.warning("templates %s: no hits file for segment %s (%s)", seq_hash, segment, path)
            continue
        found += [(segment, hit) for hit in read_hits(path)]
    return found


def _iso(value: Any) -> str:
    if value is None or value == "" or pd.isna(value):
        return ""
    return pd.Timestamp(value).date().isoformat()


def select_templates(table: pd.DataFrame, members: pd.DataFrame, hits_dir: str | Path, segment_chars: int,
                     cfg: dict[str, Any]) -> pd.DataFrame:
    """The selection table of every passed chain of ``table`` (:data:`SELECTED_COLUMNS`)."""
    by_hash, segments, cache = members_by_hash(members), segment_keys(segment_chars), {}
    rows: list[dict[str, Any]] = []
    for row in table[table["passed_filters"]].sort_values(["entry", "chain"]).itertuples(index=False):
        if row.sequence_hash not in cache:
            cache[row.sequence_hash] = load_hits(row.sequence_hash, hits_dir, segments)
        released = _iso(row.release_date)
        query = {"query": target_id(row.entry, row.chain), "query_sequence_hash": row.sequence_hash,
                 "query_release_date": released}
        chosen = select_for_chain(row.entry, row.sequence, released, cache[row.sequence_hash], by_hash, cfg)
        rows += [{**query, **selected} for selected in chosen]
    return pd.DataFrame(rows, columns=list(SELECTED_COLUMNS))


def with_hit_dates(table: pd.DataFrame, members: pd.DataFrame, hits_dir: str | Path, segment_chars: int,
                   mmcif_dir: str | Path, cache: str | Path) -> pd.DataFrame:
    """``members`` with release dates read from ``mmcif_dir`` for every template hit by a passed chain."""
    from foldworks.templates.seqres import fill_release_dates

    segments = segment_keys(segment_chars)
    queries = set(table.loc[table["passed_filters"], "sequence_hash"])
    hit = {h.name for q in sorted(queries) for _, h in load_hits(q, hits_dir, segments)}
    return fill_release_dates(members, hit, mmcif_dir, cache)


def read_selected(path: str | Path) -> pd.DataFrame:
    """``selected.tsv`` (identifiers and dates as text)."""
    text_columns = {c: str for c in SELECTED_COLUMNS if c.endswith(("query", "template", "hash", "date", "segment"))}
    return pd.read_csv(path, sep="\t", dtype=text_columns, keep_default_na=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.templates.select", description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="chain table (data/chains.parquet)")
    parser.add_argument("--members", required=True, help="template members (data/templates/db/members.tsv)")
    parser.add_argument("--hits-dir", default="data/templates/hits")
    parser.add_argument("--segment-chars", type=int, required=True)
    parser.add_argument("--params", required=True, help="JSON selection slice (templates.config.select_slice)")
    parser.add_argument("--out", required=True, help="selection table (data/templates/selected.tsv)")
    parser.add_argument("--mmcif-dir", help="with a pdb_seqres database: where the templates' release dates are read")
    parser.add_argument("--dates-cache", default="data/templates/db/release_dates.tsv")
    args = parser.parse_args(argv)
    setup_logging("templates.select")
    table, members = pd.read_parquet(args.table), read_members(args.members)
    if args.mmcif_dir:
        members = with_hit_dates(table, members, args.hits_dir, args.segment_chars, args.mmcif_dir, args.dates_cache)
    selected = select_templates(table, members, args.hits_dir, args.segment_chars, json.loads(args.params))
    fsutil.write_tsv_atomic(args.out, SELECTED_COLUMNS, selected.itertuples(index=False, name=None))
    LOG.info("templates: %d rows for %d query chains", len(selected), selected["query"].nunique())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
