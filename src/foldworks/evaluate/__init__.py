"""The ``evaluate`` stage: RMSD, lDDT-Cα, GDT-TS/HA and TM-score of predictions (and of an
α-helix baseline) against the reference chains; NumPy only, never torch.

Entry points: ``python -m foldworks.evaluate`` and ``python -m foldworks.evaluate.baseline``;
metric functions live in :mod:`foldworks.evaluate.metrics`.
"""
