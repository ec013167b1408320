"""Validation of every identifier that becomes a path, URL or command argument.

Anything that does not match its strict pattern is refused *before* a path or URL is built.
"""

from __future__ import annotations

import hashlib
import re

ENTRY_PATTERN = re.compile(r"^[0-9][a-z0-9]{3}$")
CHAIN_PATTERN = re.compile(r"^[A-Za-z0-9]{1,4}$")
EXPERIMENT_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
SEQUENCE_HASH_PATTERN = re.compile(r"^[0-9a-f]{20}$")


class InvalidIdentifier(ValueError):
    """An identifier failed validation; the message names it and the expected form."""


def normalize_entry(entry: str) -> str:
    """Return the lower-case PDB ID, or raise :class:`InvalidIdentifier` naming ``entry``.

    A PDB ID is 4 characters: a digit followed by 3 letters or digits (``1AKI`` → ``1aki``).
    """
    if not isinstance(entry, str):
        raise InvalidIdentifier(f"entry {entry!r}: not a string")
    candidate = entry.strip().lower()
    if not ENTRY_PATTERN.fullmatch(candidate):
        raise InvalidIdentifier(
            f"entry {entry!r}: not a 4-character PDB ID (expected a digit then 3 letters/digits)"
        )
    return candidate


def validate_chain(chain: str) -> str:
    """Return ``chain`` if it is a plain author chain ID (1-4 alphanumerics), else raise."""
    if not isinstance(chain, str) or not CHAIN_PATTERN.fullmatch(chain):
        raise InvalidIdentifier(f"chain {chain!r}: not a 1-4 character alphanumeric chain ID")
    return chain


def validate_experiment(name: str) -> str:
    """Return ``name`` if it is a safe experiment name (letter first, then [A-Za-z0-9_-])."""
    if not isinstance(name, str) or not EXPERIMENT_PATTERN.fullmatch(name):
        raise InvalidIdentifier(
            f"experiment {name!r}: must start with a letter and use only letters, digits, _ and -"
        )
    return name


def target_id(entry: str, chain: str) -> str:
    """The ``{entry}_{chain}`` name of one chain, used for feature, prediction and metric rows."""
    return f"{normalize_entry(entry)}_{validate_chain(chain)}"


def split_target(target: str) -> tuple[str, str]:
    """Inverse of :func:`target_id`: ``"1aki_A"`` → ``("1aki", "A")`` (validated)."""
    entry, sep, chain = target.partition("_")
    if not sep:
        raise InvalidIdentifier(f"target {target!r}: expected '<entry>_<chain>'")
    return normalize_entry(entry), validate_chain(chain)


def sequence_hash(sequence: str) -> str:
    """20 hex characters of SHA-256 over the upper-case one-letter sequence.

    Short enough for HH-suite's 31-character ffindex keys; 80 bits make collisions
    negligible at ~10^6 sequences.
    """
    return hashlib.sha256(sequence.upper().encode("ascii")).hexdigest()[:20]


def msa_relpath(seq_hash: str) -> str:
    """Hash-sharded location of a sequence's alignment, relative to ``data/``.

    ``data/msa/<first 2 hex chars>/<hash>.a3m`` keeps directories small at 10^6 files.
    """
    if not SEQUENCE_HASH_PATTERN.fullmatch(seq_hash):
        raise InvalidIdentifier(f"sequence hash {seq_hash!r}: expected 20 lower-case hex chars")
    return f"msa/{seq_hash[:2]}/{seq_hash}.a3m"
