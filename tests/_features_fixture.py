"""Build contract-conforming feature files (DATA_FORMATS.md §5) from real mirror entries.

Test-only helper for the models/train/predict tests: it reads real wwPDB entries from the
offline mirror and writes ``{features_dir}/{entry}_{chain}.npz`` plus a ``chains.parquet`` with a
train/val/test split. It uses the real stages (``foldworks.parse.parse_entry`` +
``foldworks.features.build.build_features``) when importable (``pipeline_features``), otherwise a
minimal gemmi reader (``chain_features``). The MSA is the query row only (no search).
"""

from __future__ import annotations

from pathlib import Path

import gemmi
import numpy as np
import pandas as pd

from foldworks.constants import ATOM_ORDER, ATOM_TYPE_NUM, RESTYPE_3TO1, sequence_to_aatype
from foldworks.ids import sequence_hash

#: Small single-domain protein entries of the mirror (mmCIF), chosen for short CPU tests.
DEFAULT_ENTRIES: tuple[str, ...] = (
    "1crn", "1ubq", "5pti", "2igd", "1l2y", "1aki", "3pdz", "4lzt", "1a8o", "1fki",
    "2crb", "1stp", "3ptb", "205l", "1cyo", "2src", "1psm", "1ql2", "3lzm", "1lcd",
)


def _entity_sequence(entity: gemmi.Entity) -> str:
    """One-letter full (SEQRES) sequence of a polymer entity; first microheterogeneity alternative."""
    names = [mon.split(",")[0] for mon in entity.full_sequence]
    return "".join(RESTYPE_3TO1.get(name, "X") for name in names)


def chain_features(structure: gemmi.Structure, entry: str) -> list[dict[str, np.ndarray]]:
    """Feature dicts for every protein chain of model 1 whose residues map onto SEQRES by ``label_seq``.

    Coordinates are in Å, atom37 layout ``[L, 37, 3]``; only the first conformer of each atom is kept.
    """
    out = []
    for chain in structure[0]:
        polymer = chain.get_polymer()
        if len(polymer) == 0 or polymer.check_polymer_type() not in (
            gemmi.PolymerType.PeptideL, gemmi.PolymerType.PeptideD):
            continue
        entity = structure.get_entity_of(polymer)
        if entity is None or not entity.full_sequence:
            continue
        sequence = _entity_sequence(entity)
        length = len(sequence)
        positions = np.zeros((length, ATOM_TYPE_NUM, 3), np.float32)
        atom_mask = np.zeros((length, ATOM_TYPE_NUM), bool)
        for residue in polymer.first_conformer():
            index = (residue.label_seq or 0) - 1
            if not 0 <= index < length:
                continue
            for atom in residue.first_conformer():
                slot = ATOM_ORDER.get(atom.name)
                if slot is not None and not atom_mask[index, slot]:
                    positions[index, slot] = atom.pos.tolist()
                    atom_mask[index, slot] = True
        residue_mask = atom_mask[:, ATOM_ORDER["CA"]].copy()
        if residue_mask.sum() < 10:
            continue
        aatype = np.asarray(sequence_to_aatype(sequence), np.int64)
        out.append({
            "aatype": aatype,
            "msa": aatype[None, :].astype(np.int8),
            "deletion_matrix": np.zeros((1, length), np.float32),
            "residue_mask": residue_mask,
            "atom_positions": positions,
            "atom_mask": atom_mask,
            "target": np.asarray(f"{entry}_{chain.name}"),
            "sequence": np.asarray(sequence),
            "sequence_hash": np.asarray(sequence_hash(sequence)),
        })
    return out


def pipeline_features(path: Path, entry: str) -> list[dict[str, np.ndarray]] | None:
    """Feature dicts made by the real stages (``parse_entry`` + ``build_features``, query-only A3M).

    Returns ``None`` when those stages are not importable (then :func:`chain_features` is used).
    """
    try:
        from foldworks.features.build import build_features
        from foldworks.parse import parse_entry
    except ImportError:
        return None
    parsed = parse_entry(path, entry)
    out = []
    for record in parsed.chains:
        chain = record["chain"]
        if record.get("molecule_type") != "protein" or chain not in parsed.arrays:
            continue
        if int(np.asarray(parsed.arrays[chain]["residue_mask"]).sum()) < 10:
            continue
        sequence = record["sequence"]
        a3m = f">{sequence_hash(sequence)}\n{sequence}\n"
        out.append(build_features(parsed.arrays[chain], a3m, f"{entry}_{chain}"))
    return out


def build_feature_cache(
    mirror: Path,
    out_dir: Path,
    entries: tuple[str, ...] = DEFAULT_ENTRIES,
    max_chains_per_entry: int = 1,
    max_length: int = 400,
) -> Path:
    """Write feature npz files and ``chains.parquet`` under ``out_dir``; return the parquet path.

    Splits are assigned round-robin over the sorted targets: every 5th → ``val``, every 5th
    offset by 2 → ``test``, the rest ``train`` (deterministic).
    """
    features_dir = out_dir / "features"
    features_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for entry in entries:
        path = mirror / f"{entry}.cif.gz"
        if not path.exists():
            continue
        chains = pipeline_features(path, entry)
        if chains is None:
            structure = gemmi.read_structure(str(path))
            structure.setup_entities()
            chains = chain_features(structure, entry)
        for feats in chains[:max_chains_per_entry]:
            length = int(feats["aatype"].shape[0])
            if length > max_length:
                continue
            target = str(feats["target"])
            np.savez_compressed(features_dir / f"{target}.npz", **feats)
            rows.append({
                "entry": entry, "chain": target.split("_", 1)[1], "sequence": str(feats["sequence"]),
                "sequence_hash": str(feats["sequence_hash"]), "length": length,
                "passed_filters": True, "cluster": target,
            })
    rows.sort(key=lambda row: (row["entry"], row["chain"]))
    for index, row in enumerate(rows):
        row["split"] = "val" if index % 5 == 0 else "test" if index % 5 == 2 else "train"
    table = pd.DataFrame(rows)
    chains_path = out_dir / "chains.parquet"
    table.to_parquet(chains_path, index=False)
    return chains_path
