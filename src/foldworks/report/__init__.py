"""The ``report`` stage: summary table (with bootstrap intervals) and seaborn plots of every
experiment against the α-helix baseline; entry point ``python -m foldworks.report``."""
