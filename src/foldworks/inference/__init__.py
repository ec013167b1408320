"""Prediction from sequences alone (a FASTA file, no structure), as OpenFold's inference script.

- :mod:`foldworks.inference.fasta`: the query FASTA reader (safe unique record names, letter
  checks, sequence hashes)
- :mod:`foldworks.inference.features`: model features of a bare sequence + its a3m
- :mod:`foldworks.inference.confidence`: pTM from the aligned-error head, ranking confidence
- :mod:`foldworks.inference.run`: one record's prediction (mmCIF, PAE JSON, record JSON) and the
  ``ranking.tsv`` of all records
- ``python -m foldworks.inference``: the CLI the ``inference`` rules call
"""
