"""AlphaFold2 model: sizes, initialisation, invariances and batch handling (random weights and inputs)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from conftest import _shared_path
from foldworks.models.af2.config import AF2Config, from_reference_config, preset
from foldworks.models.af2.geometry import template_angle_features, template_pair_features, torsion_angles
from foldworks.models.af2.model import AlphaFold2, count_parameters
from foldworks.models.af2.rigid import random_rotation

torch.set_num_threads(1)


def random_batch(b: int, r: int, n: int, s: int, se: int, t: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A processed-feature dict ``[B, R, ...]`` with random content (positions in Å)."""
    g = torch.Generator().manual_seed(seed)
    aatype = torch.randint(0, 20, (b, r, n), generator=g)
    pos = torch.cumsum(torch.randn(b, r, t, n, 37, 3, generator=g), dim=-3) * 2.0
    return {
        "aatype": aatype,
        "target_feat": torch.cat([torch.zeros(b, r, n, 1), torch.nn.functional.one_hot(aatype, 21).float()], -1),
        "msa_feat": torch.rand(b, r, s, n, 49, generator=g),
        "msa_mask": torch.ones(b, r, s, n), "seq_mask": torch.ones(b, r, n),
        "residue_index": torch.arange(n).expand(b, r, n),
        "extra_msa": torch.randint(0, 23, (b, r, se, n), generator=g),
        "extra_msa_mask": (torch.rand(b, r, se, n, generator=g) > 0.2).float(),
        "extra_has_deletion": torch.zeros(b, r, se, n), "extra_deletion_value": torch.zeros(b, r, se, n),
        "residx_atom37_to_atom14": torch.zeros(b, r, n, 37, dtype=torch.long),
        "atom37_atom_exists": torch.ones(b, r, n, 37),
        "template_aatype": torch.randint(0, 20, (b, r, t, n), generator=g),
        "template_all_atom_positions": pos, "template_all_atom_masks": torch.ones(b, r, t, n, 37),
        "template_mask": torch.ones(b, r, t), "template_pseudo_beta": pos[..., 3, :],
        "template_pseudo_beta_mask": torch.ones(b, r, t, n),
    }


