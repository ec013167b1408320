"""Featurisation of structure files, the design command and the checkpoint reader, against ProteinMPNN.

Reference numbers come from the fixture folder (``$FOLDWORKS_MPNN_REFERENCE`` or
``../shared/mpnn_reference``: every chain and checkpoint in its ``manifest.json``) and from
ProteinMPNN's documented behaviour (multi-chain indexing, fixed/tied positions, omit/bias).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from foldworks.design.__main__ import main as design_main
from foldworks.design.__main__ import parse_tied
from foldworks.design.fasta import fmt, read_design_fasta
from foldworks.design.structure import DesignOptions, ParsedChain, StructureInputError, featurize, read_chains
from foldworks.models.mpnn import MPNNModel
from foldworks.models.weights.proteinmpnn import ProteinMPNNWeightsError, read_proteinmpnn, write_proteinmpnn
from test_mpnn_parity import MANIFEST, REF

needs_ref = pytest.mark.skipif(REF is None, reason="ProteinMPNN reference fixtures not found: set "
                               "FOLDWORKS_MPNN_REFERENCE or provide ../shared/mpnn_reference")
MIRROR = Path(__file__).resolve().parents[1].parent / "shared" / "pdb_mirror"
needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="../shared/pdb_mirror not found")
FEATURE_KEYS = ("X", "S", "mask", "chain_M", "chain_M_pos", "residue_idx", "chain_encoding_all")


def small_checkpoint() -> Path:
    """The smallest checkpoint in the fixture folder (fast design tests)."""
    entries = sorted(MANIFEST["checkpoints"].values(), key=lambda e: e["hidden_dim"])
    return REF / entries[0]["file"]


@needs_ref
@pytest.mark.parametrize("chain", list(MANIFEST["chains"]))
def test_featurisation_reproduces_fixture_inputs(chain):
    """Our parser + tied_featurize on pdb/<id>.pdb and on the mirror's mmCIF give inputs.npz exactly."""
    ref = np.load(REF / chain / "inputs.npz")
    sources = [REF / MANIFEST["chains"][chain]["pdb"]]
    if (MIRROR / Path(MANIFEST["chains"][chain]["source"]).name).exists():
        sources.append(MIRROR / Path(MANIFEST["chains"][chain]["source"]).name)
    for source in sources:
        features = featurize(read_chains(source))
        for key in FEATURE_KEYS:
            assert features[key].shape == ref[key].shape, (source, key)
            assert np.array_equal(features[key].numpy(), ref[key]), f"{source}: {key} differs"


@needs_mirror
def test_multichain_indexing_follows_proteinmpnn():
    """1ay7: designed chain B first (0..88), then fixed chain A at 100 + 89 = 189 onwards; 1-based chain codes."""
    chains = read_chains(MIRROR / "1ay7.cif.gz")
    assert list(chains) == ["A", "B"]
    f = featurize(chains, DesignOptions(designed_chains=["B"]))
    n_b, n_a = len(chains["B"].sequence), len(chains["A"].sequence)
    assert f["chain_order"] == ["B", "A"] and n_b == 89
    assert f["residue_idx"][0].tolist() == list(range(n_b)) + [100 + n_b + i for i in range(n_a)]
    assert f["chain_encoding_all"][0].tolist() == [1] * n_b + [2] * n_a
    assert f["chain_M"][0].tolist() == [1.0] * n_b + [0.0] * n_a
    both = featurize(chains)  # all designed: sorted A, B
    assert both["residue_idx"][0, n_a].item() == 100 + n_a and both["chain_order"] == ["A", "B"]


