"""Design sequences for a user's own backbone files with ProteinMPNN weights: ``python -m foldworks.design``."""
