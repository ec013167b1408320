"""The workflow config as Snakemake builds it, and each stage's config slice and code parts.

The Snakefile's configuration is the ``--configfile`` files deep-merged in order or, when none is
given, the demo configuration ``config/config.yaml``; it is validated against
``workflow/schemas/config.schema.yaml``, which fills in every default. :func:`load_workflow_config`
does the same, so the hashes computed here equal those of the ``params:`` the rules pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_CONFIGFILE = "config/config.yaml"
SCHEMA = "workflow/schemas/config.schema.yaml"

#: Sub-packages whose code hash a stage's artifacts record (the same parts as the rules'
#: ``code_hash(...)`` in workflow/rules/train.smk and evaluate.smk).
STAGE_CODE_PARTS: dict[str, tuple[str, ...]] = {
    "train": ("train", "models"),
    "evaluate": ("evaluate",),
}


class ConfigError(ValueError):
    """The workflow config cannot be loaded or lacks what an artifact needs; the message says which."""


def load_workflow_config(repo: Path, configfiles: list[Path] = ()) -> dict[str, Any]:
    """``configfiles`` deep-merged in order (none: ``config/config.yaml``), validated, defaults filled.

    As the Snakefile: a ``--configfile`` replaces the demo configuration, it is not merged over it."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config, validate

    paths = [Path(path) for path in configfiles] or [repo / DEFAULT_CONFIGFILE]
    config: dict[str, Any] = {}
    for path in paths:
        if not path.exists():
            raise ConfigError(f"config file {path} not found")
        update_config(config, load_configfile(str(path)))
    try:
        validate(config, str(repo / SCHEMA), set_default=True)
    except Exception as exc:  # snakemake raises WorkflowError with the schema message
        raise ConfigError(f"config does not validate against {SCHEMA}: {exc}") from exc
    return config


def expected_slice(config: dict[str, Any], stage: str, experiment: str | None = None) -> Any:
    """The config slice a stage's rule passes in ``params:`` (``train``: the experiment's section)."""
    if stage == "train":
        experiments = config.get("experiments") or {}
        if experiment not in experiments:
            raise ConfigError(f"experiment {experiment!r} is not in the current config "
                              f"(experiments: {', '.join(sorted(experiments)) or 'none'})")
        # as the train rule passes it: without the predict-only `predict` settings (design families)
        return {k: v for k, v in experiments[experiment].items() if k != "predict"}
    if stage == "evaluate":
        return config.get("evaluate", {})
    raise ConfigError(f"no provenance check is defined for stage {stage!r}")
