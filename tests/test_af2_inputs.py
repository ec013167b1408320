"""AlphaFold2 input processing (foldworks.features.af2): parity with AF2's processed features and
the statistics / seeding of the random draws.

Parity: AF2's random draws (cluster centres, masked positions and tokens, extra-MSA order) are
recovered from each fixture case's ``features.npz`` and replayed through our deterministic
transforms, starting from the case's ``raw_features.npz``; every array AF2 fed its model must come
out the same (integers exactly, floats to 1e-6).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import _shared_path
from foldworks.features.af2 import (
    Af2Chain, Af2DataConfig, Af2InputError, MsaDraw, chain_from_af2_raw, chain_from_feature_cache,
    make_af2_example, process_recycle,
)
from foldworks.features.af2 import transforms as tx
from foldworks.features.af2.draws import (
    bert_probabilities, block_deletion_keep, draw_bert, draw_clusters, draw_msa,
)

AF2_REFERENCE = _shared_path("FOLDWORKS_AF2_REFERENCE", "af2_reference")
CASES = sorted(p for p in AF2_REFERENCE.iterdir() if (p / "features.npz").exists()) if AF2_REFERENCE else []
FLOAT_ATOL = 1e-6


def _case_params() -> list:
    if CASES:
        return [pytest.param(case, id=case.name) for case in CASES]
    return [pytest.param(None, marks=pytest.mark.skip(
        reason="AF2 reference fixtures not found: set FOLDWORKS_AF2_REFERENCE or provide ../shared/af2_reference"))]


def _load_case(case: Path) -> tuple[Af2DataConfig, Af2Chain, dict[str, np.ndarray]]:
    cfg = Af2DataConfig.from_af2_config(json.loads((case / "config.json").read_text()))
    with np.load(case / "raw_features.npz") as raw, np.load(case / "features.npz") as ref:
        return cfg, chain_from_af2_raw(dict(raw), case.name), {k: ref[k] for k in ref.files}


def _recover_draw(chain: Af2Chain, ref: dict[str, np.ndarray], r: int) -> MsaDraw:
    """AF2's draw of recycle ``r``: centres from ``true_msa``, extra rows from ``extra_msa`` (rows
    matched by tokens + deletions), masking from ``bert_mask`` and the masked one-hot of ``msa_feat``."""
    rows: dict[bytes, list[int]] = {}
    for i, tokens in enumerate(chain.msa):
        rows.setdefault(tokens.astype(np.int64).tobytes(), []).append(i)
    squashed = tx._squash(chain.deletion_matrix)

    def find(tokens: np.ndarray, deletion_value: np.ndarray) -> int:
        candidates = rows.get(tokens.astype(np.int64).tobytes(), [])
        assert candidates, f"{chain.name}: a fixture MSA row is not in raw_features' msa"
        errors = [np.abs(squashed[i] - deletion_value).max() for i in candidates]
        return candidates[int(np.argmin(errors))]

    n_sel, n_extra = int(ref["msa_row_mask"][r].sum()), int(ref["extra_msa_row_mask"][r].sum())
    sel = [find(t, f[:, 24]) for t, f in zip(ref["true_msa"][r][:n_sel], ref["msa_feat"][r][:n_sel])]
    extra = [find(t, d) for t, d in zip(ref["extra_msa"][r][:n_extra], ref["extra_deletion_value"][r][:n_extra])]
    rest = sorted(set(range(chain.msa.shape[0])) - set(sel) - set(extra))
    assert len(set(sel) | set(extra)) == n_sel + n_extra, "a fixture row matched two MSA rows"
    return MsaDraw(np.asarray(sel), np.asarray(extra + rest, dtype=np.int64), ref["bert_mask"][r][:n_sel] > 0,
                   ref["msa_feat"][r][:n_sel, :, :23].argmax(-1))


@pytest.mark.af2_parity
@pytest.mark.parametrize("case", _case_params())
def test_config_sizes_match_fixture(case: Path) -> None:
    cfg, chain, ref = _load_case(case)
    assert ref["msa_feat"].shape[:2] == (cfg.num_recycle + 1, cfg.num_clusters)
    assert ref["extra_msa"].shape[1] == cfg.max_extra_msa
    if cfg.use_templates:
        assert ref["template_aatype"].shape[1] == cfg.max_templates
    else:
        assert not any(key.startswith("template_") for key in ref)


@pytest.mark.af2_parity
@pytest.mark.parametrize("case", _case_params())
def test_processing_matches_af2_given_its_draws(case: Path) -> None:
    cfg, chain, ref = _load_case(case)
    for r in range(ref["aatype"].shape[0]):
        draw = _recover_draw(chain, ref, r)
        assert draw.cluster_rows[0] == 0, "AF2 keeps the query as cluster 0"
        out = process_recycle(chain, draw, cfg)
        assert set(ref) <= set(out), f"missing {sorted(set(ref) - set(out))}"
        for key, expected in ref.items():
            got = out[key]
            assert got.shape == expected[r].shape and got.dtype == expected[r].dtype, (case.name, r, key)
            if expected.dtype.kind in "iu":
                np.testing.assert_array_equal(got, expected[r], err_msg=f"{case.name} recycle {r} {key}")
            else:
                np.testing.assert_allclose(got, expected[r], rtol=0, atol=FLOAT_ATOL,
                                           err_msg=f"{case.name} recycle {r} {key}")
        if len(draw.extra_rows):  # the profile is more than the centres' own tokens: clustering was tested
            centre = tx.one_hot(out["msa_feat"][..., :23].argmax(-1), 23)
            assert np.abs(out["msa_feat"][..., 25:48] - centre).max() > 0.1


@pytest.mark.af2_parity
@pytest.mark.parametrize("case", _case_params())
def test_drawn_example_has_af2_layout(case: Path) -> None:
    cfg, chain, ref = _load_case(case)
    ex = make_af2_example(chain, cfg, seed=0, sample=0, train=False)
    assert set(ex) == set(ref)
    for key, expected in ref.items():
        assert ex[key].shape == expected.shape and ex[key].dtype == expected.dtype, key
    for key in ("aatype", "target_feat", "residue_index", "seq_mask", "msa_row_mask", "extra_msa_row_mask",
                "residx_atom14_to_atom37", "atom37_atom_exists", *(k for k in ref if k.startswith("template_"))):
        np.testing.assert_array_equal(ex[key], ref[key], err_msg=key)  # independent of the draws
    np.testing.assert_array_equal(ex["true_msa"][:, 0], ref["true_msa"][:, 0])  # the query is cluster 0


def _synthetic_chain(n_rows: int = 40, length: int = 30, seed: int = 0, templates: bool = False) -> Af2Chain:
    rng = np.random.default_rng(seed)
    msa = rng.integers(0, 22, size=(n_rows, length))
    msa[0] = rng.integers(0, 20, size=length)
    feats = {"aatype": msa[0], "msa": msa.astype(np.int8), "deletion_matrix": rng.poisson(0.3, (n_rows, length)),
             "residue_mask": np.ones(length, bool), "atom_mask": np.ones((length, 37), bool),
             "atom_positions": rng.normal(size=(length, 37, 3)).cumsum(0).astype(np.float32), "target": "1abc_A"}
    tmpl = None
    if templates:
        tmpl = {"template_aatype": msa[:1], "template_all_atom_positions": feats["atom_positions"][None],
                "template_all_atom_masks": np.ones((1, length, 37), np.float32),
                "template_sum_probs": np.ones((1, 1), np.float32)}
    return chain_from_feature_cache(feats, tmpl)


def test_nearest_neighbour_ignores_gaps_and_mask_token() -> None:
    centres = np.array([[0, 21, 21, 21], [22, 22, 1, 2]])
    extra = np.array([[0, 21, 21, 21],   # agrees with centre 0 on one residue (gaps weigh 0)
                      [0, 5, 1, 2],      # centre 1 agrees on two residues; its mask tokens never count
                      [22, 22, 3, 3]])   # no agreement anywhere: ties go to centre 0
    assignment = tx.nearest_neighbour_clusters(centres, np.ones((2, 4)), extra, np.ones((3, 4)))
    np.testing.assert_array_equal(assignment, [0, 1, 0])


def test_cluster_profile_and_deletion_mean_over_centre_and_members() -> None:
    centres, centre_del = np.array([[0, 1], [2, 3]]), np.array([[1.0, 0.0], [0.0, 0.0]])
    extra, extra_del = np.array([[0, 4], [5, 1], [2, 2]]), np.array([[3.0, 2.0], [0.0, 1.0], [7.0, 0.0]])
    extra_mask = np.array([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])  # row 1, residue 1 is padding
    profile, del_mean = tx.summarize_clusters(centres, np.ones((2, 2)), centre_del, extra, extra_mask, extra_del,
                                              np.array([0, 0, 1]))
    np.testing.assert_allclose(profile[0, 0, [0, 5]], [2 / 3, 1 / 3], rtol=1e-5)
    np.testing.assert_allclose(profile[0, 1, [1, 4]], [1 / 2, 1 / 2], rtol=1e-5)  # masked member excluded
    np.testing.assert_allclose(del_mean[0], [4 / 3, 2 / 2], rtol=1e-5)
    np.testing.assert_allclose(del_mean[1], [7 / 2, 0.0], rtol=1e-5, atol=1e-6)  # count + 1e-6


def test_masked_centre_profile_never_counts_the_true_token() -> None:
    chain = _synthetic_chain(n_rows=1, length=12)
    mask = np.ones((1, 12), bool)
    draw = MsaDraw(np.array([0]), np.zeros(0, np.int64), mask, np.full((1, 12), tx.MASK_TOKEN))
    out = process_recycle(chain, draw, Af2DataConfig(max_msa_clusters=4, max_extra_msa=2, max_templates=0))
    profile = out["msa_feat"][0, :, 25:48]
    np.testing.assert_allclose(profile[:, tx.MASK_TOKEN], 1.0, atol=1e-5)
    assert profile[np.arange(12), chain.aatype].max() == 0.0
    np.testing.assert_array_equal(out["true_msa"][0], chain.aatype)


def test_bert_replacement_distribution() -> None:
    rng = np.random.default_rng(7)
    msa = np.zeros((400, 500), np.int64)  # all alanine, profile = alanine
    mask, tokens = draw_bert(rng, msa, tx.msa_profile(msa))
    assert abs(mask.mean() - 0.15) < 0.005
    freq = np.bincount(tokens[mask], minlength=23) / mask.sum()
    expected = bert_probabilities(np.array(0), tx.msa_profile(msa)[0])
    np.testing.assert_allclose(expected[[0, 1, 22]], [0.205, 0.005, 0.7])
    np.testing.assert_allclose(freq, expected, atol=0.01)
    assert freq[20:22].sum() == 0.0  # uniform replacement never draws X or gap


def test_cluster_draw_keeps_query_first_and_partitions_rows() -> None:
    rng = np.random.default_rng(0)
    firsts = []
    for _ in range(200):
        sel, extra = draw_clusters(rng, 30, 8)
        assert sel[0] == 0 and len(sel) == 8
        assert sorted(np.concatenate([sel, extra]).tolist()) == list(range(30))
        firsts.append(sel[1])
    assert len(set(firsts)) > 20  # every non-query row can be chosen
    sel, extra = draw_clusters(rng, 3, 8)
    assert sel.tolist()[0] == 0 and len(sel) == 3 and len(extra) == 0


def test_block_deletion_removes_blocks_but_never_the_query() -> None:
    keep = block_deletion_keep(np.random.default_rng(3), 100, fraction=0.3, num_blocks=1)
    assert keep[0] == 0 and len(keep) in range(70, 100)
    missing = np.setdiff1d(np.arange(100), keep)
    assert np.all(np.diff(missing) == 1)  # one contiguous block
    for seed in range(20):
        keep = block_deletion_keep(np.random.default_rng(seed), 50)
        assert keep[0] == 0 and np.all(np.diff(keep) > 0)


def test_example_redraws_per_recycle_and_is_reproducible() -> None:
    chain = _synthetic_chain(templates=True)
    cfg = Af2DataConfig(max_msa_clusters=10, max_extra_msa=16, max_templates=2, num_recycle=2, crop_size=20)
    ex = make_af2_example(chain, cfg, seed=5, sample=11, train=True)
    assert ex["msa_feat"].shape == (3, 8, 20, 49) and ex["extra_msa"].shape == (3, 16, 20)
    assert ex["template_all_atom_positions"].shape == (3, 2, 20, 37, 3)
    assert not np.array_equal(ex["bert_mask"][0], ex["bert_mask"][1])
    assert not np.array_equal(ex["true_msa"][0], ex["true_msa"][1])
    np.testing.assert_array_equal(ex["true_msa"][:, 0], ex["aatype"])  # the query is always cluster 0
    np.testing.assert_array_equal(ex["residue_index"][0], ex["residue_index"][2])  # one crop per sample
    index = ex["residue_index"][0]
    np.testing.assert_array_equal(ex["template_aatype"][0, 0], chain.aatype[index])
    np.testing.assert_array_equal(ex["all_atom_positions"][1], chain.all_atom_positions[index])
    again = make_af2_example(chain, cfg, seed=5, sample=11, train=True)
    assert all(np.array_equal(ex[k], again[k]) for k in ex)
    other = make_af2_example(chain, cfg, seed=5, sample=12, train=True)
    assert not np.array_equal(ex["msa_feat"], other["msa_feat"])


def test_no_resampling_repeats_the_draw_every_recycle() -> None:
    chain = _synthetic_chain()
    cfg = Af2DataConfig(max_msa_clusters=10, max_extra_msa=16, max_templates=0, num_recycle=1,
                        resample_msa_in_recycling=False, use_templates=False)
    ex = make_af2_example(chain, cfg, seed=0, sample=0, train=False)
    np.testing.assert_array_equal(ex["msa_feat"][0], ex["msa_feat"][1])
    assert ex["seq_length"].tolist() == [30, 30] and "template_mask" not in ex


def test_inference_draw_masks_the_query_too() -> None:
    chain = _synthetic_chain(n_rows=200, length=60)
    draw = draw_msa(np.random.default_rng(1), chain.msa, tx.msa_profile(chain.msa), 100)
    assert draw.bert_mask[0].any() and abs(draw.bert_mask.mean() - 0.15) < 0.02


def test_bad_inputs_name_the_chain() -> None:
    chain = _synthetic_chain()
    with pytest.raises(Af2InputError, match="1abc_A: deletion_matrix"):
        Af2Chain("1abc_A", chain.aatype, chain.msa, chain.deletion_matrix[:, :5], chain.residue_index,
                 chain.between_segment_residues)
    with pytest.raises(ValueError, match="unknown AF2 data setting"):
        Af2DataConfig.from_mapping({"max_msa_cluster": 3})
    with pytest.raises(ValueError, match="leaves no MSA cluster"):
        Af2DataConfig(max_msa_clusters=4, max_templates=4)
    with pytest.raises(Af2InputError, match="1abc_A: msa tokens"):
        Af2Chain("1abc_A", chain.aatype, chain.msa + 1, chain.deletion_matrix, chain.residue_index,
                 chain.between_segment_residues)


def test_single_sequence_chain_has_no_extra_rows() -> None:
    chain = _synthetic_chain(n_rows=1, length=15)
    cfg = Af2DataConfig(max_msa_clusters=6, max_extra_msa=4, max_templates=2, num_recycle=1, crop_size=10)
    ex = make_af2_example(chain, cfg, seed=0, sample=0, train=True)
    assert ex["msa_row_mask"].sum(-1).tolist() == [1.0, 1.0] and ex["extra_msa_mask"].sum() == 0


def _write_feature_files(tmp_path: Path) -> list[tuple[str, Path]]:
    targets = []
    for i, (target, length) in enumerate([("1abc_A", 30), ("2xyz_B", 22)]):
        chain = _synthetic_chain(n_rows=25, length=length, seed=i)
        path = tmp_path / f"{target}.npz"
        np.savez(path, aatype=chain.aatype, msa=chain.msa.astype(np.int8), deletion_matrix=chain.deletion_matrix,
                 residue_mask=chain.residue_mask, atom_positions=chain.all_atom_positions,
                 atom_mask=chain.all_atom_mask.astype(bool), target=np.asarray(target))
        targets.append((target, path))
    return targets


def test_af2_dataset_and_collate(tmp_path: Path) -> None:
    import pandas as pd
    import torch

    from foldworks.train.data import Af2ChainDataset, Af2FeatureDataModule, ChainDataset, collate_af2

    targets = _write_feature_files(tmp_path)
    cfg = Af2DataConfig(max_msa_clusters=8, max_extra_msa=12, max_templates=2, num_recycle=1, crop_size=24)
    train = Af2ChainDataset(targets, cfg, seed=3, train=True)
    item = train[(0, 5, 0)]
    assert item["msa_feat"].shape == (2, 6, 24, 49) and item["template_mask"].sum() == 0  # cache has no templates
    assert all(np.array_equal(item[k], train[(0, 5, 0)][k]) for k in item)  # resume redraws the same item
    assert not np.array_equal(item["bert_mask"], train[(1, 5, 0)]["bert_mask"])
    val = Af2ChainDataset(targets, dataclasses.replace(cfg, crop_size=None), seed=3, train=False)
    assert val[(0, 0)]["aatype"].shape == (2, 30)
    batch = collate_af2([item, train[(0, 6, 1)]])  # 24-residue crop + a 22-residue chain
    assert batch["msa_feat"].shape == (2, 2, 6, 24, 49) and batch["aatype"].dtype == torch.long
    assert batch["seq_mask"][1, :, 22:].sum() == 0 and batch["seq_mask"][1, :, :22].all()
    assert batch["template_all_atom_positions"].shape == (2, 2, 2, 24, 37, 3)

    chains = pd.DataFrame({"entry": ["1abc", "2xyz"], "chain": ["A", "B"], "split": ["train", "val"],
                           "length": [30, 22]})
    chains.to_parquet(tmp_path / "chains.parquet")
    module = Af2FeatureDataModule(tmp_path / "chains.parquet", tmp_path, {"sampler": "uniform"}, seed=3,
                                  af2_config=cfg)
    loader = module._loader(ChainDataset(module.val_targets, None, 4, 3, False), [[(0, 0)]])
    batch = next(iter(loader))
    assert batch["msa_feat"].shape == (1, 2, 6, 22, 49)


def test_editing_af2_processing_does_not_rebuild_feature_files(tmp_path: Path) -> None:
    import re
    import shutil

    from conftest import REPO_ROOT
    from foldworks.provenance import code_hash

    package = tmp_path / "foldworks"
    shutil.copytree(REPO_ROOT / "src" / "foldworks", package, ignore=shutil.ignore_patterns("__pycache__"))
    rule = (REPO_ROOT / "workflow" / "rules" / "features.smk").read_text(encoding="utf-8")
    parts = tuple(re.findall(r'"([^"]+)"', re.search(r"code=code_hash\(([^)]*)\)", rule).group(1)))
    before = code_hash(*parts, root=package)
    for module, rebuilds in (("features/af2/transforms.py", False), ("features/build.py", True)):
        with (package / module).open("a", encoding="utf-8") as handle:
            handle.write("\n_EDITED = True\n")
        code_hash.cache_clear()
        assert (code_hash(*parts, root=package) != before) == rebuilds, module
