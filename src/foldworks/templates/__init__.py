"""Template search and template features (AlphaFold 2 supplement section 1.2.3, Alg 2 inputs).

- :mod:`foldworks.templates.config`: the ``templates:`` config section
- :mod:`foldworks.templates.db` (``python -m foldworks.templates.db``): the template database,
  split into content-addressed segments by template sequence hash
- :mod:`foldworks.templates.hhr`: hhsearch ``.hhr`` parsing into :class:`~foldworks.templates.hhr.Hit`
- :mod:`foldworks.templates.search` (``python -m foldworks.templates.search``): hhsearch per
  query sequence and segment, hits cached per query hash
- :mod:`foldworks.templates.select` (``python -m foldworks.templates.select``): the per-chain
  release-date and duplicate filters, ``data/templates/selected.tsv``
- :mod:`foldworks.templates.features` (``python -m foldworks.templates.features``): AlphaFold's
  template feature arrays per query chain

Never imports torch.
"""
