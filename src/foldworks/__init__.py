"""foldworks: a reproducible, workflow-managed repository for training biomolecular structure models.

Glossary used everywhere in the package:

- *entry*: a PDB ID, lower case in paths (``1aki``).
- *chain*: an author chain ID (``auth_asym_id``) of one polymer chain of an entry.
- *target*: ``{entry}_{chain}``, the unit that is featurised, predicted and scored.
- *sequence hash*: :func:`foldworks.ids.sequence_hash` of a one-letter sequence.
- *experiment*: a named model + data + trainer configuration under ``config: experiments``.
- *split*: ``train``, ``val`` or ``test``.

Sub-packages never import torch unless they train or predict, so that the per-entry jobs
(fetch, parse, chains, msa, features) start fast.
"""

__version__ = "0.1.0"