def _noisy_model(cfg: AF2Config, seed: int = 0) -> AlphaFold2:
    """AF2 with every parameter perturbed by N(0, 0.02), so zero-initialised layers contribute."""
    torch.manual_seed(seed)
    model = AlphaFold2(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("name,count", [("model_1", 93_229_082), ("model_1_ptm", 93_237_338),
                                        ("model_3", 92_899_674), ("model_3_ptm", 92_907_930)])
def test_parameter_counts_equal_alphafold2(name: str, count: int) -> None:
    assert count_parameters(preset(name)) == count


def test_presets_share_the_architecture() -> None:
    assert count_parameters(preset("model_2_ptm")) == count_parameters(preset("model_1_ptm"))
    assert count_parameters(preset("model_5")) == count_parameters(preset("model_3"))
    assert count_parameters(preset("initial_training")) == count_parameters(preset("model_1"))
    with pytest.raises(KeyError, match="unknown AF2 preset 'model_9'"):
        preset("model_9")
    cfg = preset("cpu_small")
    assert AF2Config.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert count_parameters(cfg) < 200_000
    reference = _shared_path("FOLDWORKS_AF2_REFERENCE", "af2_reference")
    if reference is not None and (reference / "crambin_tmpl" / "config.json").is_file():
        fixture = from_reference_config(json.loads((reference / "crambin_tmpl" / "config.json").read_text()))
        heads = dict(pair_heads=2, c_hidden_pair=8, template_att_heads=2, template_c_hidden_att=8)
        assert dataclasses.replace(fixture, **heads) == cfg


def test_initialisation_follows_alphafold2() -> None:
    """Gates W 0 / b 1, final layers zero, other biases zero, He/LeCun variances (supp. 1.11.4)."""
    torch.manual_seed(0)
    model = AlphaFold2(preset("cpu_small"))
    sd = dict(model.named_parameters())
    gate = "evoformer.blocks.0.msa_att_row.mha.linear_g."
    assert torch.all(sd[gate + "weight"] == 0) and torch.all(sd[gate + "bias"] == 1)
    assert torch.all(sd["evoformer.blocks.0.pair_stack.tri_mul_in.linear_a_g.bias"] == 1)
    for final in ("evoformer.blocks.0.msa_att_row.mha.linear_o.weight",
                  "evoformer.blocks.0.pair_stack.tri_mul_out.linear_z.weight",
                  "evoformer.blocks.0.outer_product_mean.linear_out.weight", "structure_module.ipa.linear_out.weight",
                  "structure_module.transition.layers.0.linear_3.weight", "structure_module.bb_update.linear.weight",
                  "structure_module.angle_resnet.layers.0.linear_2.weight", "aux_heads.distogram.linear.weight",
                  "aux_heads.plddt.linear_3.weight", "aux_heads.tm.linear.weight"):
        assert torch.all(sd[final] == 0), final
    assert torch.all(sd["input_embedder.linear_msa_m.bias"] == 0)
    big = AlphaFold2(dataclasses.replace(preset("cpu_small"), c_m=256, c_z=128))
    w = dict(big.named_parameters())
    he = w["evoformer.blocks.0.msa_transition.linear_1.weight"].std().item()
    assert abs(he - math.sqrt(2 / 256)) < 0.1 * math.sqrt(2 / 256)
    assert abs(w["input_embedder.linear_relpos.weight"].std().item() - math.sqrt(1 / 65)) < 0.1 * math.sqrt(1 / 65)
    softplus = torch.nn.functional.softplus(w["structure_module.ipa.head_weights"])
    assert torch.allclose(softplus, torch.ones_like(softplus))


@pytest.mark.parametrize("unit_vector", [False, True])
def test_outputs_invariant_to_rotation_of_templates(unit_vector: bool) -> None:
    cfg = dataclasses.replace(preset("cpu_small"), template_unit_vector=unit_vector)
    model = _noisy_model(cfg)
    batch = random_batch(1, 1, 24, 4, 8, 2)
    rot = random_rotation(torch.Generator().manual_seed(3))
    moved = dict(batch)
    moved["template_all_atom_positions"] = batch["template_all_atom_positions"] @ rot.T
    moved["template_pseudo_beta"] = batch["template_pseudo_beta"] @ rot.T
    with torch.no_grad():
        a, b = model(batch, batch_dims=1), model(moved, batch_dims=1)
    for key in ("final_atom_positions", "pair", "msa", "lddt_logits", "tm_logits"):
        torch.testing.assert_close(a[key], b[key], atol=2e-4, rtol=1e-4, msg=key)
    # ...but the templates are used: a different template changes the outputs.
    moved["template_pseudo_beta"] = batch["template_pseudo_beta"] * 1.3
    with torch.no_grad():
        c = model(moved, batch_dims=1)
    assert (a["pair"] - c["pair"]).abs().max() > 1e-3


def test_template_features_under_translation() -> None:
    """Pair features and every torsion feature are translation invariant, except the first
    residue's masked φ: AF2 measures it against the zero-padded previous residue at the origin."""
    cfg = preset("cpu_small")
    batch = {k: v[0, 0] for k, v in random_batch(1, 1, 24, 4, 8, 2, seed=6).items()}
    moved = dict(batch)
    shift = torch.tensor([30.0, -12.0, 7.0])
    moved["template_all_atom_positions"] = batch["template_all_atom_positions"] + shift
    moved["template_pseudo_beta"] = batch["template_pseudo_beta"] + shift
    for unit_vector in (False, True):
        before = template_pair_features(batch, cfg.template_dgram_bins, unit_vector)
        after = template_pair_features(moved, cfg.template_dgram_bins, unit_vector)
        torch.testing.assert_close(before, after, atol=1e-5, rtol=0)
    args = ("template_aatype", "template_all_atom_positions", "template_all_atom_masks")
    fa, _ = template_angle_features(*(batch[k] for k in args))
    fb, _ = template_angle_features(*(moved[k] for k in args))
    changed = ((fa - fb).abs() > 1e-4).nonzero()[:, 1:].unique(dim=0).tolist()
    phi_channels = [[0, 24], [0, 25], [0, 38], [0, 39]]  # residue 0: φ (sin, cos) and its alternative
    assert changed and all(c in phi_channels for c in changed), changed
    assert torch.all(fa[:, 0, 50 + 1] == 0)  # ...whose mask is 0


def test_recycling_invariant_to_rigid_motion_of_previous_structure() -> None:
    model = _noisy_model(preset("cpu_small"))
    feats = {k: v[0, 0] for k, v in random_batch(1, 1, 20, 4, 8, 2, seed=1).items()}
    g = torch.Generator().manual_seed(5)
    prev = {"msa_first_row": torch.randn(20, 32, generator=g), "pair": torch.randn(20, 20, 16, generator=g),
            "positions": torch.cumsum(torch.randn(20, 37, 3, generator=g), 0) * 2}
    rot = random_rotation(g)
    moved = dict(prev, positions=prev["positions"] @ rot.T + torch.tensor([5.0, 9.0, -40.0]))
    with torch.no_grad():
        a, b = model.iteration(feats, prev), model.iteration(feats, moved)
        c = model.iteration(feats, dict(prev, positions=prev["positions"] * 1.5))
    torch.testing.assert_close(a["final_atom_positions"], b["final_atom_positions"], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(a["pair"], b["pair"], atol=2e-4, rtol=1e-4)
    assert (a["pair"] - c["pair"]).abs().max() > 1e-3


def test_batch_dimension_matches_single_examples_and_heads() -> None:
    model = _noisy_model(preset("cpu_small"))
    batch = random_batch(2, 2, 16, 5, 6, 2, seed=2)
    with torch.no_grad():
        both = model(batch, batch_dims=1)
        one = model({k: v[1] for k, v in batch.items()})
    torch.testing.assert_close(both["final_atom_positions"][1], one["final_atom_positions"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(both["pair"][1], one["pair"], atol=1e-4, rtol=1e-4)
    assert one["masked_msa_logits"].shape == (5, 16, 23)  # MSA rows only, not template rows
    assert one["plddt"].min() >= 0 and one["plddt"].max() <= 100
    assert 0 < float(one["ptm_score"]) < 1


def test_unknown_residues_have_no_atoms_and_train_step_is_finite() -> None:
    model = _noisy_model(preset("cpu_small")).train()
    batch = random_batch(2, 1, 16, 4, 6, 2, seed=4)
    batch["aatype"][:, :, 3] = 20
    out = model(batch, batch_dims=1)
    assert torch.all(out["final_atom14_positions"][:, 3] == 0)
    assert out["final_atom14_positions"][:, 2].abs().sum() > 0
    loss = out["distogram_logits"].float().square().mean() + out["final_atom_positions"].square().mean()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.input_embedder.linear_msa_m.weight.grad.abs().sum() > 0


def test_torsions_of_an_ideal_chain() -> None:
    """φ/ψ/ω of a chain built with known torsions come back exactly; masked χ are (0, 0)."""
    from foldworks.models.af2.all_atom import frames_to_atom14, torsion_angles_to_frames, atom14_to_atom37
    n = 6
    angles = torch.tensor([0.3, -1.1, 2.0, 0.7, -0.4, 1.2, 0.1])
    sin_cos = torch.stack([angles.sin(), angles.cos()], -1).expand(1, n, 7, 2)
    aatype = torch.full((1, n), 11)  # LYS: four chis
    rot = torch.eye(3).expand(1, n, 3, 3)
    trans = torch.zeros(1, n, 3)
    groups = torsion_angles_to_frames((rot, trans), sin_cos, aatype)
    atom37, exists = atom14_to_atom37(frames_to_atom14(groups, aatype), aatype)
    ours, _, mask = torsion_angles(aatype, atom37, exists.float())
    torch.testing.assert_close(ours[..., 3:, :], sin_cos[..., 3:, :], atol=1e-5, rtol=0)
    assert torch.all(mask[..., 3:] == 1) and torch.all(mask[:, 0, :2] == 0)
    ala = torch.zeros((1, n), dtype=torch.long)
    _, _, ala_mask = torsion_angles(ala, atom37, exists.float())
    assert torch.all(ala_mask[..., 3:] == 0)


def test_structure_and_confidence_stay_fp32_under_bf16_autocast() -> None:
    model = _noisy_model(preset("cpu_small")).train()
    batch = random_batch(1, 1, 12, 3, 4, 1, seed=7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch, batch_dims=1)
    assert out["final_atom_positions"].dtype == torch.float32 and out["sm"]["frames"].dtype == torch.float32
    assert out["plddt"].dtype == torch.float32 and out["predicted_aligned_error"].dtype == torch.float32
    assert torch.isfinite(out["final_atom_positions"]).all()


def test_openfold_overrides_map_to_the_same_config() -> None:
    """Each reference case's OpenFold overrides give the config its DeepMind config gives."""
    from foldworks.models.af2.config import from_openfold

    reference = _shared_path("FOLDWORKS_AF2_REFERENCE", "af2_reference")
    if reference is None:
        pytest.skip("AF2 reference fixtures not found: set FOLDWORKS_AF2_REFERENCE or provide ../shared/af2_reference")
    cases = [p for p in sorted(reference.iterdir()) if (p / "config.json").is_file()]
    assert cases
    for case in cases:
        config = json.loads((case / "config.json").read_text())
        ours = from_openfold(config["openfold_model_name"], config["openfold_overrides"])
        assert ours == from_reference_config(config), case.name
    with pytest.raises(KeyError, match="unsupported OpenFold config key 'model.foo'"):
        from_openfold("model_1", {"model.foo": 1})


def test_chunked_attention_gives_the_same_outputs() -> None:
    model = _noisy_model(preset("cpu_small"))
    batch = random_batch(1, 1, 19, 5, 7, 2, seed=8)
    with torch.no_grad():
        whole = model(batch, batch_dims=1)
        model.set_chunk_size(4)
        chunked = model(batch, batch_dims=1)
    for key in ("final_atom_positions", "pair", "msa", "distogram_logits"):
        torch.testing.assert_close(whole[key], chunked[key], atol=1e-5, rtol=1e-5, msg=key)


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    no_dropout = dict(msa_dropout=0.0, pair_dropout=0.0, structure_dropout=0.0)
    batch = random_batch(1, 1, 12, 3, 4, 1, seed=9)
    grads = []
    for checkpointing in (False, True):
        model = _noisy_model(dataclasses.replace(preset("cpu_small"), checkpointing=checkpointing, **no_dropout)).train()
        out = model(batch, batch_dims=1)
        (out["distogram_logits"].square().mean() + out["final_atom_positions"].square().mean()).backward()
        grads.append(model.evoformer.blocks[0].msa_att_row.mha.linear_q.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)
    assert grads[0].abs().sum() > 0
