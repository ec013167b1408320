"""Readers and writers for released model-weight formats (one module per format)."""