def test_parser_gaps_and_missing_backbone(tmp_path):
    """A numbering gap becomes X with mask 0; a residue without O is masked but keeps its letter."""
    lines = []
    serial = 1
    for resnum, name, atoms in ((1, "GLY", "N CA C O"), (2, "ALA", "N CA C"), (4, "SER", "N CA C O")):
        for atom in atoms.split():
            lines.append(f"ATOM  {serial:5d}  {atom:<3} {name} A{resnum:4d}    {serial:8.3f}{0.0:8.3f}{0.0:8.3f}"
                         f"  1.00  0.00           {atom[0]}")
            serial += 1
    path = tmp_path / "toy.pdb"
    path.write_text("\n".join(lines) + "\nEND\n")
    chain = read_chains(path)["A"]
    assert chain.sequence == "GAXS"
    f = featurize({"A": chain})
    assert f["mask"][0].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert f["S"][0].tolist() == [5, 0, 20, 15] and float(f["X"][0, 2].abs().sum()) == 0.0


def test_option_errors_name_the_item():
    chains = {"A": ParsedChain("GAS", np.zeros((3, 4, 3)))}
    with pytest.raises(StructureInputError, match="chain 'Z' not in structure"):
        featurize(chains, DesignOptions(designed_chains=["Z"]))
    with pytest.raises(StructureInputError, match="chain A position 4 outside 1..3"):
        featurize(chains, DesignOptions(fixed_positions={"A": [4]}))
    assert parse_tied("A:1-2 B:3-4") == [{"A": [1], "B": [3]}, {"A": [2], "B": [4]}]
    with pytest.raises(StructureInputError, match="'x-3' is not a number or range"):
        parse_tied("A:x-3 B:1")
    with pytest.raises(StructureInputError, match="every chain needs the same number of positions"):
        parse_tied("A:1-3 B:1")


@needs_ref
@pytest.mark.parametrize("chain", list(MANIFEST["chains"]))
def test_design_command_reproduces_protein_mpnn_run(tmp_path, chain):
    """Same seed and weights → the FASTA scores and sampled sequence protein_mpnn_run.py wrote."""
    for name, entry in MANIFEST["checkpoints"].items():
        if not entry.get("loadable_by_protein_mpnn_run_py"):
            continue  # its run-script numbers exist only for checkpoints the script can load
        out = tmp_path / name
        assert design_main(["--structure", str(REF / MANIFEST["chains"][chain]["pdb"]), "--checkpoint",
                            str(REF / entry["file"]), "--out", str(out), "--seed", str(MANIFEST["run_seed"]),
                            "--temperature", str(MANIFEST["temperature"]), "--save-probs"]) == 0
        native, samples = read_design_fasta(out / "seqs" / f"{chain}.fa")
        scores = MANIFEST["chains"][chain]["scores"]
        assert native["score"] == fmt(scores["score"]) and native["global_score"] == fmt(scores["global_score"])
        assert native["sequence"] == MANIFEST["chains"][chain]["meta"]["seq"] and native["seed"] == "37"
        (first,) = samples
        assert first["sequence"] == scores["sample_seq"] and first["T"] == f"{MANIFEST['temperature']:g}"
        assert first["score"] == fmt(scores["sample_score"])
        assert first["seq_recovery"] == fmt(scores["sample_seq_recovery"])
        probs = np.load(out / "probs" / f"{chain}.npz")
        ref = np.load(REF / chain / "outputs.npz")
        assert np.abs(probs["log_probs"] - ref["sample_log_probs"]).max() <= 2e-5


