"""Torch-free catalogue of the registered model families and their tasks.

The Snakefile checks every experiment at config load (:mod:`foldworks.train.experiments`); that
check must not import torch (~2 s and ~300 MB per Snakemake call, including every no-op dry run at
full-PDB scale). :data:`FAMILY_TASKS` mirrors the registry (``MODEL_REGISTRY`` + each family's
``task`` attribute); ``tests/test_design.py`` fails when the two differ, so adding a family means
one line here besides its ``@register_model``.
"""

from __future__ import annotations

#: Tasks a family can declare: structure prediction (sequence → coordinates) or sequence design.
TASKS: tuple[str, ...] = ("structure", "design")

#: ``{family name: task}`` of every family registered in :mod:`foldworks.models`.
FAMILY_TASKS: dict[str, str] = {
    "distogram": "structure",
    "msa_trunk": "structure",
    "evoformer": "structure",
    "mpnn": "design",
}
