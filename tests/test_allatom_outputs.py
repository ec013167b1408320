"""All-atom outputs: mmCIF writer, PAE JSON, memory guard, all-atom scoring and summary columns.

Real chains from the offline mirror (features built by the real parse/features stages) stand in
for a model's output: writing the reference atoms as a "prediction" and scoring it must give
lDDT 1 and RMSD 0 on every metric; a perturbed copy must score lower.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import gemmi
import numpy as np
import pytest
import torch

from _features_fixture import build_feature_cache
from foldworks.constants import ATOM_ORDER, ATOM_TYPES, BACKBONE_ATOMS, CA_INDEX, RESTYPE_1TO3
from foldworks.evaluate.scoring import METRIC_COLUMNS, read_metrics, score_file, write_metrics
from foldworks.predict.memory import BYTES, PAIR_COPIES, ChainTooLarge, check_memory, estimate_inference_bytes
from foldworks.predict.run import write_prediction
from foldworks.predict.writer import expected_pae, pae_json_text, write_atom37_mmcif, write_ca_mmcif
from foldworks.report.summary import summarise
from foldworks.train.data import load_feature_file

ENTRIES = ("1ubq", "2igd", "1crn")


@pytest.fixture(scope="module")
def features(pdb_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("allatom")
    build_feature_cache(pdb_mirror, cache, ENTRIES)
    return cache / "features"


def reference_outputs(feats: dict[str, np.ndarray], noise: float = 0.0, seed: int = 0) -> dict[str, np.ndarray]:
    """A model output dict holding the reference atoms of a real chain (+ Gaussian noise, Å).

    Unresolved residues get the CA of the nearest resolved one (a model predicts every residue)."""
    coords = feats["atom_positions"].astype(np.float64).copy()
    mask = feats["atom_mask"].astype(bool).copy()
    resolved = np.flatnonzero(mask[:, CA_INDEX])
    for index in np.flatnonzero(~mask[:, CA_INDEX]):
        nearest = resolved[np.argmin(np.abs(resolved - index))]
        coords[index, CA_INDEX] = coords[nearest, CA_INDEX] + 3.8 * (index - nearest)
        mask[index, CA_INDEX] = True
    coords += np.random.default_rng(seed).normal(0.0, noise, coords.shape) if noise else 0.0
    length = coords.shape[0]
    return {"ca_coords": coords[:, CA_INDEX], "plddt": np.linspace(0.2, 0.9, length),
            "atom37_coords": coords, "atom37_mask": mask}


@pytest.mark.parametrize("target", ["1ubq_A", "2igd_A"])
def test_reference_atoms_score_perfectly_and_noise_scores_lower(features: Path, tmp_path: Path, target: str) -> None:
    feats = load_feature_file(features / f"{target}.npz")
    sequence = str(feats["sequence"])
    rows = {}
    for name, noise in (("exact", 0.0), ("noisy", 1.0)):
        path = tmp_path / name / f"{target}.cif"
        write_prediction(path, sequence, target, reference_outputs(feats, noise))
        rows[name], _ = score_file(path, features, target)
    exact, noisy = rows["exact"], rows["noisy"]
    assert exact["lddt_ca"] == pytest.approx(1.0, abs=1e-9)
    assert exact["lddt_all_atom"] == pytest.approx(1.0, abs=1e-9)
    assert exact["rmsd_ca"] == pytest.approx(0.0, abs=2e-3)  # mmCIF keeps 3 decimals
    assert exact["rmsd_heavy"] == pytest.approx(0.0, abs=2e-3)
    assert exact["tm_score"] == pytest.approx(1.0, abs=1e-6) and exact["gdt_ts"] == pytest.approx(1.0)
    assert 0.3 < noisy["lddt_all_atom"] < 0.9 and 0.3 < noisy["lddt_ca"] < 0.95
    assert noisy["rmsd_heavy"] == pytest.approx(math.sqrt(3.0), rel=0.15)  # 1 Å per axis
    assert exact["mean_plddt"] == pytest.approx(100 * reference_outputs(feats)["plddt"][
        feats["atom_mask"][:, CA_INDEX]].mean(), abs=0.01)


def test_ca_only_prediction_has_empty_all_atom_columns(features: Path, tmp_path: Path) -> None:
    target = "1crn_A"
    feats = load_feature_file(features / f"{target}.npz")
    outputs = reference_outputs(feats)
    path = tmp_path / f"{target}.cif"
    write_ca_mmcif(path, str(feats["sequence"]), outputs["ca_coords"], outputs["plddt"], target)
    row, _ = score_file(path, features, target)
    assert row["lddt_ca"] == pytest.approx(1.0) and math.isnan(row["lddt_all_atom"]) and math.isnan(row["rmsd_heavy"])
    write_metrics(tmp_path / "m.tsv", [row])
    table = read_metrics(tmp_path / "m.tsv")
    assert list(table.columns) == list(METRIC_COLUMNS) and table["lddt_all_atom"].isna().all()
    write_metrics(tmp_path / "old.tsv", [{k: v for k, v in row.items() if k not in ("lddt_all_atom", "rmsd_heavy")}])
    assert read_metrics(tmp_path / "old.tsv")["rmsd_heavy"].isna().all()  # Cα-only scorers' rows still write


def test_written_mmcif_is_valid_all_atom(features: Path, tmp_path: Path) -> None:
    target = "1ubq_A"
    feats = load_feature_file(features / f"{target}.npz")
    sequence = str(feats["sequence"])
    outputs = reference_outputs(feats)
    path = tmp_path / f"{target}.cif"
    write_atom37_mmcif(path, sequence, outputs["atom37_coords"], outputs["atom37_mask"], outputs["plddt"], target)
    assert not list(tmp_path.glob(".*"))  # no temp file left
    doc = gemmi.cif.read(str(path))
    assert list(doc.sole_block().find_values("_entity_poly_seq.mon_id")) == [RESTYPE_1TO3[a] for a in sequence]
    structure = gemmi.read_structure(str(path))
    residues = list(structure[0]["A"])
    assert [r.seqid.num for r in residues] == list(range(1, len(sequence) + 1))
    resolved = feats["atom_mask"][:, CA_INDEX]
    side_chains = 0
    for index, residue in enumerate(residues):
        names = {atom.name for atom in residue}
        assert names == {ATOM_TYPES[s] for s in np.flatnonzero(outputs["atom37_mask"][index])}
        for atom in residue:
            assert atom.element.name == atom.name[0]
            assert atom.b_iso == pytest.approx(100 * outputs["plddt"][index], abs=0.01)
        if resolved[index]:
            assert set(BACKBONE_ATOMS) <= names
            if residue.name not in ("GLY", "ALA"):
                side_chains += bool(names & {"CG", "CG1", "OG", "OG1", "SG"})
    assert side_chains > 40  # ubiquitin: 76 residues, 6 Gly, 2 Ala
    atom = residues[0].find_atom("N", "*")
    assert atom.pos.dist(gemmi.Position(*outputs["atom37_coords"][0, ATOM_ORDER["N"]])) < 1e-3


def test_writer_refuses_bad_arrays(tmp_path: Path) -> None:
    coords, mask = np.zeros((3, 37, 3)), np.zeros((3, 37), bool)
    mask[:, CA_INDEX] = True
    with pytest.raises(ValueError, match="7abc_B: .*do not match length 4"):
        write_atom37_mmcif(tmp_path / "x.cif", "ACDE", coords, mask, np.ones(3), "7abc_B")
    mask[1, CA_INDEX] = False
    with pytest.raises(ValueError, match=r"7abc_B: .*lacks CA at residues \[2\]"):
        write_atom37_mmcif(tmp_path / "x.cif", "ACD", coords, mask, np.ones(3), "7abc_B")
    assert not list(tmp_path.iterdir())


def test_pae_json_has_the_alphafold_db_layout(tmp_path: Path) -> None:
    centers = np.arange(64) * 0.5 + 0.25  # AF2: 64 bins of 0.5 Å, last centre 31.75 Å
    length = 5
    logits = np.full((length, length, 64), -30.0)
    truth = np.add.outer(np.arange(length), np.arange(length)) * 2.0  # 0..16 Å
    logits[np.arange(length)[:, None], np.arange(length)[None, :], (truth / 0.5).astype(int)] = 30.0
    pae = expected_pae(logits, centers)
    assert np.allclose(pae, truth + 0.25, atol=1e-6)
    outputs = {"ca_coords": np.cumsum(np.full((length, 3), 2.2), 0), "plddt": np.full(length, 0.5),
               "pae_logits": logits, "pae_bin_centers": centers}
    n_atoms, mean_pae = write_prediction(tmp_path / "9xyz_A.cif", "ACDEF", "9xyz_A", outputs)
    assert n_atoms == length and mean_pae == pytest.approx(float((truth + 0.25).mean()))
    data = json.loads((tmp_path / "9xyz_A_pae.json").read_text())
    assert isinstance(data, list) and len(data) == 1
    assert set(data[0]) == {"predicted_aligned_error", "max_predicted_aligned_error"}
    matrix = data[0]["predicted_aligned_error"]
    assert len(matrix) == length and all(len(row) == length for row in matrix)
    assert all(isinstance(v, int) for row in matrix for v in row)  # AFDB rounds to integers
    assert np.array_equal(np.array(matrix), np.rint(truth + 0.25))
    assert data[0]["max_predicted_aligned_error"] == 31.75
    with pytest.raises(ValueError, match="square"):
        pae_json_text(np.zeros((2, 3)), 31.75)


def test_memory_guard_names_the_chain_and_the_memory() -> None:
    class Pair(torch.nn.Module):  # sizes as the evoformer family keeps them (``cfg``)
        def __init__(self, **overrides: int) -> None:
            super().__init__()
            self.cfg = {"c_z": 128, "c_m": 256, "n_heads_tri": 4, "n_heads_msa": 8, "max_msa_clusters": 128,
                        "chunk_size": None, **overrides}

    small = estimate_inference_bytes(Pair(), 100, 128)
    large = estimate_inference_bytes(Pair(), 2000, 128)
    assert large / small > (2000 / 100) ** 2  # grows at least with L² (L³ with triangle attention)
    chunked = estimate_inference_bytes(Pair(chunk_size=64), 2000, 128)
    assert large / 4 > chunked > BYTES * PAIR_COPIES * 128 * 2000 ** 2  # chunking bounds the L³ logits
    assert estimate_inference_bytes(torch.nn.Linear(2, 2), 5000, 128) == 0  # no pair representation
    assert check_memory(Pair(), "1abc_A", 100, 128, 8.0) < 8.0
    with pytest.raises(ChainTooLarge, match=r"2big_C: .*2000 residues.*needs an estimated [\d.]+ GiB"):
        check_memory(Pair(), "2big_C", 2000, 128, 8.0)
    check_memory(Pair(), "2big_C", 2000, 128, 0.0)  # 0 = no limit


def test_summary_reports_mean_all_atom_lddt() -> None:
    import pandas as pd

    base = {"lddt_ca": [0.5, 0.7], "rmsd_ca": [3.0, 2.0], "gdt_ts": [0.4, 0.5], "tm_score": [0.4, 0.6]}
    tables = {"allatom": pd.DataFrame({**base, "lddt_all_atom": [0.4, 0.6], "rmsd_heavy": [4.0, 3.0]}),
              "ca_only": pd.DataFrame({**base, "lddt_all_atom": [np.nan, np.nan]}),
              "baseline": pd.DataFrame(base)}
    summary = summarise(tables, {}, {"n_bootstrap": 50}).set_index("experiment")
    assert summary.loc["allatom", "lddt_all_atom_mean"] == pytest.approx(0.5)
    assert summary.loc["allatom", "rmsd_heavy_mean"] == pytest.approx(3.5)
    assert summary[["lddt_all_atom_mean", "rmsd_heavy_mean"]].loc[["ca_only", "baseline"]].isna().all().all()
    assert summary.loc["ca_only", "lddt_ca_mean"] == pytest.approx(0.6)


@pytest.fixture(scope="module")
def evoformer_checkpoint(features: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny evoformer (with PAE head) trained 2 steps through the real trainer CLI."""
    from foldworks.train.__main__ import main as train_main

    out = tmp_path_factory.mktemp("evo") / "ckpt"
    params = {"model": "evoformer",
              "model_config": {"preset": "cpu_small", "templates": False, "num_recycle": 0,
                               "num_evoformer_blocks": 1, "data": {"max_msa_clusters": 8, "max_extra_msa": 8}},
              "data": {"crop_size": 24, "batch_size": 2, "max_msa_rows": 4},
              "trainer": {"max_steps": 2, "val_every_n_steps": 2, "warmup_steps": 1}}
    assert train_main(["--experiment", "evo", "--params", json.dumps(params), "--chains",
                       str(features.parent / "chains.parquet"), "--features-dir", str(features),
                       "--out-dir", str(out), "--threads", "1"]) == 0
    return out / "best.ckpt"


