"""The ``msa:`` config section: defaults, validation and the slices each msa rule receives.

Layout (``config/config.yaml``)::

    msa:
      tool: hhblits                 # or mmseqs (batched mmseqs search + result2msa)
      databases:                    # searched in this order; hits merged into one a3m
        - name: foldworks           # built by foldworks (prefix: null) from `fasta`
          fasta: []                 # empty = the chains' own sequences (data/chains.fasta)
          mode: single              # single (one entry per sequence) | clustered (MMseqs2)
          cluster: {min_seq_id: 0.3, coverage: 0.8}
          iterations: 2             # hhblits -n / mmseqs --num-iterations
          evalue: 0.001             # hhblits -e / mmseqs -e
          maxseq: 100000            # hhblits -maxseq (rows read per alignment)
          max_hits: 10000           # rows kept from this database (best first); hhblits -B/-Z/-realign_max
        - name: uniref30            # an existing database (not built): HH-suite prefix and/or
          prefix: /db/UniRef30_2023_02/UniRef30_2023_02   # MMseqs2 database for tool: mmseqs
          mmseqs_db: null
      hhfilter: {id: 90, cov: 0, diff: 0, max_depth: 512}
      timeout_s: 900                # per tool call; doubled on each retry
      retries: 2                    # Snakemake retries of a failed msa job
      allow_single_sequence_fallback: false
      shard_chars: 2                # hhblits: one msa job per hash prefix of this length
      mmseqs: {sensitivity: 7.5, max_seqs: 1000, shard_chars: 1}
      precomputed:                  # existing alignments, matched by query sequence hash
        sources:                    # looked up in this order; the first holding a sequence wins
          - name: openproteinset
            layout: openproteinset  # openfold | openproteinset | alignment_db | colabfold
            path: /data/openproteinset/pdb
            duplicates: null        # openproteinset: default <path>/duplicate_pdb_chains.txt
            hhfilter: {id: 100, cov: 0, diff: 0, max_depth: 16384}
        missing: fail               # fail (failure record) | search (align with `databases`)

The msa jobs receive :func:`search_slice` only (the search parameters; not a database's build
recipe, the timeout, retries or fallback policy, so changing those reruns no alignment) plus
each database's record file, whose ``content_sha256`` changes exactly when its content does.
"""

from __future__ import annotations

import copy
import re
from typing import Any

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
TOOLS = ("hhblits", "mmseqs")
MODES = ("single", "clustered")

DB_DEFAULTS: dict[str, Any] = {
    "prefix": None, "mmseqs_db": None, "fasta": [], "mode": "single",
    "cluster": {"min_seq_id": 0.3, "coverage": 0.8},
    "iterations": 2, "evalue": 0.001, "maxseq": 100_000, "max_hits": 10_000,
}
MSA_DEFAULTS: dict[str, Any] = {
    "tool": "hhblits",
    "databases": [{"name": "foldworks"}],
    "hhfilter": {"id": 90, "cov": 0, "diff": 0, "max_depth": 512},
    "timeout_s": 900,
    "retries": 2,
    "allow_single_sequence_fallback": False,
    "shard_chars": 2,
    "mmseqs": {"sensitivity": 7.5, "max_seqs": 1000, "shard_chars": 1},
    "precomputed": {"sources": [], "missing": "fail"},
}
#: Defaults of one ``msa.precomputed.sources`` item. hhfilter keeps every distinct row up to
#: 16,384 (an OpenProteinSet chain holds up to ~10,000 UniRef90 + ~5,000 MGnify rows + BFD hits).
SOURCE_DEFAULTS: dict[str, Any] = {
    "layout": None, "path": None, "duplicates": None,
    "hhfilter": {"id": 100, "cov": 0, "diff": 0, "max_depth": 16_384},
}
LAYOUTS = ("openfold", "openproteinset", "alignment_db", "colabfold")
MISSING = ("fail", "search")
#: Per-database keys that change search results (the others only say where/how to build).
SEARCH_KEYS: tuple[str, ...] = ("iterations", "evalue", "maxseq", "max_hits")
HHFILTER_FLAGS: tuple[str, ...] = ("id", "cov", "diff", "qid", "qsc", "neff")


class MsaConfigError(ValueError):
    """The ``msa:`` section is inconsistent; the message names the database or key."""


