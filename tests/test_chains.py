"""The chains stage: table columns, filters, MMseqs2 clusters, split groups, random and date
splits, the mmseqs leakage check, sampling weights, failures.tsv and query files.

Real data throughout: the parsed JSONs are produced by the parse stage from mirror entries."""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import require_tool
from foldworks.chains.__main__ import merge_params, write_query_fastas
from foldworks.chains.leakage import LeakageError, check_no_leakage
from foldworks.chains.mmseqs import Hit
from foldworks.chains.splits import (
    DROPPED_REASON, add_clusters_and_splits, assign_splits, link_groups, sample_weights,
)
from foldworks.chains.table import TABLE_COLUMNS, EmptyDatasetError, apply_filters, read_parsed_records, rows_to_frame
from foldworks.ids import sequence_hash
from foldworks.parse import parse_entry, write_parsed

# Lysozymes (1AKI, 4LZT hen; 2NWD human; 1HML alpha-lactalbumin), crambin (1CRN, 3U7T), FKBP
# (1FKI, 3O5R), ubiquitin, streptavidin (1STP, 2RTG), BPTI, protein G, T4 lysozyme (205L, 3LZM),
# B-DNA (1BNA).
ENTRIES = ("1aki", "4lzt", "2nwd", "1hml", "1crn", "3u7t", "1fki", "3o5r", "1ubq", "1stp", "2rtg", "5pti",
           "2igd", "205l", "3lzm", "1bna")
MIN_ID, COV = 0.4, 0.8


@pytest.fixture(scope="module")
def parsed_dir(pdb_mirror: Path, tmp_path_factory) -> Path:
    """``{entry}.json`` (+ npz) of the real entries above, written by the parse stage."""
    out = tmp_path_factory.mktemp("parsed")
    for entry in ENTRIES:
        write_parsed(parse_entry(pdb_mirror / f"{entry}.cif.gz", entry), out / f"{entry}.npz", out / f"{entry}.json")
    return out


@pytest.fixture(scope="module")
def frame(parsed_dir: Path) -> pd.DataFrame:
    return rows_to_frame(read_parsed_records(parsed_dir.glob("*.json"))[0])


@pytest.fixture(scope="module")
def random_split(frame: pd.DataFrame) -> pd.DataFrame:
    """Random split of every chain twice (second copy under a renamed entry): identical sequences."""
    require_tool("mmseqs")
    doubled = pd.concat([frame, frame.assign(entry="9" + frame["entry"].str[1:])], ignore_index=True)
    passed = apply_filters(doubled, {"molecule_types": ["protein"]})
    return add_clusters_and_splits(passed, MIN_ID, COV, {"test": 0.3, "val": 0.15, "seed": 0}, threads=2)


def _target(rows: pd.DataFrame) -> list[str]:
    return sorted(rows["entry"] + "_" + rows["chain"])


def test_table_columns_carry_entry_and_chain_metadata(frame) -> None:
    assert list(frame.columns) == list(TABLE_COLUMNS)
    hml = frame.set_index(["entry", "chain"]).loc[("1hml", "A")]
    assert (hml["method"], hml["resolution"], hml["n_models"]) == ("X-RAY DIFFRACTION", 1.7, 1)
    assert (hml["release_date"], hml["deposition_date"]) == ("1995-01-26", "1994-09-29")
    assert (hml["entity_id"], hml["label_asym_id"], hml["molecule_type"], hml["length"]) == ("1", "A", "protein", 142)
    assert (hml["ions"], hml["ligands"]) == ("CA,ZN", "")  # SO4 is a crystallisation aid, removed
    assert frame.set_index(["entry", "chain"]).loc[("1stp", "A"), "ligands"] == "BTN"
    dna = frame[frame["entry"] == "1bna"]
    assert dna["molecule_type"].tolist() == ["dna", "dna"] and dna["length"].tolist() == [12, 12]
    assert str(frame["deposition_date"].dtype) == "string" and frame["resolution"].dtype == "float64"