def test_all_atom_family_predicts_and_evaluates_end_to_end(features: Path, evoformer_checkpoint: Path,
                                                           tmp_path: Path) -> None:
    import csv

    from foldworks.evaluate.__main__ import main as evaluate_main
    from foldworks.predict.__main__ import main as predict_main

    chains = features.parent / "chains.parquet"
    out = tmp_path / "pred"
    assert predict_main(["--checkpoint", str(evoformer_checkpoint), "--chains", str(chains), "--features-dir",
                         str(features), "--out-dir", str(out), "--splits", "test", "--train-subset", "1",
                         "--max-memory-gb", "4"]) == 0
    index = list(csv.DictReader(open(out / "index.tsv"), delimiter="\t"))
    assert [r["split"] for r in index] == ["test", "train"]
    for row in index:
        cif = out / ("train" if row["split"] == "train" else "") / f"{row['target']}.cif"
        structure = gemmi.read_structure(str(cif))
        residues = list(structure[0]["A"])
        assert len(residues) == int(row["length"]) and int(row["n_atoms"]) == sum(len(r) for r in residues)
        assert all({"N", "CA", "C", "O"} <= {a.name for a in r} for r in residues)
        assert sum(len(r) > 5 for r in residues) > len(residues) // 2  # side chains built
        pae = json.loads(cif.with_name(f"{row['target']}_pae.json").read_text())[0]
        assert np.array(pae["predicted_aligned_error"]).shape == (len(residues),) * 2
        assert float(row["mean_pae"]) <= pae["max_predicted_aligned_error"]
    metrics = tmp_path / "m.tsv"
    assert evaluate_main(["--predictions", str(out), "--features-dir", str(features), "--out", str(metrics),
                          "--chains", str(chains)]) == 0
    table = read_metrics(metrics)
    assert list(table["target"]) == [index[0]["target"]]
    assert 0.0 <= table["lddt_all_atom"].iloc[0] <= 1.0 and table["rmsd_heavy"].iloc[0] > 0.0
    assert not list(out.rglob(".*"))  # no temp files left behind


def test_predict_refuses_a_chain_over_the_memory_limit(features: Path, evoformer_checkpoint: Path,
                                                      tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from foldworks.predict.__main__ import main as predict_main

    args = ["--checkpoint", str(evoformer_checkpoint), "--chains", str(features.parent / "chains.parquet"),
            "--features-dir", str(features), "--out-dir", str(tmp_path / "pred"), "--splits", "test"]
    assert predict_main(args + ["--max-memory-gb", "0.00001"]) == 1
    assert "2igd_A: predicting the whole chain (61 residues" in caplog.text and "GiB" in caplog.text
    assert not (tmp_path / "pred").exists() or not list((tmp_path / "pred").glob("*.cif"))
