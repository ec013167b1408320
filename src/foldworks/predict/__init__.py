"""Prediction stage: whole-chain inference from a checkpoint → mmCIF Cα traces + ``index.tsv``.

Public API: :func:`foldworks.predict.run.predict`, :func:`foldworks.predict.writer.write_ca_mmcif`.
"""