def test_filters_mark_reasons_log_removals_and_keep_rows(frame, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="foldworks.chains.table"):
        out = apply_filters(frame, {"molecule_types": ["protein"], "resolution_max": 1.2, "length_min": 50})
    reasons = dict(zip(out["entry"] + "_" + out["chain"], out["filter_reason"]))
    assert reasons["1bna_A"] == "molecule_types" and reasons["1aki_A"] == "resolution_max"  # 1.5 Å
    assert reasons["1crn_A"] == "resolution_max" and reasons["3u7t_A"] == "length_min"  # 1.5 Å; 0.85 Å, 46 aa
    assert reasons["2nwd_X"] == "" and reasons["4lzt_A"] == ""  # 1.04 Å, 0.95 Å
    assert len(out) == len(frame) and out["passed_filters"].sum() == (out["filter_reason"] == "").sum()
    logged = [r.getMessage() for r in caplog.records]
    for name in ("molecule_types", "resolution_max", "length_min"):
        assert any(m.startswith(f"filter {name} removed") for m in logged)


def test_backbone_filter_drops_ca_only_chains_and_passes_other_polymers(frame) -> None:
    protein = frame[frame["molecule_type"] == "protein"]
    assert (protein["backbone_fraction"] > 0.7).all()  # full-atom entries; unmodelled residues count against
    assert (protein["backbone_fraction"] <= protein["resolved_fraction"]).all()
    assert frame.loc[frame["molecule_type"] == "dna", "backbone_fraction"].isna().all()
    ca_only = frame.assign(backbone_fraction=frame["backbone_fraction"].where(frame["entry"] != "1ubq", 0.0))
    out = apply_filters(ca_only, {"min_backbone_fraction": 0.5})
    reasons = dict(zip(out["entry"] + "_" + out["chain"], out["filter_reason"]))
    assert reasons["1ubq_A"] == "min_backbone_fraction" and reasons["1bna_A"] == "" and reasons["1crn_A"] == ""


def test_filter_removing_everything_is_an_error(frame) -> None:
    with pytest.raises(EmptyDatasetError, match="length_min"):
        apply_filters(frame, {"length_min": 10_000})


def test_link_groups_joins_clusters_by_hits() -> None:
    membership = {"a": "a", "b": "a", "c": "c", "d": "d", "e": "e"}
    groups = link_groups(membership, [Hit("b", "c", 0.5, 0.9, 0.9), Hit("d", "c", 0.45, 0.85, 0.9)])
    assert groups == {"a": "a", "b": "a", "c": "a", "d": "a", "e": "e"}


def test_assign_splits_is_deterministic_whole_group_and_nonempty() -> None:
    sizes = {f"c{i}": 1 + i % 3 for i in range(40)}
    first = assign_splits(sizes, {"test": 0.2, "val": 0.1}, seed=7)
    assert first == assign_splits(sizes, {"test": 0.2, "val": 0.1}, seed=7)
    assert first != assign_splits(sizes, {"test": 0.2, "val": 0.1}, seed=8)
    chains = {name: sum(sizes[c] for c, s in first.items() if s == name) for name in ("train", "val", "test")}
    total = sum(sizes.values())
    assert 0 < chains["test"] <= 0.2 * total and 0 < chains["val"] <= 0.1 * total
    tiny = assign_splits({"big": 10, "small": 2, "other": 5}, {"test": 0.05, "val": 0.0}, seed=0)
    assert tiny == {"big": "train", "small": "test", "other": "train"}  # smallest group, never the big one


def test_sample_weight_formula() -> None:
    # (1 / cluster_size) * max(min(L, 512), 256) / 512
    weights = sample_weights(pd.Series([100, 400, 1000, 300]), pd.Series([2, 1, 4, 0]))
    assert weights.tolist() == pytest.approx([0.25, 400 / 512, 0.25, 0.0])


def test_random_split_is_leak_free_and_weighted(random_split) -> None:
    out = random_split
    rep = dict(zip(out["entry"], out["cluster"]))
    assert rep["1aki"] == rep["4lzt"] == rep["2nwd"] and rep["1crn"] == rep["3u7t"] and rep["1stp"] != rep["1aki"]
    assert set(out.loc[out["passed_filters"], "split"]) == {"train", "val", "test"}
    assert (out.loc[~out["passed_filters"], "split"] == "").all()
    assert out.groupby("sequence_hash")["split"].nunique().max() == 1
    lysozymes = out[out["entry"].isin(["1aki", "4lzt", "2nwd"])]
    assert lysozymes["split"].nunique() == 1 and lysozymes["cluster_size"].iloc[0] >= 6  # 3 entries x 2 copies
    kept = out[out["passed_filters"]]
    expected = (kept["length"].clip(256, 512) / 512) / kept["cluster"].map(kept["cluster"].value_counts())
    assert kept["sample_weight"].tolist() == pytest.approx(expected.tolist())
    assert check_no_leakage(out, MIN_ID, COV, threads=2) == kept.loc[kept["split"] != "train", "sequence_hash"].nunique()


