"""Training stage: one LightningModule for every registered model, one DataModule over the feature cache.

Public API: :func:`foldworks.train.run.fit`, :func:`foldworks.train.config.resolve_config`,
:func:`foldworks.train.checkpoint.load_checkpoint`. Imports torch lazily (importing this package is cheap).
"""
