"""Precomputed alignments as an MSA source: Stockholm conversion, the four collection layouts
(OpenFold alignment_dir, OpenProteinSet, OpenFold alignment_db, ColabFold NUL-separated a3m),
hash matching, the import into the contract a3m, and the bad-input lines. The alignments are
real: hhblits runs on a ~300-sequence database built from the shared seqdb."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import require_tool
from foldworks.ids import sequence_hash
from foldworks.msa.a3m import A3MError, a3m_records, parse_a3m, read_header, split_alignments, validate_a3m
from foldworks.msa.build_db import build_database
from foldworks.msa.config import MsaConfigError, resolve_msa_config, search_slice
from foldworks.msa.importer import import_alignment, import_one
from foldworks.msa.precomputed import build_index, group_row, read_index, row_digest, source_groups
from foldworks.msa.search import search_query
from foldworks.msa.stockholm import stockholm_to_a3m
from test_msa import select_records, write_fasta

CHAINS = {"1aki_A": "lysozyme", "1ubq_A": "ubiquitin"}
HHFILTER = {"id": 99, "cov": 0, "diff": 0, "max_depth": 512}


def a3m_to_stockholm(records: list[tuple[str, str]]) -> str:
    """Stockholm text of A3M records (insertion columns expanded, gaps '-' in match and '.' in
    insert columns), as jackhmmer writes them: the inverse of :func:`stockholm_to_a3m`."""
    def split(aligned: str) -> list[tuple[str, str]]:  # [(insertions before column, column char)]
        out, pending = [], ""
        for char in aligned:
            if char.islower():
                pending += char
            else:
                out.append((pending, char))
                pending = ""
        return out + [(pending, "")]

    parts = [split(aligned) for _, aligned in records]
    width = [max(len(row[j][0]) for row in parts) for j in range(len(parts[0]))]
    lines = ["# STOCKHOLM 1.0", ""]
    for (name, _), row in zip(records, parts):
        text = "".join(ins.upper().ljust(w, ".") + col for (ins, col), w in zip(row, width))
        lines.append(f"{name.split()[0]} {text}")
    return "\n".join(lines + ["//", ""])


@pytest.fixture(scope="module")
def searched(tmp_path_factory, seqdb_fasta) -> dict[str, tuple[str, str]]:
    """``{chain: (sequence, raw hhblits a3m text)}`` for two real queries (raw = before our
    metadata line: what another pipeline's collection would hold)."""
    require_tool("hhblits")
    base = tmp_path_factory.mktemp("import_db")
    records = select_records(seqdb_fasta)
    fasta = write_fasta(base / "db.fasta", records)
    record = build_database([fasta], base / "small", threads=1, record_path=base / "small.json")
    out = {}
    for chain in CHAINS:
        sequence = next(s for h, s in records if h.split()[0] == chain)
        query = base / f"{chain}.fasta"
        query.write_text(f">{chain}\n{sequence}\n")
        db = {"name": "small", "prefix": str(base / "small"), "iterations": 1, "evalue": 0.001, "maxseq": 1000,
              "content_sha256": record["content_sha256"]}
        search_query(query, [db], base / f"{chain}.a3m", hhfilter=HHFILTER)
        text = (base / f"{chain}.a3m").read_text()
        out[chain] = (sequence, "".join(f">{h}\n{s}\n" for h, s in a3m_records(text)))
    return out


def write_layouts(root: Path, searched: dict[str, tuple[str, str]]) -> dict[str, dict]:
    """The same alignments in the four layouts; returns their source configs."""
    sources = {}
    of = root / "alignment_dir"
    ops = root / "openproteinset"
    cf = root / "colabfold"
    for chain, (sequence, text) in searched.items():
        half = len(a3m_records(text)) // 2
        records = a3m_records(text)
        (of / chain).mkdir(parents=True)
        (of / chain / "bfd_uniclust_hits.a3m").write_text("".join(f">{h}\n{s}\n" for h, s in records[:half]))
        (of / chain / "mgnify_hits.sto").write_text(a3m_to_stockholm([records[0]] + records[half:]))
        (of / chain / "uniprot_hits.sto").write_text("not an MSA of the chain, skipped\n")
        (ops / chain / "a3m").mkdir(parents=True)
        (ops / chain / "hhr").mkdir()
        (ops / chain / "a3m" / "uniref90_hits.a3m").write_text(text)
        (ops / chain / "hhr" / "pdb70_hits.hhr").write_text("ignored\n")
    (ops / "duplicate_pdb_chains.txt").write_text("1aki_A 4lzt_A\n1ubq_A\n")
    cf.mkdir()
    (cf / "combined.a3m").write_text("".join(f"#{len(s)}\t1\n{t}\x00" for s, t in searched.values()))
    db_dir = root / "alignment_db"
    db_dir.mkdir()
    index, offset = {}, 0
    with open(db_dir / "shard_0.db", "wb") as handle:
        for chain, (_, text) in searched.items():
            data = text.encode()
            handle.write(data)
            index[chain] = {"db": "shard_0.db", "files": [["uniref90_hits.a3m", offset, len(data)]]}
            offset += len(data)
    (db_dir / "super.index").write_text(json.dumps(index))
    for name, layout, path in (("of", "openfold", of), ("ops", "openproteinset", ops),
                               ("cf", "colabfold", cf), ("adb", "alignment_db", db_dir / "super.index")):
        sources[layout] = {"name": name, "layout": layout, "path": str(path), "duplicates": None}
    return sources


@pytest.fixture()
def layouts(tmp_path, searched):
    return write_layouts(tmp_path, searched)


def test_stockholm_conversion_matches_a3m_deletions(searched):
    """Stockholm → A3M restores the hhblits a3m exactly: same tokens, same deletion counts."""
    for sequence, text in searched.values():
        records = a3m_records(text)
        converted = stockholm_to_a3m(a3m_to_stockholm(records))
        assert [s for _, s in converted] == [s for _, s in records]
        msa, deletions = parse_a3m(text)
        msa2, deletions2 = parse_a3m("".join(f">{h}\n{s}\n" for h, s in converted))
        assert np.array_equal(msa, msa2) and np.array_equal(deletions, deletions2) and len(msa) > 1


def test_stockholm_small_case_by_hand():
    sto = "# STOCKHOLM 1.0\nq  AC..DE\nh1 AcgtD-\n#=GC RF xx..xx\n//\n"
    records = stockholm_to_a3m(sto)
    assert records == [("q", "ACDE"), ("h1", "ACgtD-")]
    _, deletions = parse_a3m("".join(f">{h}\n{s}\n" for h, s in records))
    assert deletions.tolist() == [[0, 0, 0, 0], [0, 0, 2, 0]]
    with pytest.raises(A3MError, match="bad.sto: row 'h1' has 5 alignment columns, the query has 6"):
        stockholm_to_a3m("q ACDEFG\nh1 ACDEF\n//\n", "bad.sto")


def test_colabfold_nul_separated_a3m(searched):
    text = "".join(f"#{len(s)}\t1\n{t}\x00" for s, t in searched.values())
    pieces = split_alignments(text)
    assert len(pieces) == 2
    for piece, (sequence, _) in zip(pieces, searched.values()):
        assert validate_a3m(piece.replace(a3m_records(piece)[0][0], "q", 1), sequence) == len(a3m_records(piece))
    single = pieces[0] + "\x00"
    assert a3m_records(single) == a3m_records(pieces[0]), "a trailing NUL ends the alignment"
    with pytest.raises(A3MError, match="2 NUL-separated alignments"):
        a3m_records(text)


@pytest.mark.parametrize("layout", ["openfold", "openproteinset", "alignment_db", "colabfold"])
def test_each_layout_indexes_by_query_hash(layouts, searched, layout):
    rows, problems = build_index([layouts[layout]])
    assert problems == []
    expected = {sequence_hash(s): chain for chain, (s, _) in searched.items()}
    assert sorted(row["sequence_hash"] for row in rows) == sorted(expected)
    for row in rows:
        files = json.loads(row["files"])
        assert all(label.endswith((".a3m", ".sto")) and "uniprot" not in label for label, _, _ in files)
        assert row["length"] == len(searched[expected[row["sequence_hash"]]][0])
    if layout == "openproteinset":
        aki = next(r for r in rows if r["group"] == "1aki_A")
        assert aki["names"] == "1aki_A,4lzt_A", "the duplicates line names the chains sharing the alignment"
    if layout == "openfold":
        assert all(len(json.loads(r["files"])) == 2 for r in rows), "a3m and sto read, uniprot_hits skipped"


@pytest.mark.parametrize("layout", ["openfold", "openproteinset", "alignment_db", "colabfold"])
def test_import_writes_the_contract_a3m(layouts, searched, layout, tmp_path):
    """Every layout gives the same alignment rows as the hhblits output it was made from."""
    rows, _ = build_index([layouts[layout]])
    for chain, (sequence, text) in searched.items():
        seq_hash = sequence_hash(sequence)
        row = {**rows[[r["sequence_hash"] for r in rows].index(seq_hash)]}
        row["files"] = json.loads(row["files"])
        out = tmp_path / f"{seq_hash}.a3m"
        result = import_alignment(seq_hash, sequence, row, HHFILTER, out)
        written = out.read_text()
        meta = read_header(written)
        assert meta["tool"] == "import" and meta["source"] == layouts[layout]["name"]
        assert meta["databases"] == {layouts[layout]["name"]: row_digest(row)}
        assert set(meta["files"]) == {label for label, _, _ in row["files"]}
        assert validate_a3m(written, sequence, seq_hash) == result["depth"] == meta["depth"]
        msa, deletions = parse_a3m(written)
        msa0, deletions0 = parse_a3m(text)
        assert np.array_equal(msa, msa0) and np.array_equal(deletions, deletions0)


def test_changed_file_changes_only_its_hash(layouts, searched):
    before = {r["sequence_hash"]: row_digest(r) for r in build_index([layouts["openproteinset"]])[0]}
    path = Path(layouts["openproteinset"]["path"]) / "1ubq_A" / "a3m" / "uniref90_hits.a3m"
    records = a3m_records(path.read_text())
    path.write_text("".join(f">{h}\n{s}\n" for h, s in records[:-1]))
    after = {r["sequence_hash"]: row_digest(r) for r in build_index([layouts["openproteinset"]])[0]}
    changed = [h for h in before if before[h] != after[h]]
    assert changed == [sequence_hash(searched["1ubq_A"][0])]


def test_bad_files_are_one_line_each_and_the_rest_continues(layouts, searched):
    root = Path(layouts["openfold"]["path"])
    (root / "1aki_A" / "mgnify_hits.sto").write_text("# STOCKHOLM 1.0\nq ACD\nh ACDE\n//\n")
    other = searched["1aki_A"][0]
    (root / "1ubq_A" / "extra_hits.a3m").write_text(f">q\n{other}\n")
    rows, problems = build_index([layouts["openfold"]])
    assert rows == []
    reasons = {item: reason for _, item, reason in problems}
    assert "1aki_A/mgnify_hits.sto: row 'h' has 4 alignment columns" in reasons["1aki_A"]
    ubq = sequence_hash(searched["1ubq_A"][0])
    assert reasons["1ubq_A"].startswith(f"1ubq_A/extra_hits.a3m: query {sequence_hash(other)} ({len(other)} residues)")
    assert f"query {ubq}" in reasons["1ubq_A"]


def test_duplicate_chains_are_reported(layouts):
    ops = Path(layouts["openproteinset"]["path"])
    (ops / "duplicate_pdb_chains.txt").write_text("1aki_A 4lzt_A\n1ubq_A 4lzt_A\n")
    rows, problems = build_index([layouts["openproteinset"]])
    assert len(rows) == 2
    assert [reason for _, _, reason in problems] == [
        "duplicate_pdb_chains.txt line 2: chain 4lzt_A is already listed on line 1"]
    db = Path(layouts["alignment_db"]["path"])
    db.write_text(db.read_text()[:-1] + ', "1aki_A": {"db": "shard_0.db", "files": []}}')
    with pytest.raises(A3MError, match="chain 1aki_A appears more than once"):
        build_index([layouts["alignment_db"]])


def test_mismatched_query_and_missing_hash_become_failure_records(layouts, searched, tmp_path):
    """A row whose file does not hold the chain's sequence is refused, naming the file and both
    hashes; a hash without a row gets the caller's reason. Both: failure record + placeholder."""
    rows, _ = build_index([layouts["openfold"]])
    row = {**rows[0], "files": json.loads(rows[0]["files"])}
    wrong = next(s for s, _ in searched.values() if sequence_hash(s) != row["sequence_hash"])
    wrong_hash = sequence_hash(wrong)
    out, failure = tmp_path / "x.a3m", tmp_path / "failures" / "x.json"
    assert import_one(wrong_hash, wrong, row, HHFILTER, out, failure, "") == 0
    reason = json.loads(failure.read_text())["reason"]
    assert f"query {row['sequence_hash']}" in reason and f"chain sequence {wrong_hash} ({len(wrong)} residues)" in reason
    assert "bfd_uniclust_hits.a3m" in reason
    assert read_header(out.read_text())["status"] == "failed" and len(a3m_records(out.read_text())) == 1
    assert import_one(wrong_hash, wrong, None, HHFILTER, out, failure, "no alignment for it") == 0
    assert "no alignment for it" in json.loads(failure.read_text())["reason"]


def test_config_section():
    cfg = resolve_msa_config({"precomputed": {"sources": [{"name": "ops", "layout": "openproteinset", "path": "/x"}]}})
    assert cfg["precomputed"]["sources"][0]["hhfilter"]["max_depth"] == 16384
    assert search_slice(cfg)["precomputed"]["missing"] == "fail"
    assert "precomputed" not in search_slice(resolve_msa_config({})), "no source: search stamps unchanged"
    for bad, match in (({"layout": "zip", "path": "/x"}, "layout 'zip'"), ({"layout": "openfold"}, "path is required"),
                       ({"layout": "openfold", "path": "/x", "hhfilter": {"foo": 1}}, "hhfilter")):
        with pytest.raises(MsaConfigError, match=match):
            resolve_msa_config({"precomputed": {"sources": [{"name": "s", **bad}]}})


def test_shard_digest_follows_exactly_its_hashes_rows():
    from foldworks.msa.rules import import_shard_digest

    digests = {"aa01": "x", "aa02": "y", "bb01": "z"}
    shard = import_shard_digest(digests, "aa01,aa02")
    assert shard == import_shard_digest(digests, ["aa02", "aa01"]), "comma-joined items == list"
    assert import_shard_digest({**digests, "bb01": "changed"}, "aa01,aa02") == shard
    assert import_shard_digest({**digests, "aa02": "changed"}, "aa01,aa02") != shard
    assert import_shard_digest({"aa01": "x"}, "aa01,aa02") != shard, "a row that disappears counts"


def test_shard_planner_imports_known_hashes_and_routes_the_rest(layouts, searched, tmp_path):
    """Inside an msa shard: a hash in the index is imported (input digest = query + its row);
    with ``missing: search`` an unknown hash goes to the search plan, with ``fail`` it gets a
    failure record; the digests of the two routes differ, so adding its alignment reruns it."""
    from foldworks.msa.precomputed import INDEX_COLUMNS
    from foldworks import fsutil
    from foldworks.shards.run import Plan
    from foldworks.shards.stages.msa import import_planner

    rows, _ = build_index([layouts["openproteinset"]])
    known = rows[0]
    index = tmp_path / "index.tsv"
    fsutil.write_tsv_atomic(index, INDEX_COLUMNS, [[known[c] for c in INDEX_COLUMNS]])
    sequences = {sequence_hash(s): s for s, _ in searched.values()}
    unknown = next(h for h in sequences if h != known["sequence_hash"])
    for seq_hash, sequence in sequences.items():
        path = tmp_path / "sequences" / seq_hash[:2] / f"{seq_hash}.fasta"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f">{seq_hash}\n{sequence}\n")
    searched_plans = []

    def search_plan(seq_hash: str) -> Plan:
        searched_plans.append(seq_hash)
        return Plan("search-digest", ["x.a3m"], lambda: ("ok", "sha", ""))

    def params(missing: str) -> str:
        return json.dumps({"precomputed": {"missing": missing, "sources": [{"name": "ops", "hhfilter": HHFILTER}]}})

    common = (str(tmp_path / "sequences"), str(tmp_path / "data/msa"), str(tmp_path / "failures"), None)
    plan_of = import_planner(str(index), params("search"), *common, search_plan)
    status, _, _ = plan_of(known["sequence_hash"]).compute()
    assert status == "ok" and read_header((tmp_path / "data" / f"msa/{known['sequence_hash'][:2]}/"
                                           f"{known['sequence_hash']}.a3m").read_text())["tool"] == "import"
    routed = plan_of(unknown)
    assert searched_plans == [unknown] and routed.input_sha256 != "search-digest"
    failing = import_planner(str(index), params("fail"), *common, None)(unknown)
    status, _, reason = failing.compute()
    assert status == "failed" and f"sequence {unknown}" in reason and "msa sources ops" in reason
    assert (tmp_path / "failures" / "msa" / f"{unknown}.json").is_file()