def test_date_split_tests_recent_chains_and_drops_their_old_homologs(frame) -> None:
    require_tool("mmseqs")
    passed = apply_filters(frame, {"molecule_types": ["protein"]})
    out = add_clusters_and_splits(passed, MIN_ID, COV, {"val": 0.2, "seed": 0, "test_release_after": "2005-01-01"}, 2)
    split = dict(zip(out["entry"] + "_" + out["chain"], out["split"]))
    assert _target(out[out["split"] == "test"]) == ["2nwd_X", "3o5r_A", "3u7t_A"]  # released 2006, 2011, 2012
    dropped = out[out["filter_reason"] == DROPPED_REASON]
    assert {"1aki_A", "4lzt_A", "1crn_A"} <= set(_target(dropped))  # hen lysozymes, crambin
    assert (dropped["split"] == "").all() and not dropped["passed_filters"].any()
    assert (dropped["release_date"] <= "2005-01-01").all() and (dropped["sample_weight"] == 0).all()
    assert split["1ubq_A"] in ("train", "val") and "val" in split.values() and "train" in split.values()
    with pytest.raises(EmptyDatasetError, match="2030-01-01"):  # raised before any mmseqs run
        add_clusters_and_splits(passed, MIN_ID, COV, {"val": 0.2, "seed": 0, "test_release_after": "2030-01-01"})


def test_leakage_check_fails_on_a_leaking_assignment(random_split) -> None:
    out = random_split
    leaky = out.copy()
    in_split = leaky["split"] != ""
    leaky.loc[in_split, "cluster"] = leaky.loc[in_split, "sequence_hash"]  # hide it from the bookkeeping check
    leaky.loc[in_split, "split_group"] = leaky.loc[in_split, "sequence_hash"]
    leaky.loc[in_split, "split"] = "train"
    leaky.loc[leaky["entry"].isin(["2nwd", "9nwd"]), "split"] = "test"  # human vs hen lysozymes in train
    with pytest.raises(LeakageError, match=r"2nwd_X/9nwd_X \(test\) ~ 1aki_A/4lzt_A/9aki_A/9lzt_A \(train\): identity 0\.6"):
        check_no_leakage(leaky, MIN_ID, COV, threads=2)
    shared = out.copy()
    shared.loc[shared["entry"] == "1aki", "split"] = "val"  # 1AKI now splits its sequence from 4LZT
    with pytest.raises(LeakageError, match=r"sequence_hash \w+ spans several splits: 1aki_A \(val\), 4lzt_A"):
        check_no_leakage(shared, MIN_ID, COV)


def test_merge_params_fills_defaults_per_section() -> None:
    params = merge_params({"splits": {"test_release_after": "2001-01-01"}})
    assert params["splits"] == {"val": 0.1, "test": 0.15, "seed": 0, "test_release_after": "2001-01-01"}
    with pytest.raises(ValueError, match="clusterin"):
        merge_params({"clusterin": {}})