@needs_ref
@needs_mirror
def test_fixed_tied_omit_bias_on_a_homodimer(tmp_path):
    """4hhb α chains A, C tied: identical designs; fixed A positions keep the native; omitted letters never appear."""
    bias = tmp_path / "bias.json"
    bias.write_text(json.dumps({"A": {"10": {"W": 1e4}}}))
    args = ["--structure", str(MIRROR / "4hhb.cif.gz"), "--checkpoint", str(small_checkpoint()), "--out",
            str(tmp_path / "out"), "--chains-to-design", "A C", "--tied-positions", "A:20-141 C:20-141",
            "--fixed-positions", "A:1-5 C:1-5", "--omit-aas", "XGNA", "--bias-by-res", str(bias), "--num-seq", "2",
            "--seed", "11"]
    assert design_main(args) == 0
    native, samples = read_design_fasta(tmp_path / "out" / "seqs" / "4hhb.fa")
    assert native["header"].count("designed_chains=['A', 'C']") == 1 and "fixed_chains=['B', 'D']" in native["header"]
    nat_a, nat_c = native["sequence"].split("/")
    for record in samples:
        seq_a, seq_c = record["sequence"].split("/")
        assert len(seq_a) == len(nat_a) == 141 and len(seq_c) == len(nat_c)
        assert seq_a[19:] == seq_c[19:]  # tied A20-141 = C20-141
        assert seq_a[:5] == nat_a[:5] and seq_c[:5] == nat_c[:5]  # fixed
        assert seq_a[9] == "W"  # per-residue bias (position A10)
        designed = seq_a[5:] + seq_c[5:]
        assert not set(designed) & set("XGNA")  # omitted everywhere


@needs_ref
def test_score_only_writes_scores(tmp_path):
    chain = next(iter(MANIFEST["chains"]))
    assert design_main(["--structure", str(REF / MANIFEST["chains"][chain]["pdb"]), "--checkpoint",
                        str(small_checkpoint()), "--out", str(tmp_path), "--score-only", "--num-seq", "3",
                        "--seed", "3"]) == 0
    result = np.load(tmp_path / "score_only" / f"{chain}.npz")
    assert result["score"].shape == (3,) and np.all((result["score"] > 0) & np.isfinite(result["score"]))
    assert len(set(np.round(result["score"], 6))) > 1  # each repeat draws its own decoding order
    assert not (tmp_path / "seqs").exists()


@needs_ref
def test_checkpoint_round_trip_and_strict_errors(tmp_path):
    for entry in MANIFEST["checkpoints"].values():
        state, config = read_proteinmpnn(REF / entry["file"])
        out = write_proteinmpnn(tmp_path / entry["file"], state, config)
        again, config_again = read_proteinmpnn(out)
        assert config_again == config and list(again) == list(state)
        assert all(torch.equal(again[k], state[k]) and again[k].dtype == state[k].dtype for k in state)
        raw = torch.load(out, weights_only=True)
        assert sorted(raw) == ["model_state_dict", "noise_level", "num_edges"]
        assert raw["num_edges"] == entry["num_edges"] and raw["noise_level"] == entry["noise_level"]
    # extra training-checkpoint keys are ignored
    torch.save({**raw, "epoch": 3, "step": 10, "optimizer_state_dict": {}}, tmp_path / "train.pt")
    assert read_proteinmpnn(tmp_path / "train.pt")[1] == config
    bad = dict(state)
    key = "W_out.weight"
    bad[key] = bad[key][:, :-1]
    with pytest.raises(ProteinMPNNWeightsError, match=r"key 'W_out.weight' has shape \(21, \d+\), expected"):
        write_proteinmpnn(tmp_path / "bad.pt", bad, config)
    assert not (tmp_path / "bad.pt").exists() and not list(tmp_path.glob(".bad.pt*"))
    torch.save({"num_edges": 48, "model_state_dict": state}, tmp_path / "nonoise.pt")
    with pytest.raises(ProteinMPNNWeightsError, match="missing checkpoint key 'noise_level'"):
        read_proteinmpnn(tmp_path / "nonoise.pt")
    del bad[key]
    torch.save({"num_edges": 48, "noise_level": 0.2, "model_state_dict": bad}, tmp_path / "missing.pt")
    with pytest.raises(ProteinMPNNWeightsError, match="missing key 'W_out.weight'"):
        read_proteinmpnn(tmp_path / "missing.pt")
    from foldworks.models.weights.proteinmpnn import import_proteinmpnn, is_proteinmpnn

    assert is_proteinmpnn(tmp_path / "train.pt") and not is_proteinmpnn(tmp_path / "nonoise.pt")
    assert import_proteinmpnn(tmp_path / "train.pt")[1:] == ("mpnn", config)
    with pytest.raises(ProteinMPNNWeightsError, match="do not match preset 'cpu_small'"):
        import_proteinmpnn(tmp_path / "train.pt", "cpu_small")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ProteinMPNNWeightsError, match="junk.pt: not a readable torch checkpoint"):
        read_proteinmpnn(tmp_path / "junk.pt")


