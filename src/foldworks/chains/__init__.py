"""The ``chains`` stage: chain table, filters, sequence clusters and leakage-free splits."""