def _chains_cli(parsed: list[Path], out: Path, params: dict, source: list[str] | None = None) -> subprocess.CompletedProcess:
    """The CLI over ``--parsed`` files, or over ``source`` arguments (``--entries``/``--parsed-dir``)."""
    cmd = [sys.executable, "-m", "foldworks.chains", *(source or ["--parsed", *map(str, parsed)]), "--out-table",
           str(out / "chains.parquet"), "--out-fasta", str(out / "chains.fasta"), "--sequences-dir",
           str(out / "sequences"), "--failures", str(out / "failures.tsv"), "--params", json.dumps(params),
           "--threads", "2"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_cli_writes_table_and_failures_of_a_truncated_real_file(parsed_dir, pdb_mirror, tmp_path) -> None:
    require_tool("mmseqs")
    text = gzip.decompress((pdb_mirror / "1ubi.pdb.gz").read_bytes())
    (tmp_path / "9ubi.pdb.gz").write_bytes(gzip.compress(text[: len(text) // 2]))  # cut mid-ATOM records
    raw = gzip.decompress((pdb_mirror / "1crn.cif.gz").read_bytes())
    (tmp_path / "9crn.cif.gz").write_bytes(gzip.compress(raw)[:-200])  # truncated gzip stream
    for entry, name in (("9ubi", "9ubi.pdb.gz"), ("9crn", "9crn.cif.gz")):
        parsed = parse_entry(tmp_path / name, entry)
        write_parsed(parsed, tmp_path / f"{entry}.npz", tmp_path / f"{entry}.json")
    jsons = sorted(parsed_dir.glob("*.json")) + [tmp_path / "9ubi.json", tmp_path / "9crn.json"]
    result = _chains_cli(jsons, tmp_path, {"splits": {"test_release_after": "2005-01-01", "val": 0.2}})
    assert result.returncode == 0, result.stderr
    failures = pd.read_csv(tmp_path / "failures.tsv", sep="\t")
    assert failures["entry"].tolist() == ["9crn", "9ubi"] and (failures["stage"] == "parse").all()
    assert failures["reason"].str.contains("9crn|9ubi").all() and not failures["reason"].str.contains("\n").any()
    table = pd.read_parquet(tmp_path / "chains.parquet")
    assert {"deposition_date", "n_models", "ions", "ligands", "cluster", "split_group", "cluster_size",
            "sample_weight", "split", "passed_filters", "filter_reason"} <= set(table.columns)
    assert _target(table[table["split"] == "test"]) == ["2nwd_X", "3o5r_A", "3u7t_A"]
    assert "leakage check passed" in result.stderr


def test_cli_reads_only_the_entries_of_a_list_file(parsed_dir, tmp_path) -> None:
    """The workflow's form (one list file, not one argument per entry): unlisted parsed files in the
    folder are ignored, and a listed entry without a parsed file is a failure row, not a crash."""
    require_tool("mmseqs")
    listed = ["1aki", "1crn", "1fki", "1stp", "1ubq", "2igd", "2nwd", "3lzm", "3u7t", "5pti", "9zzz"]
    listing = tmp_path / "entries.txt"
    listing.write_text("".join(f"{entry}\n" for entry in listed))
    result = _chains_cli([], tmp_path, {}, ["--entries", str(listing), "--parsed-dir", str(parsed_dir)])
    assert result.returncode == 0, result.stderr
    table = pd.read_parquet(tmp_path / "chains.parquet")
    assert sorted(set(table["entry"])) == listed[:-1]
    failures = pd.read_csv(tmp_path / "failures.tsv", sep="\t")
    assert failures["entry"].tolist() == ["9zzz"] and "9zzz.json unreadable" in failures["reason"][0]


def test_cli_refuses_a_bad_entry_list(parsed_dir, tmp_path) -> None:
    listing = tmp_path / "entries.txt"
    listing.write_text("1aki\n../x\n")
    result = _chains_cli([], tmp_path, {}, ["--entries", str(listing), "--parsed-dir", str(parsed_dir)])
    assert result.returncode == 1 and "line 2: '../x' is not a lower-case PDB ID" in result.stderr
    assert not (tmp_path / "chains.parquet").exists()
    alone = _chains_cli([], tmp_path, {}, ["--entries", str(listing)])
    assert alone.returncode == 2 and "--entries and --parsed-dir go together" in alone.stderr


def test_cli_fails_clearly_when_filters_remove_everything(parsed_dir, tmp_path) -> None:
    result = _chains_cli(sorted(parsed_dir.glob("*.json")), tmp_path, {"filters": {"length_min": 5000}})
    assert result.returncode == 1 and "removed every remaining chain" in result.stderr
    assert not (tmp_path / "chains.parquet").exists()


def test_query_fastas_are_content_addressed_and_not_rewritten(frame, tmp_path) -> None:
    passed = apply_filters(frame, {"molecule_types": ["protein"]})
    out_dir = tmp_path / "sequences"
    n_unique = passed.loc[passed["passed_filters"], "sequence_hash"].nunique()
    assert write_query_fastas(passed, out_dir) == n_unique
    ubq = frame.loc[frame["entry"] == "1ubq", "sequence"].iloc[0]
    path = out_dir / sequence_hash(ubq)[:2] / f"{sequence_hash(ubq)}.fasta"
    assert path.read_text() == f">{sequence_hash(ubq)}\n{ubq}\n"
    mtime = path.stat().st_mtime_ns
    assert write_query_fastas(passed, out_dir) == 0
    assert path.stat().st_mtime_ns == mtime