def test_presets_match_released_sizes():
    model = MPNNModel(preset="v_48_020")
    assert model.hidden == 128 and model.k == 48 and model.noise == 0.2
    assert len(model.encoder_layers) == 3 and len(model.decoder_layers) == 3
    assert sum(p.numel() for p in model.parameters()) == 1660485  # ProteinMPNN v_48_0XX parameter count
    assert MPNNModel(preset="v_48_002").noise == 0.02 and MPNNModel(preset="v_48_030").noise == 0.3


@needs_ref
def test_imported_checkpoint_works_with_predict_loader_and_init_from(tmp_path):
    """The converted foldworks checkpoint and the raw released file give the same weights everywhere."""
    from foldworks.models.weights.proteinmpnn import to_foldworks_checkpoint
    from foldworks.train.checkpoint import model_from_checkpoint
    from foldworks.train.init_from import initialise_from

    source = small_checkpoint()
    state, config = read_proteinmpnn(source)
    model, stored = model_from_checkpoint(to_foldworks_checkpoint(source, tmp_path / "imported.ckpt"))
    assert stored["model"] == "mpnn" and stored["model_config"] == config
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    fresh = MPNNModel(**config)
    report = initialise_from(fresh, source, experiment="ft")
    assert sorted(report["matched"]) == sorted(state) and not report["missing"]
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in state.items())


