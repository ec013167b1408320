"""parse stage: one mmCIF entry → cleaned atom37 arrays per protein chain + JSON metadata.

Public API: :func:`parse_entry` (pure), :func:`write_parsed`, :func:`load_parsed_chain`,
:func:`read_parsed_json`, :class:`ParsedEntry`, :class:`ParseOptions`. Never imports torch.
"""

from foldworks.parse.core import ParsedEntry, ParseError, ParseOptions, failed_entry, parse_entry
from foldworks.parse.io import ARRAY_NAMES, load_parsed_chain, read_parsed_json, write_parsed

__all__ = [
    "ARRAY_NAMES", "ParseError", "ParseOptions", "ParsedEntry", "failed_entry", "load_parsed_chain",
    "parse_entry", "read_parsed_json", "write_parsed",
]
