"""AF2 weight interchange: full-size layouts, strict refusal of bad files, OpenFold round trip, CLI."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import _shared_path
from foldworks.models.af2.config import from_reference_config, preset
from foldworks.models.weights import deepmind, openfold
from foldworks.models.weights.errors import WeightsError
from foldworks.models.weights.registry import af2_expected_shapes, import_weights
from foldworks.train.checkpoint import model_weights

REFERENCE = _shared_path("FOLDWORKS_AF2_REFERENCE", "af2_reference")
SRC = Path(__file__).resolve().parents[1] / "src"


def _reference() -> Path:
    if REFERENCE is None:
        pytest.skip("AF2 reference fixtures not found: set FOLDWORKS_AF2_REFERENCE or provide ../shared/af2_reference")
    return REFERENCE


def _case(with_templates: bool = True) -> Path:
    for d in sorted(_reference().iterdir()):
        if (d / "config.json").is_file() and json.loads((d / "config.json").read_text())["templates"] == with_templates:
            return d
    pytest.skip("no reference case of that kind")


def _shape_files(prefix: str) -> list[Path]:
    shapes = _reference() / "shapes"
    return sorted(shapes.glob(f"{prefix}*.json"))


@pytest.mark.af2_parity
def test_full_size_deepmind_layouts_convert_and_load_strictly() -> None:
    """Zero arrays of every released layout → converter → strict check against the named preset."""
    files = _shape_files("model_")
    assert files
    for path in files:
        layout = json.loads(path.read_text())
        params = {k: np.zeros(shape, np.float32) for k, shape in layout.items()}
        state = deepmind.convert(params)
        del params
        expected = af2_expected_shapes(preset(path.stem))
        assert {k: tuple(v.shape) for k, v in state.items()} == expected, path.stem
        assert sum(v.numel() for v in state.values()) == sum(int(np.prod(s)) for s in layout.values())
        back = deepmind.export(state, preset(path.stem))
        del state
        assert {k: list(v.shape) for k, v in back.items()} == layout, path.stem
        del back


@pytest.mark.af2_parity
def test_full_size_openfold_layouts_equal_our_names() -> None:
    files = _shape_files("openfold_")
    assert files
    for path in files:
        layout = {k: tuple(v) for k, v in json.loads(path.read_text()).items()}
        assert af2_expected_shapes(preset(path.stem.removeprefix("openfold_"))) == layout, path.stem


def _openfold_state(case: Path) -> dict[str, torch.Tensor]:
    return torch.load(case / "openfold_state_dict.pt", map_location="cpu", weights_only=True)


def _import_error(src: Path, out: Path, **kw) -> str:
    with pytest.raises(WeightsError) as info:
        import_weights(src, out, **kw)
    message = str(info.value)
    assert "\n" not in message
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]
    return message


def test_missing_and_misshaped_keys_are_refused(tmp_path: Path) -> None:
    case = _case()
    state = _openfold_state(case)
    dropped = dict(state)
    del dropped["structure_module.ipa.linear_b.weight"]
    torch.save(dropped, tmp_path / "missing.pt")
    msg = _import_error(tmp_path / "missing.pt", tmp_path / "out.ckpt")
    assert "missing key 'structure_module.ipa.linear_b.weight'" in msg and "[" in msg
    bad = dict(state)
    bad["aux_heads.distogram.linear.bias"] = torch.zeros(7)
    torch.save(bad, tmp_path / "shape.pt")
    msg = _import_error(tmp_path / "shape.pt", tmp_path / "out.ckpt")
    assert re.search(r"'aux_heads.distogram.linear.bias': file \[7\] vs model \[64\]", msg), msg
    extra = dict(state, **{"evoformer.blocks.0.spare.weight": torch.zeros(2)})
    torch.save(extra, tmp_path / "extra.pt")
    assert "unexpected key 'evoformer.blocks.0.spare.weight' (file shape [2])" in _import_error(
        tmp_path / "extra.pt", tmp_path / "out.ckpt")


def test_deepmind_missing_and_unmapped_arrays_are_refused(tmp_path: Path) -> None:
    case = _case()
    params = dict(np.load(case / "params.npz"))
    key = next(k for k in params if k.endswith("distogram_head/half_logits//bias"))
    np.savez(tmp_path / "missing.npz", **{k: v for k, v in params.items() if k != key})
    assert key in _import_error(tmp_path / "missing.npz", tmp_path / "out.ckpt")
    spare = {"alphafold/alphafold_iteration/spare//weights": np.zeros(3, np.float32)}
    np.savez(tmp_path / "extra.npz", **params, **spare)
    assert "spare//weights" in _import_error(tmp_path / "extra.npz", tmp_path / "out.ckpt")


def test_wrong_preset_is_refused_with_both_shapes(tmp_path: Path) -> None:
    msg = _import_error(_case() / "params.npz", tmp_path / "out.ckpt", preset="model_1_ptm")
    assert re.search(r"shape mismatch for '[\w.]+': file \[\d+(, \d+)*\] vs model \[\d+(, \d+)*\]", msg), msg


@pytest.mark.parametrize("name", ["params.npz", "openfold_state_dict.pt"])
def test_truncated_files_are_refused(tmp_path: Path, name: str) -> None:
    data = (_case() / name).read_bytes()
    src = tmp_path / name
    src.write_bytes(data[: len(data) // 2])
    assert "truncated or corrupt" in _import_error(src, tmp_path / "out.ckpt")


class _NotWeights:
    pass


def test_pickles_that_are_not_weights_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "object.pt"
    with open(src, "wb") as handle:
        pickle.dump(_NotWeights(), handle, protocol=2)
    assert "not a weights file" in _import_error(src, tmp_path / "out.ckpt")
    torch.save({"epoch": 3, "note": "hello"}, tmp_path / "dict.pt")
    assert "not a weights file" in _import_error(tmp_path / "dict.pt", tmp_path / "out.ckpt")
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    assert "not a weights file" in _import_error(tmp_path / "list.pt", tmp_path / "out.ckpt")


def test_openfold_round_trip_is_bit_for_bit(tmp_path: Path) -> None:
    case = _case()
    state = _openfold_state(case)
    ckpt = import_weights(case / "openfold_state_dict.pt", tmp_path / "of.ckpt")
    assert ckpt["source"]["format"] == "openfold" and len(ckpt["source"]["sha256"]) == 64
    ours = model_weights(torch.load(tmp_path / "of.ckpt", weights_only=True), ema=False)
    torch.save(openfold.export(ours), tmp_path / "back.pt")
    back = torch.load(tmp_path / "back.pt", weights_only=True)
    assert list(back) == list(state)
    for key, val in state.items():
        assert back[key].dtype == val.dtype and torch.equal(back[key], val), key


def test_lightning_checkpoint_prefers_ema_and_old_names_load(tmp_path: Path) -> None:
    case = _case()
    state = _openfold_state(case)
    ema = {k: v + 1.0 for k, v in state.items()}
    old_names = {}
    for key, val in ema.items():
        key = key.replace("template_embedder.template_single_embedder.", "template_angle_embedder.")
        key = re.sub(r"^template_embedder\.", "", key)
        key = re.sub(r"\.pair_stack\.(tri_\w+|pair_transition)\.", r".core.\1.", key)
        key = re.sub(r"(evoformer\.blocks\.\d+)\.(msa_transition|outer_product_mean)\.", r"\1.core.\2.", key)
        key = re.sub(r"_points\.linear\.", "_points.", key)
        old_names[key] = val
    assert "template_angle_embedder.linear_1.weight" in old_names
    torch.save({"state_dict": {f"model.{k}": v for k, v in state.items()}, "ema": {"params": old_names},
                "epoch": 7}, tmp_path / "run.ckpt")
    ckpt = import_weights(tmp_path / "run.ckpt", tmp_path / "out.ckpt", fmt="openfold")
    for key, val in ema.items():
        assert torch.equal(ckpt["state_dict"][f"model.{key}"], val), key


def test_deepmind_import_gives_config_and_loads_by_name(tmp_path: Path) -> None:
    case = _case()
    ckpt = import_weights(case / "params.npz", tmp_path / "dm.ckpt")
    assert ckpt["model"] == "evoformer" and ckpt["source"]["format"] == "deepmind"
    fixture_cfg = from_reference_config(json.loads((case / "config.json").read_text()))
    for key in ("c_m", "c_z", "c_s", "c_e", "c_t", "num_evoformer_blocks", "c_ipa", "ipa_heads", "templates", "ptm"):
        assert ckpt["model_config"][key] == getattr(fixture_cfg, key), key


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-m", "foldworks.models.import_weights", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_cli_imports_counts_and_reports_one_line(tmp_path: Path) -> None:
    case = _case(with_templates=False)
    ok = _cli(str(case / "params.npz"), str(tmp_path / "x.ckpt"))
    assert ok.returncode == 0 and "deepmind" in ok.stdout and (tmp_path / "x.ckpt").is_file(), ok.stderr
    count = _cli("--count", "model_1_ptm")
    assert count.returncode == 0 and "93,237,338" in count.stdout
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not really")
    bad = _cli(str(tmp_path / "bad.npz"), str(tmp_path / "y.ckpt"))
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "y.ckpt").exists()


def test_cli_export_round_trip_and_model_from_config(tmp_path: Path) -> None:
    from foldworks.models.af2.model import AlphaFold2

    case = _case()
    assert _cli(str(case / "openfold_state_dict.pt"), str(tmp_path / "a.ckpt")).returncode == 0
    res = _cli("--export-openfold", str(tmp_path / "a.ckpt"), str(tmp_path / "back.pt"))
    assert res.returncode == 0, res.stderr
    back, state = torch.load(tmp_path / "back.pt", weights_only=True), _openfold_state(case)
    assert list(back) == list(state) and all(torch.equal(back[k], state[k]) for k in state)
    ckpt = torch.load(tmp_path / "a.ckpt", weights_only=True)
    model = AlphaFold2.from_config(ckpt["model_config"])
    model.load_state_dict(model_weights(ckpt, ema=False), strict=True)
    assert AlphaFold2.from_config({"preset": "cpu_small", "num_recycle": 2}).cfg.num_recycle == 2


def test_npz_that_is_not_a_weights_archive_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "single.npy", np.zeros(3))
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    assert "not an .npz archive" in _import_error(tmp_path / "single.npz", tmp_path / "out.ckpt")
    case = _case()
    params = dict(np.load(case / "params.npz"))
    key = next(k for k in params if "evoformer_iteration/outer_product_mean//output_b" in k)
    params[key] = np.float32(1.0)  # a stacked array without its block axis
    np.savez(tmp_path / "flat.npz", **params)
    msg = _import_error(tmp_path / "flat.npz", tmp_path / "out.ckpt")
    assert key in msg and "cannot be converted" in msg


def test_cli_checks_against_a_config_file(tmp_path: Path) -> None:
    case = _case()
    ok = _cli(str(case / "params.npz"), str(tmp_path / "c.ckpt"), "--config", str(case / "config.json"))
    assert ok.returncode == 0, ok.stderr
    expected = from_reference_config(json.loads((case / "config.json").read_text()))
    assert torch.load(tmp_path / "c.ckpt", weights_only=True)["model_config"] == expected.to_dict()
    (tmp_path / "big.json").write_text(json.dumps({"preset": "model_1_ptm"}))
    bad = _cli(str(case / "params.npz"), str(tmp_path / "d.ckpt"), "--config", str(tmp_path / "big.json"))
    assert bad.returncode == 1 and "shape mismatch" in bad.stderr and not (tmp_path / "d.ckpt").exists()
    (tmp_path / "junk.json").write_text("{not json")
    junk = _cli(str(case / "params.npz"), str(tmp_path / "e.ckpt"), "--config", str(tmp_path / "junk.json"))
    assert junk.returncode == 1 and "not a usable model config" in junk.stderr


def test_formats_are_detected_by_content_and_a_format_is_one_line(tmp_path: Path, monkeypatch) -> None:
    from foldworks.models.weights import registry

    torch.save({"encoder.layer.weight": torch.zeros(2, 2)}, tmp_path / "other.pt")
    assert "unknown weights format" in _import_error(tmp_path / "other.pt", tmp_path / "out.ckpt")

    def load(path: Path, sizes) -> registry.Imported:
        return registry.Imported(torch.load(path, weights_only=True), "toy", {"width": 2})

    monkeypatch.setitem(registry.FORMATS, "toy", registry.WeightFormat(detect=lambda p: "other" in p.name, load=load))
    ckpt = import_weights(tmp_path / "other.pt", tmp_path / "toy.ckpt")
    assert ckpt["source"]["format"] == "toy" and ckpt["model"] == "toy"
    assert list(ckpt["state_dict"]) == ["model.encoder.layer.weight"]
    assert registry.detect_format(_case() / "params.npz") == "deepmind"
    assert registry.detect_format(_case() / "openfold_state_dict.pt") == "openfold"


def test_deepmind_export_round_trip_is_bit_for_bit(tmp_path: Path) -> None:
    from foldworks.models.af2.config import config_from_json
    from foldworks.models.weights.registry import export_deepmind

    for case in (_case(True), _case(False)):
        sizes = config_from_json(json.loads((case / "config.json").read_text()))
        import_weights(case / "params.npz", tmp_path / "a.ckpt", preset=sizes)
        if case == _case(True):  # once through the command line
            res = _cli("--export-deepmind", str(tmp_path / "a.ckpt"), str(tmp_path / "back.npz"))
            assert res.returncode == 0, res.stderr
        else:
            export_deepmind(tmp_path / "a.ckpt", tmp_path / "back.npz")
        original, back = dict(np.load(case / "params.npz")), dict(np.load(tmp_path / "back.npz"))
        assert sorted(back) == sorted(original)
        for key, val in original.items():
            assert back[key].dtype == val.dtype and np.array_equal(back[key], val), key
