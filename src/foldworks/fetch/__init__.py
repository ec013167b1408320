"""fetch stage: download (or copy from a mirror), validate and store one PDB entry as mmCIF.

Public API: :func:`fetch_entry`, :class:`FetchParams`, :class:`FetchError`,
:func:`foldworks.fetch.manifest.write_manifest`. Never imports torch.
"""

from foldworks.fetch.core import FetchParams, FetchResult, classify_source, fetch_entry
from foldworks.fetch.http import FetchError, NotFound

__all__ = ["FetchError", "FetchParams", "FetchResult", "NotFound", "classify_source", "fetch_entry"]
