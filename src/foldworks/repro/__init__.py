"""Reproducing a run: DVC push/pull of the workflow's artifacts and a provenance guard.

- :mod:`foldworks.repro.artifacts` — the artifact groups DVC tracks (``data/raw.dvc``, …),
  ``dvc add``/``push``/``pull`` without disturbing Snakemake's view (mtimes kept).
- :mod:`foldworks.repro.check` — compares the provenance carried by every checkpoint
  (``checkpoint["provenance"]``) and metrics table (``x.provenance.json`` beside ``x.tsv``)
  with the config slice and code hash the checked-out commit computes for that stage.
- :mod:`foldworks.repro.snake` — ``snakemake -n`` job counts per rule and ``--touch``.
- ``python -m foldworks.repro push|pull|check`` (what ``make push`` / ``make pull`` run).
"""