def _merge(defaults: dict[str, Any], given: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise MsaConfigError(f"{where}: unknown keys {', '.join(unknown)}")
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        if isinstance(defaults.get(key), dict) and isinstance(value, dict):
            out[key] = {**defaults[key], **value}
        else:
            out[key] = copy.deepcopy(value)
    return out


def resolve_database(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``msa.databases`` item with defaults filled in; raises :class:`MsaConfigError`."""
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise MsaConfigError(f"msa.databases: name {name!r} must match {NAME_PATTERN.pattern}")
    db = {"name": name, **_merge(DB_DEFAULTS, {k: v for k, v in spec.items() if k != "name"},
                                 f"msa.databases[{name}]")}
    if db["mode"] not in MODES:
        raise MsaConfigError(f"msa.databases[{name}]: mode {db['mode']!r} is not one of {MODES}")
    if db["fasta"] and (db["prefix"] or db["mmseqs_db"]):
        raise MsaConfigError(f"msa.databases[{name}]: give either fasta (build) or prefix/mmseqs_db (existing)")
    return db


def resolve_source(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``msa.precomputed.sources`` item with defaults filled in; raises :class:`MsaConfigError`."""
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise MsaConfigError(f"msa.precomputed.sources: name {name!r} must match {NAME_PATTERN.pattern}")
    where = f"msa.precomputed.sources[{name}]"
    source = {"name": name, **_merge(SOURCE_DEFAULTS, {k: v for k, v in spec.items() if k != "name"}, where)}
    if source["layout"] not in LAYOUTS:
        raise MsaConfigError(f"{where}: layout {source['layout']!r} is not one of {LAYOUTS}")
    if not source["path"]:
        raise MsaConfigError(f"{where}: path is required")
    unknown = sorted(set(source["hhfilter"]) - {*HHFILTER_FLAGS, "max_depth"})
    if unknown or int(source["hhfilter"]["max_depth"]) < 1:
        raise MsaConfigError(f"{where}: hhfilter needs max_depth >= 1 and only {HHFILTER_FLAGS} (got {unknown})")
    return source


def resolve_precomputed(section: dict[str, Any]) -> dict[str, Any]:
    """The ``msa.precomputed`` section resolved (sources checked, names unique)."""
    sources = [resolve_source(dict(spec)) for spec in section.get("sources") or []]
    names = [source["name"] for source in sources]
    if len(set(names)) != len(names):
        raise MsaConfigError(f"msa.precomputed.sources: names must be unique, got {names}")
    if section.get("missing") not in MISSING:
        raise MsaConfigError(f"msa.precomputed.missing {section.get('missing')!r} is not one of {MISSING}")
    return {"sources": sources, "missing": section["missing"]}


def uses_search(cfg: dict[str, Any]) -> bool:
    """Whether any sequence may be searched (no precomputed sources, or ``missing: search``)."""
    return not cfg["precomputed"]["sources"] or cfg["precomputed"]["missing"] == "search"


def index_sources(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """What the index build reads of each source (name, layout, path, duplicates)."""
    return [{key: source[key] for key in ("name", "layout", "path", "duplicates")}
            for source in cfg["precomputed"]["sources"]]


def is_external(db: dict[str, Any]) -> bool:
    """True for an existing database (``prefix`` or ``mmseqs_db`` given), False for one we build."""
    return bool(db.get("prefix") or db.get("mmseqs_db"))


def resolve_msa_config(section: dict[str, Any] | None) -> dict[str, Any]:
    """The ``msa:`` section with every default filled in and checked."""
    section = dict(section or {})
    databases = section.pop("databases", None) or MSA_DEFAULTS["databases"]
    cfg = _merge({k: v for k, v in MSA_DEFAULTS.items() if k != "databases"}, section, "msa")
    cfg["databases"] = [resolve_database(dict(spec)) for spec in databases]
    names = [db["name"] for db in cfg["databases"]]
    if len(set(names)) != len(names):
        raise MsaConfigError(f"msa.databases: names must be unique, got {names}")
    if cfg["tool"] not in TOOLS:
        raise MsaConfigError(f"msa.tool {cfg['tool']!r} is not one of {TOOLS}")
    key = "prefix" if cfg["tool"] == "hhblits" else "mmseqs_db"
    for db in cfg["databases"]:
        if is_external(db) and not db[key]:
            raise MsaConfigError(f"msa.databases[{db['name']}]: msa.tool {cfg['tool']} needs `{key}` "
                                 "for an existing database")
    if int(cfg["hhfilter"]["max_depth"]) < 1:
        raise MsaConfigError("msa.hhfilter.max_depth must be >= 1")
    if int(cfg["shard_chars"]) not in (1, 2, 3):
        raise MsaConfigError("msa.shard_chars must be 1, 2 or 3")
    if int(cfg["mmseqs"]["shard_chars"]) not in (1, 2):
        raise MsaConfigError("msa.mmseqs.shard_chars must be 1 or 2")
    cfg["precomputed"] = resolve_precomputed(cfg["precomputed"])
    if cfg["precomputed"]["sources"] and cfg["tool"] != "hhblits":
        raise MsaConfigError("msa.precomputed needs msa.tool hhblits (its fallback search runs per sequence)")
    return cfg


def search_slice(cfg: dict[str, Any]) -> dict[str, Any]:
    """What an msa job's result depends on besides the databases' content: tool, per-database
    search parameters (in search order), hhfilter settings and, for mmseqs, its search settings
    (sharding excluded). Database content reaches the job through its record file (input)."""
    databases = [{"name": db["name"], **{key: db[key] for key in SEARCH_KEYS}} for db in cfg["databases"]]
    out: dict[str, Any] = {"tool": cfg["tool"], "databases": databases, "hhfilter": dict(cfg["hhfilter"])}
    if cfg["tool"] == "mmseqs":
        out["mmseqs"] = {k: v for k, v in cfg["mmseqs"].items() if k != "shard_chars"}
    if cfg["precomputed"]["sources"]:
        out["precomputed"] = {"missing": cfg["precomputed"]["missing"], "sources": [
            {"name": s["name"], "hhfilter": dict(s["hhfilter"])} for s in cfg["precomputed"]["sources"]]}
    return out


def build_spec(db: dict[str, Any]) -> dict[str, Any]:
    """What a built database's content depends on (the ``msa_db`` rule's params)."""
    spec = {"name": db["name"], "mode": db["mode"]}
    if db["mode"] == "clustered":
        spec["cluster"] = dict(db["cluster"])
    return spec
