"""``trainer.recipe: openfold``: OpenFold's AlphaFold2 optimiser and learning-rate schedule."""

from __future__ import annotations

import pytest
import torch

from foldworks.train.config import DEFAULT_TRAINER, resolve_config
from foldworks.train.module import StructureModule, openfold_lr


def test_openfold_schedule_warms_up_holds_then_decays_every_50k_steps():
    assert openfold_lr(0, 1000) == pytest.approx(1 / 1000)
    assert openfold_lr(999, 1000) == 1.0
    assert openfold_lr(1000, 1000) == openfold_lr(49_999, 1000) == 1.0
    assert openfold_lr(50_000, 1000) == pytest.approx(0.95)
    assert openfold_lr(99_999, 1000) == pytest.approx(0.95)
    assert openfold_lr(100_000, 1000) == pytest.approx(0.95 ** 2)


def test_recipe_sets_openfolds_values_and_given_keys_override_it():
    trainer = resolve_config({"model": "distogram", "trainer": {"recipe": "openfold", "max_steps": 10,
                                                                "val_every_n_steps": 5, "lr": 5e-4}})["trainer"]
    assert (trainer["warmup_steps"], trainer["grad_clip"], trainer["weight_decay"], trainer["ema_decay"]) == (1000, 0.1, 0.0, 0.999)
    assert trainer["lr"] == 5e-4
    plain = resolve_config({"model": "distogram"})["trainer"]
    assert plain["recipe"] is None and plain["grad_clip"] == DEFAULT_TRAINER["grad_clip"]
    with pytest.raises(ValueError, match="trainer.recipe"):
        resolve_config({"model": "distogram", "trainer": {"recipe": "alphafold3"}})


def test_recipe_builds_adam_with_eps_1e5_and_the_stepwise_schedule():
    config = resolve_config({"model": "distogram", "model_config": {},
                             "trainer": {"recipe": "openfold", "max_steps": 10, "val_every_n_steps": 5}})
    optim = StructureModule(config).configure_optimizers()
    optimizer, scheduler = optim["optimizer"], optim["lr_scheduler"]["scheduler"]
    assert type(optimizer) is torch.optim.Adam and optimizer.defaults["eps"] == 1e-5
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 / 1000)
