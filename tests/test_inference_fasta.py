"""inference: the query FASTA reader (names, letters, refused records) and the ranking order."""

from __future__ import annotations

import numpy as np
import pytest

from foldworks.ids import sequence_hash
from foldworks.inference.confidence import predicted_tm_score, tm_d0
from foldworks.inference.fasta import FastaError, parse_query_fasta, read_query_fasta, safe_name
from foldworks.inference.run import ranking_rows


def test_records_are_normalised_hashed_and_safely_named(tmp_path):
    path = tmp_path / "q.fasta"
    path.write_text(">sp|P69905|HBA_HUMAN Hemoglobin alpha\nmvlspadk\nTNVKAAW*\n\n>../etc/passwd x\nACDX\n")
    first, second = read_query_fasta(path)
    assert (first.name, first.header) == ("sp_P69905_HBA_HUMAN", "sp|P69905|HBA_HUMAN Hemoglobin alpha")
    assert first.sequence == "MVLSPADKTNVKAAW" and first.sequence_hash == sequence_hash("MVLSPADKTNVKAAW")
    assert second.name == "etc_passwd" and second.sequence == "ACDX" and second.valid


def test_invalid_letter_names_record_and_position():
    records = parse_query_fasta(">good\nACDE\n>bad one\nACDBEF\n>gap\nAC-D\n", "q.fasta")
    assert [r.valid for r in records] == [True, False, False]
    assert records[1].error == ("q.fasta: record 'bad': invalid letter 'B' at position 4 "
                                "(allowed: the 20 standard amino acids and X)")
    assert "record 'gap': invalid letter '-' at position 3" in records[2].error
    assert records[1].sequence == "" and records[1].sequence_hash == ""


def test_empty_record_is_refused_by_name():
    records = parse_query_fasta(">empty\n\n>stop_only\n*\n>ok\nMK\n", "q.fasta")
    assert records[0].error == "q.fasta: record 'empty': empty sequence"
    assert records[1].error == "q.fasta: record 'stop_only': empty sequence"
    assert records[2].valid


def test_duplicate_names_become_unique_ignoring_case():
    records = parse_query_fasta(">x\nAA\n>X\nCC\n>x\nDD\n>\nEE\n>|||\nFF\n")
    assert [r.name for r in records] == ["x", "X_2", "x_3", "record_4", "record_5"]


def test_long_header_is_truncated_and_file_errors_are_raised():
    assert len(safe_name("A" * 200, 1)) == 64
    with pytest.raises(FastaError, match="line 1: sequence data before the first '>' header"):
        parse_query_fasta("ACDE\n>a\nAC\n", "q.fasta")
    with pytest.raises(FastaError, match="no FASTA records"):
        parse_query_fasta("\n\n", "q.fasta")


def test_ranking_orders_by_confidence_then_lists_the_rest_in_file_order():
    records = parse_query_fasta(">a\nAC\n>bad\nB\n>b\nDE\n>c\nFG\n>d\nHI\n")
    predicted = {
        "a": {"sequence_hash": "h1", "length": 2, "mean_plddt": 40.0, "ptm": None, "ranking_confidence": 40.0,
              "status": "ok", "reason": ""},
        "b": {"sequence_hash": "h2", "length": 2, "mean_plddt": 70.0, "ptm": 0.3, "ranking_confidence": 70.0,
              "status": "ok", "reason": ""},
        "c": {"sequence_hash": "h3", "length": 2, "status": "refused", "reason": "c: too big"},
    }
    rows = ranking_rows(records, predicted)
    assert [(r[0], r[6]) for r in rows] == [("b", "ok"), ("a", "ok"), ("bad", "invalid"), ("c", "refused"),
                                           ("d", "missing")]
    assert rows[0][4] == "0.3" and rows[1][4] == "" and "invalid letter 'B'" in rows[2][7]


def test_ptm_of_certain_and_uncertain_logits():
    centers = np.linspace(0.25, 31.75, 64)
    n = 30
    certain = np.full((n, n, 64), -50.0)
    certain[..., 0] = 50.0  # all mass on 0.25 Å
    uncertain = np.full((n, n, 64), -50.0)
    uncertain[..., -1] = 50.0  # all mass on 31.75 Å
    d0 = tm_d0(n)
    assert predicted_tm_score(certain, centers) == pytest.approx(1 / (1 + (0.25 / d0) ** 2))
    assert predicted_tm_score(uncertain, centers) == pytest.approx(1 / (1 + (31.75 / d0) ** 2))
    mixed = uncertain.copy()
    mixed[3] = certain[3]  # one aligned residue with confident errors: pTM is the max over rows
    assert predicted_tm_score(mixed, centers) == pytest.approx(predicted_tm_score(certain, centers))
    assert tm_d0(5) == pytest.approx(tm_d0(19))


def test_alignment_path_prefers_a_precomputed_a3m(tmp_path):
    from foldworks.inference.plan import alignment_path, inference_targets

    first, second, bad = parse_query_fasta(">one\nACDE\n>two\nFGHI\n>bad\nJ\n")
    (tmp_path / "one.a3m").write_text(">one\nACDE\n")
    (tmp_path / f"{second.sequence_hash}.a3m").write_text(">two\nFGHI\n")
    assert alignment_path(first, "out", tmp_path) == str(tmp_path / "one.a3m")
    assert alignment_path(second, "out", tmp_path) == str(tmp_path / f"{second.sequence_hash}.a3m")
    assert alignment_path(first, "out", None) == f"out/msa/{first.sequence_hash}.a3m"
    assert alignment_path(first, "out", tmp_path / "absent") == f"out/msa/{first.sequence_hash}.a3m"
    assert inference_targets([first, second, bad], "out") == ["out/ranking.tsv", "out/records/bad.json"]
    assert inference_targets([], "out") == []


def test_cli_check_query_and_rank(tmp_path, caplog):
    import csv

    from foldworks.inference.__main__ import main

    fasta = tmp_path / "q.fasta"
    fasta.write_text(">good\nMKV\n>bad\nMK1\n")
    assert main(["check", "--fasta", str(fasta), "--name", "good"]) == 0
    assert main(["check", "--fasta", str(fasta), "--name", "bad"]) == 1
    assert "record 'bad': invalid letter '1' at position 3" in caplog.text
    assert main(["check", "--fasta", str(fasta), "--name", "other"]) == 1 and "no record named 'other'" in caplog.text
    assert main(["query", "--sequence", "mkv", "--out", str(tmp_path / "s.fasta")]) == 0
    assert (tmp_path / "s.fasta").read_text() == f">{sequence_hash('MKV')}\nMKV\n"
    assert main(["query", "--sequence", "MK-", "--out", str(tmp_path / "t.fasta")]) == 1
    assert not (tmp_path / "t.fasta").exists()
    assert main(["rank", "--fasta", str(fasta), "--records", "", "--out", str(tmp_path / "ranking.tsv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "ranking.tsv"), delimiter="\t"))
    assert [(r["name"], r["status"]) for r in rows] == [("good", "missing"), ("bad", "invalid")]
