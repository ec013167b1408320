"""A user's PDB/mmCIF file → ProteinMPNN's inputs, with its parser's and ``tied_featurize``'s rules.

Parsing (ProteinMPNN ``parse_PDB``): polymer ``ATOM`` records of the first model, author chain
IDs and residue numbers; ``MSE`` HETATM records count as MET, every other HETATM is ignored
(a non-standard polymer residue becomes a gap). Every residue number between a chain's first and
last is a position: numbers without records are gaps (``X``, no coordinates); insertion codes
are separate residues after the plain number. The first occurrence of each atom name wins
(altlocs are not filtered). Unknown residue names become ``X`` and keep their coordinates.

Featurisation (``tied_featurize``): designed chains (sorted) then fixed chains (sorted);
``chain_encoding_all`` is 1-based in that order; ``residue_idx = 100·(chain number − 1) + running
index over the concatenated chains``; ``mask`` = all four of N, CA, C, O present; missing
coordinates are 0. Positions in the options are 1-based within a chain's parsed sequence.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from foldworks.constants import RESTYPE_3TO1
from foldworks.models.mpnn.features import ALPHABET, N_TOKENS

BACKBONE = ("N", "CA", "C", "O")
#: ProteinMPNN's chain scan order: A–Z, a–z, then numbers.
CHAIN_ORDER = list(string.ascii_uppercase) + list(string.ascii_lowercase) + [str(i) for i in range(300)]


class StructureInputError(ValueError):
    """A structure file or design option that cannot be used (message names the file, chain or position)."""


@dataclass
class ParsedChain:
    """One chain: ``sequence`` (one letter, ``X`` for unknown/gap) and ``coords [L, 4, 3]`` Å (NaN = missing)."""

    sequence: str
    coords: np.ndarray


def read_chains(path: str | Path) -> dict[str, ParsedChain]:
    """Parse a PDB or mmCIF file (optionally gzipped) into chains keyed by author chain ID, in ProteinMPNN's order."""
    import gemmi

    path = Path(path)
    try:
        structure = gemmi.read_structure(str(path))
    except Exception as exc:
        raise StructureInputError(f"{path}: cannot read structure ({exc})") from exc
    if len(structure) == 0:
        raise StructureInputError(f"{path}: no model in file")
    records: dict[str, dict[tuple[int, str], tuple[str, dict[str, np.ndarray]]]] = {}
    for chain in structure[0]:
        for residue in chain:
            name = residue.name
            if residue.het_flag == "H":
                if name != "MSE":
                    continue
                name = "MET"
            key = (residue.seqid.num, residue.seqid.icode.strip())
            slot = records.setdefault(chain.name, {}).setdefault(key, (name, {}))
            for atom in residue:
                slot[1].setdefault(atom.name, np.array([atom.pos.x, atom.pos.y, atom.pos.z]))
    rank = {c: i for i, c in enumerate(CHAIN_ORDER)}
    chains = {}
    for chain_id in sorted(records, key=lambda c: (rank.get(c, len(rank)), c)):
        chains[chain_id] = _assemble(records[chain_id])
    if not chains:
        raise StructureInputError(f"{path}: no ATOM records")
    return chains


def _assemble(residues: Mapping[tuple[int, str], tuple[str, dict[str, np.ndarray]]]) -> ParsedChain:
    numbers = [n for n, _ in residues]
    letters, coords = [], []
    for number in range(min(numbers), max(numbers) + 1):
        icodes = sorted(icode for n, icode in residues if n == number)
        if not icodes:
            letters.append("X")
            coords.append(np.full((4, 3), np.nan))
        for icode in icodes:
            name, atoms = residues[(number, icode)]
            letters.append(RESTYPE_3TO1.get(name, "X"))
            coords.append(np.stack([atoms.get(a, np.full(3, np.nan)) for a in BACKBONE]))
    return ParsedChain("".join(letters), np.stack(coords).astype(np.float64))


@dataclass
class DesignOptions:
    """What to design: chains, fixed/tied positions, per-position omit and bias (1-based positions)."""

    designed_chains: Sequence[str] | None = None  # None = every chain
    fixed_positions: Mapping[str, Sequence[int]] = field(default_factory=dict)
    tied_positions: Sequence[Mapping[str, Sequence[int]]] = ()
    omit_by_position: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    bias_by_position: Mapping[str, Mapping[int, Mapping[str, float]]] = field(default_factory=dict)