@needs_ref
def test_released_weights_experiment_is_imported_not_trained(tmp_path):
    """An experiment with `weights:` gets its checkpoint from the released file and joins the design report."""
    import yaml

    from foldworks.models.weights.proteinmpnn import TRAINING_LOG_HEADER
    from foldworks.models.weights.proteinmpnn import main as import_main

    repo = Path(__file__).resolve().parents[1]
    demo = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    demo["pdb"]["entries"] = ["1crn"]
    demo["experiments"]["released"] = {"model": "mpnn", "weights": str(small_checkpoint())}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(demo))
    bin_dir = Path(sys.executable).parent
    done = subprocess.run([str(bin_dir / "snakemake"), "-s", str(repo / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "config.yaml"), "-n", "--cores", "1",
                           "results/design_summary.tsv"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", done.stdout, flags=re.M))
    designs = [n for n, e in demo["experiments"].items() if e["model"] == "mpnn"]
    assert jobs["import_design_weights"] == "1" and int(jobs["train"]) == len(designs) - 1
    assert int(jobs["evaluate_design"]) == len(designs)  # evaluated beside the trained ones
    out = tmp_path / "ckpt" / "best.ckpt"
    assert import_main(["--weights", str(small_checkpoint()), "--out", str(out), "--training-log",
                        str(tmp_path / "ckpt" / "metrics.csv")]) == 0
    assert (tmp_path / "ckpt" / "metrics.csv").read_text() == TRAINING_LOG_HEADER
    assert import_main(["--weights", str(tmp_path / "config.yaml"), "--out", str(tmp_path / "bad.ckpt")]) == 1
    assert not (tmp_path / "bad.ckpt").exists()


def test_loss_is_proteinmpnn_loss_smoothed():
    """Σ over scored tokens of CE against (onehot + 0.1/21)/1.1, divided by the fixed 2000 (its training loss)."""
    torch.manual_seed(0)
    model = MPNNModel(hidden=16, n_encoder=1, n_decoder=1, k_neighbors=8)
    log_probs = torch.log_softmax(torch.randn(2, 12, 21), -1)
    S, scored = torch.randint(0, 21, (2, 12)), torch.rand(2, 12) > 0.3
    ones = torch.ones(2, 12, dtype=torch.bool)
    loss, logs = model.loss({"mask": ones, "residue_mask": ones},
                            {"logits": log_probs, "S": S, "scored": scored, "node_mask": ones})
    expected = 0.0
    for b, i in zip(*torch.nonzero(scored, as_tuple=True)):
        target = [((1.0 if a == S[b, i] else 0.0) + 0.1 / 21) / 1.1 for a in range(21)]
        expected -= sum(t * float(log_probs[b, i, a]) for a, t in enumerate(target))
    assert float(loss) == pytest.approx(expected / 2000.0, rel=1e-5)
    nll = -log_probs.gather(-1, S[..., None])[..., 0][scored].mean()
    assert logs["sequence_ce"] == pytest.approx(float(nll), rel=1e-5)


@needs_ref
def test_training_noise_only_in_training_mode():
    """Backbone noise (the preset's training noise) and a random order in training; eval is deterministic."""
    chain = next(iter(MANIFEST["chains"]))
    from foldworks.constants import ATOM_ORDER

    features = featurize(read_chains(REF / MANIFEST["chains"][chain]["pdb"]))
    length = features["S"].shape[1]
    atoms = torch.zeros(1, length, 37, 3)
    atom_mask = torch.zeros(1, length, 37, dtype=torch.bool)
    for slot, name in enumerate(("N", "CA", "C", "O")):
        atoms[:, :, ATOM_ORDER[name]] = features["X"][:, :, slot]
        atom_mask[:, :, ATOM_ORDER[name]] = True
    from foldworks.models.mpnn import TOKEN_TO_AATYPE

    batch = {"all_atom_positions": atoms, "all_atom_mask": atom_mask, "mask": torch.ones(1, length, dtype=torch.bool),
             "residue_mask": torch.ones(1, length, dtype=torch.bool), "aatype": TOKEN_TO_AATYPE[features["S"]],
             "residue_index": torch.arange(length)[None]}
    model = MPNNModel(preset="v_48_020", dropout=0.0)
    assert torch.equal(model(batch)["S"], features["S"])  # aatype → ProteinMPNN tokens
    model.eval()
    assert torch.equal(model(batch)["logits"], model(batch)["logits"])
    model.train()
    runs = []
    for eps in (0.2, 0.2, 0.0):
        model.features.augment_eps = eps
        torch.manual_seed(1)
        runs.append(model(batch)["logits"])
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
    assert model.noise == 0.2


@needs_ref
@pytest.mark.parametrize("chain", list(MANIFEST["chains"]))
def test_probability_modes_reproduce_protein_mpnn_run(tmp_path, chain):
    """--unconditional-probs-only (every chain) and --conditional-probs-only (the shortest chain:
    one decoder pass per position) equal the run script's arrays for a checkpoint it can load."""
    shortest = min(MANIFEST["chains"], key=lambda c: MANIFEST["chains"][c]["meta"]["L"])
    modes = [("--unconditional-probs-only", "unconditional_probs_only", "unconditional_log_probs")]
    if chain == shortest:
        modes.append(("--conditional-probs-only", "conditional_probs_only", "conditional_log_probs"))
    for name, entry in MANIFEST["checkpoints"].items():
        if not entry.get("loadable_by_protein_mpnn_run_py"):
            continue
        ref = np.load(REF / chain / "outputs.npz")
        for flag, folder, key in modes:
            out = tmp_path / name / folder
            assert design_main(["--structure", str(REF / MANIFEST["chains"][chain]["pdb"]), "--checkpoint",
                                str(REF / entry["file"]), "--out", str(out), "--seed", str(MANIFEST["run_seed"]),
                                flag]) == 0
            log_p = np.load(out / folder / f"{chain}.npz")["log_p"]
            assert np.abs(log_p - ref[key]).max() <= 2e-5, (name, key)
