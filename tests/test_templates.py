"""Template database, hhsearch, per-chain selection and features on real mirror entries.

A few globins, trypsin-like proteases and lysozymes are parsed into a temporary directory; the
template database is built from their chains and every unique sequence is searched with the
real hhsearch (single-sequence queries: no MSA stage), which takes a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import require_tool
from foldworks.chains.table import read_parsed_records, rows_to_frame
from foldworks.parse.core import parse_entry
from foldworks.parse.io import write_parsed
from foldworks.templates import db, search, select
from foldworks.templates.config import resolve_templates_config, search_slice, select_slice
from foldworks.templates.hhr import Hit, parse_hhr

GLOBINS = ["2hhb", "4hhb"]
TRYPSINS = ["1a4w", "1gbt", "1sfi", "3ptb", "4zhl"]
ENTRIES = GLOBINS + TRYPSINS + ["1aki", "4lzt", "1crn"]


def build_table(pdb_mirror: Path, parsed_dir: Path, entries: list[str]) -> pd.DataFrame:
    """Parse ``entries`` of the mirror into ``parsed_dir``; their chain table, every chain passed."""
    parsed_dir.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        source = next(pdb_mirror.glob(f"{entry}.*"))
        write_parsed(parse_entry(source, entry), parsed_dir / f"{entry}.npz", parsed_dir / f"{entry}.json")
    rows, failed = read_parsed_records(sorted(parsed_dir.glob("*.json")))
    assert not failed
    return rows_to_frame(rows).assign(passed_filters=True)


def write_queries(table: pd.DataFrame, sequences_dir: Path) -> list[str]:
    """One-sequence FASTA per unique hash in the layout of data/sequences; the hashes."""
    unique = dict(zip(table["sequence_hash"], table["sequence"]))
    for seq_hash, sequence in unique.items():
        path = sequences_dir / seq_hash[:2] / f"{seq_hash}.fasta"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f">{seq_hash}\n{sequence}\n")
    return sorted(unique)


@pytest.fixture(scope="module")
def run(tmp_path_factory, pdb_mirror) -> dict:
    require_tool("hhsearch")
    root = tmp_path_factory.mktemp("templates")
    table = build_table(pdb_mirror, root / "parsed", ENTRIES)
    table.to_parquet(root / "chains.parquet")
    cfg = resolve_templates_config({"enabled": True, "segment_chars": 0})
    records = db.build_database(root / "chains.parquet", root / "db", chars=0)
    hashes = write_queries(table, root / "sequences")
    code = search.main(["--key", "", "--segment", "all", "--items", ",".join(hashes),
                        "--manifest", str(root / "hits/shards/all.tsv"), "--db-record", str(root / "db/all.json"),
                        "--params", json.dumps(search_slice(cfg)), "--msa-dir", str(root / "msa"),
                        "--sequences-dir", str(root / "sequences"), "--hits-dir", str(root / "hits"),
                        "--failures-dir", str(root / "failures")])
    assert code == 0
    members = db.read_members(root / "db/members.tsv")
    selected = select.select_templates(table, members, root / "hits", 0, select_slice(cfg))
    return {"root": root, "table": table, "records": records, "members": members, "selected": selected, "cfg": cfg}


def _release(table: pd.DataFrame) -> dict[str, str]:
    return {f"{e}_{c}": str(d) for e, c, d in zip(table["entry"], table["chain"], table["release_date"])}


def test_database_holds_every_protein_chain_once_per_sequence(run):
    table, members = run["table"], run["members"]
    assert len(members) == len(table[table["molecule_type"] == "protein"])
    assert run["records"][0]["n_sequences"] == members["sequence_hash"].nunique()
    assert (run["root"] / "db/all_a3m.ffindex").read_text().count("\n") == members["sequence_hash"].nunique()


def test_no_template_from_own_entry_or_released_on_or_after_the_query(run):
    selected, release = run["selected"], _release(run["table"])
    assert len(selected) > 0
    for row in selected.itertuples():
        assert row.template.split("_")[0] != row.query.split("_")[0], row
        assert release[row.template] < release[row.query], row
        assert row.template_release_date == release[row.template] and row.cutoff_date == release[row.query]


def test_globins_and_trypsins_get_family_templates(run):
    selected = run["selected"]
    chosen = selected.groupby("query")["template"].apply(set).to_dict()
    # 2hhb (1984-07-18) may use 4hhb (1984-07-17); the identical chain is a duplicate, the other globin is not
    assert chosen["2hhb_A"] == {"4hhb_B"} and chosen["2hhb_B"] == {"4hhb_A"}
    assert "4hhb_A" not in chosen, "2hhb is released after 4hhb: no template for 4hhb"
    # thrombin (1998) and the 2015 protease get trypsin templates; the earliest trypsin chain stands for its sequence
    assert "3ptb_A" in chosen["1a4w_H"] and {"3ptb_A", "1a4w_H"} <= chosen["4zhl_U"]
    assert not selected["template"].isin(["1gbt_A", "1sfi_A"]).any()
    assert set(selected["query"].str[:4]) <= set(GLOBINS + TRYPSINS), "lysozymes have no earlier homolog here"
    assert (selected.groupby("query")["rank"].apply(lambda r: list(r) == list(range(1, len(r) + 1)))).all()


def test_inference_cutoff_changes_the_set(run):
    cfg = {**select_slice(run["cfg"]), "max_template_date": "2000-01-01"}
    later = select.select_templates(run["table"], run["members"], run["root"] / "hits", 0, cfg)
    chosen = later.groupby("query")["template"].apply(set).to_dict()
    assert chosen["4hhb_A"] == {"2hhb_B"}, "with a fixed date after both, 4hhb may use 2hhb"
    assert "4zhl_U" in chosen and (later["template_release_date"] < "2000-01-01").all()
    early = select.select_templates(run["table"], run["members"], run["root"] / "hits", 0,
                                    {**cfg, "max_template_date": "1984-01-01"})
    # only 3ptb (1983) is older; the trypsins sharing its sequence get none (duplicates of the query)
    assert set(early["template"]) == {"3ptb_A"} and set(early["query"]) == {"1a4w_H", "4zhl_U"}


def test_max_hits_caps_each_chain(run):
    capped = select.select_templates(run["table"], run["members"], run["root"] / "hits", 0,
                                     {**select_slice(run["cfg"]), "max_hits": 1})
    assert capped.groupby("query").size().max() == 1
    best = run["selected"][run["selected"]["rank"] == 1].set_index("query")["template"]
    assert capped.set_index("query")["template"].equals(best)


def test_empty_database_is_a_clear_error(tmp_path):
    table = pd.DataFrame({"entry": ["1bna"], "chain": ["A"], "molecule_type": ["dna"], "sequence": ["CGCGAATTCGCG"],
                          "sequence_hash": ["0" * 20], "release_date": ["1981-01-01"]})
    table.to_parquet(tmp_path / "chains.parquet")
    with pytest.raises(db.EmptyTemplateDatabaseError, match="no protein chain"):
        db.build_database(tmp_path / "chains.parquet", tmp_path / "db", chars=1)
    assert not (tmp_path / "db").exists() or not list((tmp_path / "db").iterdir())


def test_hit_index_pairs_skip_gaps_on_either_side():
    hit = Hit("t", 99.0, 1e-5, 3.0, 3, query_start=2, template_start=5, query_aln="AC-DE", template_aln="A-GDE")
    assert hit.index_pairs() == [(2, 5), (4, 7), (5, 8)]
    assert hit.identity() == 1.0


def test_hhr_without_hits_and_non_hhr_text():
    assert parse_hhr("Query         q\nMatch_columns 10\n\n No Hit   Prob\n\n") == []
    with pytest.raises(ValueError, match="not an hhr file"):
        parse_hhr("<html>")


def test_features_shapes_dtypes_and_mapped_coordinates(run, tmp_path):
    from foldworks.parse.io import load_parsed_chain
    from foldworks.templates import features

    root, selected, table = run["root"], run["selected"], run["table"]
    selected_path = tmp_path / "selected.tsv"
    selected.to_csv(selected_path, sep="\t", index=False)
    targets = ["2hhb_A", "1a4w_H", "4hhb_A"]
    code = features.main(["--key", "all", "--items", ",".join(targets), "--manifest", str(tmp_path / "shards/all.tsv"),
                          "--table", str(root / "chains.parquet"), "--selected", str(selected_path),
                          "--hits-dir", str(root / "hits"), "--parsed-dir", str(root / "parsed"),
                          "--features-dir", str(tmp_path / "features")])
    assert code == 0
    length = dict(zip(table["entry"] + "_" + table["chain"], table["length"]))
    for target in targets:
        with np.load(tmp_path / f"features/{target}.npz", allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
        n_templates, n_res = int((selected["query"] == target).sum()), length[target]
        assert arrays["template_aatype"].shape == (n_templates, n_res) and arrays["template_aatype"].dtype == np.int32
        assert arrays["template_all_atom_positions"].shape == (n_templates, n_res, 37, 3)
        assert arrays["template_all_atom_positions"].dtype == np.float32
        assert arrays["template_all_atom_masks"].shape == (n_templates, n_res, 37)
        assert arrays["template_sum_probs"].shape == (n_templates, 1)
        assert arrays["template_domain_names"].shape == (n_templates,)
        assert arrays["template_aatype"].max(initial=0) <= 21
    with np.load(tmp_path / "features/2hhb_A.npz") as data:
        assert list(data["template_domain_names"]) == [b"4hhb_B"]
        positions, masks, aatype = data["template_all_atom_positions"][0], data["template_all_atom_masks"][0], data["template_aatype"][0]
    hit = next(h for h in search.read_hits(search.hits_path(root / "hits", "all", table.set_index(["entry", "chain"]).loc[("2hhb", "A"), "sequence_hash"]))
               if h.name == selected.set_index("query").loc["2hhb_A", "template_sequence_hash"])
    template = load_parsed_chain(root / "parsed/4hhb.npz", "B")
    pairs = hit.index_pairs()
    assert len(pairs) > 100
    for qi, ti in pairs:
        assert aatype[qi] == template["aatype"][ti]
        np.testing.assert_array_equal(masks[qi], template["atom_mask"][ti])
        np.testing.assert_allclose(positions[qi], template["atom_positions"][ti] * template["atom_mask"][ti][:, None])
    unaligned = sorted(set(range(len(aatype))) - {qi for qi, _ in pairs})
    assert (aatype[unaligned] == 21).all() and not masks[unaligned].any()
    rows = (tmp_path / "shards/all.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[:2] for r in rows] == [[t, "ok"] for t in sorted(targets)]


def _hit(query_aln: str, template_aln: str, cols: int | None = None) -> Hit:
    cols = sum(q != "-" and t != "-" for q, t in zip(query_aln, template_aln)) if cols is None else cols
    return Hit("t", 99.0, 1e-9, float(cols), cols, 0, 0, query_aln, template_aln)


def test_assess_hit_follows_alphafold_rules():
    cfg = select_slice(resolve_templates_config({}))
    query = "ACDEFGHIKLMNPQRSTVWY"  # 20 residues
    assert select.assess_hit(_hit(query, query), query, cfg).startswith("duplicate")
    assert select.assess_hit(_hit(query[:19] + "-", query[:19] + "-"), query, cfg) is None, "19/20 = 0.95 is not > 0.95"
    mutated = query[:10] + "W" + query[11:]
    assert select.assess_hit(_hit(query, mutated), query, cfg) is None, "not a sub-sequence: kept"
    assert "aligned columns" in select.assess_hit(_hit(query[:2] + "-" * 18, query[:2] + "-" * 18), query, cfg)
    short = _hit(query[:9] + "-" * 11, "WWWWWWWWW" + "-" * 11)
    assert "< 10 residues" in select.assess_hit(short, query, cfg)


def test_template_chain_is_earliest_eligible_of_another_entry():
    members = [("1990-01-01", "1aaa", "A"), ("1985-05-05", "1bbb", "B"), ("1985-05-05", "1bbb", "A"), ("", "1ccc", "A")]
    assert select.template_chain(members, "1zzz", "1999-01-01") == ("1985-05-05", "1bbb", "A")
    assert select.template_chain(members, "1bbb", "1999-01-01") == ("1990-01-01", "1aaa", "A")
    assert select.template_chain(members, "1zzz", "1985-05-05") is None, "released on the cutoff day: excluded"
    assert select.template_chain(members, "1zzz", "1985-05-06") == ("1985-05-05", "1bbb", "A")


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="templates.max_template_date"):
        resolve_templates_config({"max_template_date": "2020-13-01"})
    with pytest.raises(ValueError, match="templates.bogus"):
        resolve_templates_config({"bogus": 1})
    assert resolve_templates_config({"hhsearch": {"min_prob": 50}})["hhsearch"]["maxseq"] == 1_000_000


def test_failed_search_is_recorded_and_leaves_no_hits(tmp_path):
    seq_hash = "ab" + "0" * 18
    (tmp_path / "sequences/ab").mkdir(parents=True)
    (tmp_path / "sequences/ab" / f"{seq_hash}.fasta").write_text(">q\nACDEFGHIKLMNPQRSTVWY\n")
    stale = search.hits_path(tmp_path / "hits", "a", seq_hash)
    stale.parent.mkdir(parents=True)
    stale.write_text("stale")
    (tmp_path / "a.json").write_text(json.dumps({"segment": "a", "prefix": str(tmp_path / "missing_db"),
                                                 "n_sequences": 3, "content_sha256": "0" * 64}))
    cfg = resolve_templates_config({})
    assert search.main(["--key", "ab", "--segment", "a", "--items", seq_hash, "--manifest", str(tmp_path / "m.tsv"),
                        "--db-record", str(tmp_path / "a.json"), "--params", json.dumps(search_slice(cfg)),
                        "--msa-dir", str(tmp_path / "msa"), "--sequences-dir", str(tmp_path / "sequences"),
                        "--hits-dir", str(tmp_path / "hits"), "--failures-dir", str(tmp_path / "failures")]) == 0
    row = (tmp_path / "m.tsv").read_text().splitlines()[1].split("\t")
    assert row[:2] == [seq_hash, "failed"] and "hhsearch" in row[5]
    assert not stale.exists()
    assert json.loads((tmp_path / f"failures/templates/{seq_hash}_a.json").read_text())["stage"] == "templates"


def test_pdb_seqres_and_mmcif_directory_give_the_same_templates(run, pdb_mirror, tmp_path):
    """The same chains as a pdb_seqres.txt + the mirror as mmCIF directory: identical segment
    content (so the cached hits apply), dates read from the mmCIF files, identical selection and features."""
    from foldworks.templates import features

    table, root = run["table"], run["root"]
    records = [f">{e}_{c} mol:protein length:{len(s)}  X\n{s}\n" for e, c, s in zip(table["entry"], table["chain"], table["sequence"])]
    (tmp_path / "pdb_seqres.txt").write_text("".join(records) + ">1bna_A mol:na length:12  DNA\nCGCGAATTCGCG\n")
    seqres_records = db.build_database(None, tmp_path / "db", chars=0, seqres=tmp_path / "pdb_seqres.txt")
    assert seqres_records[0]["content_sha256"] == run["records"][0]["content_sha256"]
    members = db.read_members(tmp_path / "db/members.tsv")
    assert (members["release_date"] == "").all()
    dated = select.with_hit_dates(table, members, root / "hits", 0, pdb_mirror, tmp_path / "dates.tsv")
    from foldworks.templates.seqres import read_release_dates

    cached = read_release_dates(tmp_path / "dates.tsv")
    assert cached == dict(zip(table["entry"], table["release_date"].astype(str))), "every entry is hit (by itself)"
    chosen = select.select_templates(table, dated, root / "hits", 0, select_slice(run["cfg"]))
    pd.testing.assert_frame_equal(chosen, run["selected"])
    run["selected"].to_csv(tmp_path / "selected.tsv", sep="\t", index=False)
    out = {}
    for name, extra in (("own", ["--parsed-dir", str(root / "parsed")]),
                        ("seqres", ["--parsed-dir", str(tmp_path / "parsed"), "--mmcif-dir", str(pdb_mirror)])):
        assert features.main(["--key", "all", "--items", "1a4w_H", "--manifest", str(tmp_path / f"{name}/m.tsv"),
                              "--table", str(root / "chains.parquet"), "--selected", str(tmp_path / "selected.tsv"),
                              "--hits-dir", str(root / "hits"), "--features-dir", str(tmp_path / name), *extra]) == 0
        with np.load(tmp_path / f"{name}/1a4w_H.npz") as data:
            out[name] = {key: data[key] for key in data.files}
    assert out["own"]["template_aatype"].shape[0] >= 1
    for key, value in out["own"].items():
        np.testing.assert_array_equal(out["seqres"][key], value, err_msg=key)
