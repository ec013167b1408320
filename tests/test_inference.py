"""inference: a FASTA of sequences (no structure) through the rules, with the real aligner, on a
tiny trained evoformer checkpoint (PAE head): mmCIF + PAE JSON + ranking; bad records."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import gemmi
import numpy as np
import pandas as pd
import pytest
import yaml

from _features_fixture import build_feature_cache
from conftest import require_tool
from conftest import run_snakemake as snakemake
from foldworks.constants import RESTYPE_1TO3
from foldworks.ids import sequence_hash
from foldworks.inference.__main__ import main as inference_main

ENTRIES = ("1crn", "5pti", "2igd", "1l2y", "1ubq", "1fki")
#: The demo's training crop (config/config.yaml, evoformer data.crop_size): one query is longer.
DEMO_CROP = 64


@pytest.fixture(scope="module")
def trained(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    """Mirror chains (sequences) and a tiny evoformer with a PAE head trained 2 steps."""
    from foldworks.train.__main__ import main as train_main

    cache = tmp_path_factory.mktemp("inference_cache")
    build_feature_cache(pdb_mirror, cache, ENTRIES)
    params = {"model": "evoformer",
              "model_config": {"preset": "cpu_small", "templates": False, "num_recycle": 0,
                               "num_evoformer_blocks": 1, "data": {"max_msa_clusters": 8, "max_extra_msa": 8}},
              "data": {"crop_size": 24, "batch_size": 2, "max_msa_rows": 4},
              "trainer": {"max_steps": 2, "val_every_n_steps": 2, "warmup_steps": 1}}
    assert train_main(["--experiment", "evo", "--params", json.dumps(params), "--chains",
                       str(cache / "chains.parquet"), "--features-dir", str(cache / "features"),
                       "--out-dir", str(cache / "ckpt"), "--threads", "1"]) == 0
    return pd.read_parquet(cache / "chains.parquet").set_index("entry"), cache / "ckpt" / "best.ckpt"


def _queries(chains: pd.DataFrame) -> dict[str, str]:
    """Three mirror sequences, one longer than the demo crop, keyed by the FASTA header."""
    queries = {f"crambin|{chains.loc['1crn', 'chain']} plant": chains.loc["1crn", "sequence"],
               "bpti": chains.loc["5pti", "sequence"], "ubiquitin": chains.loc["1ubq", "sequence"]}
    assert max(map(len, queries.values())) > DEMO_CROP > min(map(len, queries.values()))
    return queries


@pytest.fixture(scope="module")
def workflow_run(trained, pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory):
    for tool in ("hhblits", "ffindex_build"):
        require_tool(tool)
    chains, checkpoint = trained
    workdir = tmp_path_factory.mktemp("inference_workflow")
    queries = _queries(chains)
    text = "".join(f">{header}\n{seq[:30]}\n{seq[30:]}\n" for header, seq in queries.items())
    text += f">ubiquitin copy\n{queries['ubiquitin'].lower()}\n>bad\nMKTBAYIAK\n>empty\n"
    (workdir / "queries.fasta").write_text(text)
    crambin = queries["crambin|A plant"]
    (workdir / "a3m").mkdir()  # a precomputed alignment for one record: used instead of a search
    (workdir / "a3m/crambin_A.a3m").write_text(f">crambin\n{crambin}\n>homolog\n{'G' * 5}{crambin[5:]}\n")
    (workdir / "db.fasta").write_text("".join(f">{e}\n{s}\n" for e, s in chains["sequence"].items()))
    config = {"pdb": {"entries": ["1crn"], "source": str(pdb_mirror)},
              "msa": {"databases": [{"name": "foldworks", "fasta": [str(workdir / "db.fasta")], "iterations": 1}]},
              "inference": {"fasta": str(workdir / "queries.fasta"), "checkpoint": str(checkpoint),
                            "alignments_dir": str(workdir / "a3m")}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    stopped = snakemake(workdir, "inference", timeout=600)
    stopped_ranking = (workdir / "results/inference/ranking.tsv").exists()
    result = snakemake(workdir, "inference", "--keep-going", timeout=600)
    assert (workdir / "results/inference/ranking.tsv").exists(), result.stderr[-6000:]
    return workdir, queries, (stopped, stopped_ranking, result)


@pytest.mark.slow
def test_fasta_predicted_end_to_end(workflow_run) -> None:
    workdir, queries, _ = workflow_run
    out = workdir / "results/inference"
    ranking = list(csv.DictReader(open(out / "ranking.tsv"), delimiter="\t"))
    by_name = {row["name"]: row for row in ranking}
    assert set(by_name) == {"crambin_A", "bpti", "ubiquitin", "ubiquitin_2", "bad", "empty"}
    expected = {"crambin_A": queries["crambin|A plant"], "bpti": queries["bpti"],
                "ubiquitin": queries["ubiquitin"], "ubiquitin_2": queries["ubiquitin"]}
    confidences = [float(row["ranking_confidence"]) for row in ranking[:4]]
    assert confidences == sorted(confidences, reverse=True)
    for name, sequence in expected.items():
        row = by_name[name]
        assert (row["status"], row["sequence_hash"], int(row["length"])) == ("ok", sequence_hash(sequence), len(sequence))
        structure = gemmi.read_structure(str(out / f"{name}.cif"))
        residues = list(structure[0]["A"])
        assert [r.name for r in residues] == [RESTYPE_1TO3[a] for a in sequence]  # whole sequence, no crop
        assert all({"N", "CA", "C", "O"} <= {a.name for a in r} for r in residues)
        b = np.array([r[0].b_iso for r in residues])
        assert float(row["mean_plddt"]) == pytest.approx(b.mean(), abs=0.05)
        assert float(row["ranking_confidence"]) == pytest.approx(float(row["mean_plddt"]))
        pae = json.loads((out / f"{name}_pae.json").read_text())[0]
        assert np.array(pae["predicted_aligned_error"]).shape == (len(sequence),) * 2
        assert 0.0 < float(row["ptm"]) < 1.0
    # each unique sequence without a precomputed alignment searched once, with the msa stage's tool
    a3ms = sorted(p.stem for p in (out / "msa").glob("*.a3m"))
    assert a3ms == sorted({sequence_hash(queries["bpti"]), sequence_hash(queries["ubiquitin"])})
    record = json.loads((out / "records/ubiquitin.json").read_text())
    assert record["msa_source"] == "hhblits" and record["msa_rows"] >= 1
    record = json.loads((out / "records/crambin_A.json").read_text())
    assert (record["msa_source"], record["msa_rows"]) == ("a3m", 2)
    assert not list(out.rglob(".*"))  # no temp files left behind


@pytest.mark.slow
def test_bad_records_are_named_and_skipped_with_keep_going(workflow_run) -> None:
    workdir, _, (stopped, stopped_ranking, kept_going) = workflow_run
    assert stopped.returncode != 0 and not stopped_ranking  # without --keep-going: stops, no ranking
    for result in (stopped, kept_going):  # the failed job's log line names the record
        assert "record 'bad': invalid letter 'B' at position 4" in result.stderr or "record 'empty'" in result.stderr
    assert "record 'bad': invalid letter 'B' at position 4" in kept_going.stderr
    assert "record 'empty': empty sequence" in kept_going.stderr
    assert kept_going.returncode != 0  # the refused records' jobs fail; everything else ran
    ranking = {row["name"]: row for row in csv.DictReader(open(workdir / "results/inference/ranking.tsv"),
                                                          delimiter="\t")}
    assert ranking["bad"]["status"] == "invalid" and "invalid letter 'B' at position 4" in ranking["bad"]["reason"]
    assert ranking["empty"]["status"] == "invalid" and ranking["empty"]["reason"].endswith("record 'empty': empty sequence")
    assert not list((workdir / "results/inference").glob("bad*")) and not list((workdir / "results/inference").glob("empty*"))
    again = snakemake(workdir, "results/inference/ranking.tsv", "-n", timeout=300)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_memory_guard_refuses_a_long_record_by_name(trained, tmp_path: Path) -> None:
    chains, checkpoint = trained
    sequence = chains.loc["1ubq", "sequence"]
    (tmp_path / "stale.cif").write_text("old")  # a previous prediction of the record is removed
    (tmp_path / "stale_pae.json").write_text("old")
    args = ["predict", "--checkpoint", str(checkpoint), "--name", "stale", "--sequence", sequence,
            "--out-dir", str(tmp_path), "--record", str(tmp_path / "records/stale.json")]
    assert inference_main(args + ["--settings", json.dumps({"max_memory_gb": 1e-6})]) == 0
    record = json.loads((tmp_path / "records/stale.json").read_text())
    assert record["status"] == "refused"
    assert record["reason"].startswith(f"stale: predicting the whole chain ({len(sequence)} residues")
    assert not (tmp_path / "stale.cif").exists() and not (tmp_path / "stale_pae.json").exists()
    # no alignment and no single-sequence fallback: refused as the features stage refuses it
    assert inference_main(args + ["--settings", "{}"]) == 0
    record = json.loads((tmp_path / "records/stale.json").read_text())
    assert record["status"] == "failed" and "allow_single_sequence_fallback is false" in record["reason"]
    assert inference_main(args + ["--settings", json.dumps({"allow_single_sequence_fallback": True})]) == 0
    record = json.loads((tmp_path / "records/stale.json").read_text())
    assert record["status"] == "ok" and record["msa_source"] == "single_sequence_fallback"
    assert (tmp_path / "stale.cif").exists() and (tmp_path / "stale_pae.json").exists()