def _check_position(chains: Mapping[str, ParsedChain], chain: str, position: int, what: str) -> None:
    if chain not in chains:
        raise StructureInputError(f"{what}: chain {chain!r} not in structure (chains {list(chains)})")
    if not 1 <= int(position) <= len(chains[chain].sequence):
        raise StructureInputError(f"{what}: chain {chain} position {position} outside 1..{len(chains[chain].sequence)}")


def featurize(chains: Mapping[str, ParsedChain], options: DesignOptions | None = None) -> dict[str, object]:
    """ProteinMPNN's inputs (batch of one) for ``chains``; see the module docstring for the rules.

    Returns tensors ``X [1, L, 4, 3]``, ``S``, ``mask``, ``chain_M``, ``chain_M_pos``,
    ``residue_idx``, ``chain_encoding_all`` ``[1, L]``, ``omit_AA_mask``/``bias_by_res [1, L, 21]``,
    plus ``chain_order`` (chain IDs in concatenation order), ``designed_chains``, ``offsets``
    (chain → first index) and ``tied`` (groups of 0-based indices).
    """
    options = options or DesignOptions()
    designed = sorted(options.designed_chains if options.designed_chains is not None else chains)
    for chain in designed:
        if chain not in chains:
            raise StructureInputError(f"designed chain {chain!r} not in structure (chains {list(chains)})")
    order = designed + sorted(c for c in chains if c not in designed)
    offsets, start = {}, 0
    for chain in order:
        offsets[chain] = start
        start += len(chains[chain].sequence)
    coords = np.concatenate([chains[c].coords for c in order])
    seq = "".join(chains[c].sequence for c in order)
    chain_number = np.concatenate([np.full(len(chains[c].sequence), i + 1) for i, c in enumerate(order)])
    chain_M = np.concatenate([np.full(len(chains[c].sequence), float(c in designed)) for c in order])
    chain_M_pos = np.ones(len(seq))
    for chain, positions in options.fixed_positions.items():
        for p in positions:
            _check_position(chains, chain, p, "fixed positions")
            chain_M_pos[offsets[chain] + int(p) - 1] = 0.0
    omit = np.zeros((len(seq), N_TOKENS))
    for chain, per_pos in options.omit_by_position.items():
        for p, letters in per_pos.items():
            _check_position(chains, chain, p, "omitted amino acids")
            for letter in letters:
                omit[offsets[chain] + int(p) - 1, _token(letter, "omitted amino acids")] = 1.0
    bias = np.zeros((len(seq), N_TOKENS))
    for chain, per_pos in options.bias_by_position.items():
        for p, values in per_pos.items():
            _check_position(chains, chain, p, "per-residue bias")
            for letter, value in values.items():
                bias[offsets[chain] + int(p) - 1, _token(letter, "per-residue bias")] = float(value)
    tied = []
    for group in options.tied_positions:
        members = []
        for chain, positions in group.items():
            for p in positions:
                _check_position(chains, chain, p, "tied positions")
                members.append(offsets[chain] + int(p) - 1)
        tied.append(members)
    mask = np.isfinite(coords.sum(axis=(1, 2)))
    as_tensor = lambda a, dtype=torch.float32: torch.as_tensor(np.asarray(a), dtype=dtype)[None]  # noqa: E731
    return {"X": as_tensor(np.nan_to_num(coords, nan=0.0)), "S": as_tensor([ALPHABET.index(a) for a in seq], torch.long),
            "mask": as_tensor(mask.astype(np.float32)), "chain_M": as_tensor(chain_M), "chain_M_pos": as_tensor(chain_M_pos),
            "residue_idx": as_tensor(100 * (chain_number - 1) + np.arange(len(seq)), torch.long),
            "chain_encoding_all": as_tensor(chain_number, torch.long), "omit_AA_mask": as_tensor(omit),
            "bias_by_res": as_tensor(bias), "chain_order": order, "designed_chains": designed, "offsets": offsets,
            "tied": tied}


def _token(letter: str, what: str) -> int:
    if letter not in ALPHABET:
        raise StructureInputError(f"{what}: {letter!r} is not one of {ALPHABET}")
    return ALPHABET.index(letter)