def test_rebuild_reads_only_changed_groups(layouts, searched, tmp_path, monkeypatch):
    """The CLI keeps a copy of its last index; a rebuild reads only groups whose files changed."""
    from foldworks.msa import precomputed

    out, problems = tmp_path / "out" / "index.tsv", tmp_path / "out" / "problems.tsv"
    argv = ["--sources", json.dumps([layouts["openfold"]]), "--out", str(out), "--problems", str(problems)]
    assert precomputed.main(argv) == 0
    first = read_index(out)
    read = []
    original = precomputed.group_row
    monkeypatch.setattr(precomputed, "group_row", lambda s, g: read.append(g.name) or original(s, g))
    out.unlink()  # Snakemake removes the output before the job runs
    assert precomputed.main(argv) == 0
    assert read == [] and read_index(out) == first
    path = Path(layouts["openfold"]["path"]) / "1ubq_A" / "bfd_uniclust_hits.a3m"
    path.write_text(path.read_text() + f">extra\n{searched['1ubq_A'][0]}\n")
    assert precomputed.main(argv) == 0
    assert read == ["1ubq_A"]
    changed = {h for h, row in read_index(out).items() if row_digest(row) != row_digest(first[h])}
    assert changed == {sequence_hash(searched["1ubq_A"][0])}


def test_schema_refuses_source_paths_that_are_not_plain(tmp_path):
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from conftest import REPO_ROOT

    config = {"pdb": {"entries": ["1aki"], "source": "/x"}, "experiments": {"e": {"model": "distogram"}},
              "msa": {"precomputed": {"sources": [{"name": "s", "layout": "openfold", "path": "/data/of"}]}}}
    validate(config, str(REPO_ROOT / "workflow/schemas/config.schema.yaml"))
    assert config["msa"]["precomputed"]["missing"] == "fail"
    config["msa"]["precomputed"]["sources"][0]["path"] = "$(touch /tmp/x)"
    with pytest.raises(WorkflowError, match="does not match"):
        validate(config, str(REPO_ROOT / "workflow/schemas/config.schema.yaml"))
