"""AlphaFold's template features of one query chain from its selected templates.

For each selected template (rank order, ``T`` of them, at most ``templates.max_hits``) the
template chain's atom37 coordinates are mapped onto the query residues through the hhsearch
alignment, as ``_extract_template_features`` in ``alphafold/data/templates.py`` does; query
residues without an aligned template residue get zeros and gap ``-``. ``N`` is the length of
the query chain's full sequence. Arrays (``data/templates/features/<entry>_<chain>.npz``):

    template_aatype               int32   [T, N]      AF2 restype order (A R N D ... V), 20 = X, 21 = gap
    template_all_atom_positions   float32 [T, N, 37, 3]  Å, zero where the mask is 0
    template_all_atom_masks       float32 [T, N, 37]
    template_sum_probs            float32 [T, 1]      hhsearch Sum_probs of the hit
    template_domain_names         bytes   [T]         ``<entry>_<chain>`` of the template
    template_sequence             bytes   [T]         template residues on the query axis (``-``: none)

``template_aatype`` is AF2's 22-class HHblits one-hot after AF2's own remapping to its
restype order (``fix_templates_aatype``), stored as indices. A template whose aligned residues
differ from its parsed chain is dropped (logged), as AF2 drops a hit whose mmCIF disagrees.

CLI (one entry shard)::

    python -m foldworks.templates.features --key K --items 1abc_A,1abc_B --manifest M \\
        --table data/chains.parquet --selected data/templates/selected.tsv --code C
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from foldworks import fsutil
from foldworks.constants import ATOM_TYPE_NUM, GAP_INDEX, RESTYPES, UNK_INDEX
from foldworks.ids import split_target
from foldworks.logutil import setup_logging
from foldworks.parse.io import load_parsed_chain
from foldworks.shards import file_sha256, sha256_bytes, stamp_of
from foldworks.shards.run import Outcome, Plan, run_items
from foldworks.templates.hhr import Hit
from foldworks.templates.search import hits_path, read_hits
from foldworks.templates.select import read_selected

LOG = logging.getLogger("foldworks.templates.features")
#: HHblits letters AF2 maps onto another residue (B->D, Z->E, U->C); all others unknown -> X.
_AMBIGUOUS = {"B": "D", "Z": "E", "U": "C"}
_AATYPE = {aa: i for i, aa in enumerate(RESTYPES)} | {k: RESTYPES.index(v) for k, v in _AMBIGUOUS.items()} | {"-": GAP_INDEX}


def template_aatype(sequence: str) -> np.ndarray:
    """``[N]`` int32 AF2 restype indices of a template sequence on the query axis (``-`` = 21)."""
    return np.array([_AATYPE.get(letter, UNK_INDEX) for letter in sequence.upper()], dtype=np.int32)


def empty_features(n_res: int) -> dict[str, np.ndarray]:
    """The feature arrays with ``T = 0`` templates for a query of ``n_res`` residues."""
    return {"template_aatype": np.zeros((0, n_res), np.int32),
            "template_all_atom_positions": np.zeros((0, n_res, ATOM_TYPE_NUM, 3), np.float32),
            "template_all_atom_masks": np.zeros((0, n_res, ATOM_TYPE_NUM), np.float32),
            "template_sum_probs": np.zeros((0, 1), np.float32),
            "template_domain_names": np.zeros((0,), "S1"), "template_sequence": np.zeros((0,), "S1")}


def map_template(hit: Hit, chain: dict[str, np.ndarray], n_res: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Template atoms on the query axis: positions ``[N,37,3]``, mask ``[N,37]``, sequence (``N`` letters).

    ``chain``: arrays of :func:`foldworks.parse.io.load_parsed_chain`. Raises ``ValueError``
    when an aligned template residue is outside the chain or differs from its ``aatype``."""
    positions = np.zeros((n_res, ATOM_TYPE_NUM, 3), np.float32)
    mask = np.zeros((n_res, ATOM_TYPE_NUM), np.float32)
    letters = ["-"] * n_res
    template_letters = hit.template_aln.replace("-", "")
    for qi, ti in hit.index_pairs():
        if qi >= n_res or ti >= len(chain["aatype"]):
            raise ValueError(f"aligned pair ({qi}, {ti}) outside query ({n_res}) or template ({len(chain['aatype'])})")
        letter = template_letters[ti - hit.template_start]
        stored = int(chain["aatype"][ti])
        if stored != UNK_INDEX and template_aatype(letter)[0] != stored:
            raise ValueError(f"template residue {ti} is {letter!r} in the alignment but {RESTYPES[stored]!r} in the chain")
        residue_mask = chain["atom_mask"][ti] * bool(chain["residue_mask"][ti])
        mask[qi] = residue_mask
        positions[qi] = chain["atom_positions"][ti] * residue_mask[:, None]
        letters[qi] = letter
    return positions, mask, "".join(letters)


def chain_features(selected: pd.DataFrame, n_res: int, hits_dir: str | Path,
                   npz_of: Callable[[str], Path]) -> dict[str, np.ndarray]:
    """Stacked features of one query chain's ``selected`` rows (rank order); ``npz_of(entry)``:
    the template entry's parsed arrays (data/parsed/<entry>.npz, or parsed on demand)."""
    if selected.empty:
        return empty_features(n_res)
    stacks: dict[str, list] = {key: [] for key in empty_features(0)}
    for row in selected.sort_values("rank").itertuples(index=False):
        hits = {hit.name: hit for hit in read_hits(hits_path(hits_dir, row.segment, row.query_sequence_hash))}
        entry, chain_id = split_target(row.template)
        try:
            chain = load_parsed_chain(npz_of(entry), chain_id)
            positions, mask, sequence = map_template(hits[row.template_sequence_hash], chain, n_res)
        except (LookupError, ValueError, OSError) as exc:
            LOG.warning("template %s of %s dropped: %s", row.template, row.query, exc)
            continue
        stacks["template_aatype"].append(template_aatype(sequence))
        stacks["template_all_atom_positions"].append(positions)
        stacks["template_all_atom_masks"].append(mask)
        stacks["template_sum_probs"].append([row.sum_probs])
        stacks["template_domain_names"].append(row.template.encode("ascii"))
        stacks["template_sequence"].append(sequence.encode("ascii"))
    if not stacks["template_aatype"]:
        return empty_features(n_res)
    dtypes = {"template_sum_probs": np.float32, "template_domain_names": bytes, "template_sequence": bytes}
    return {key: np.array(values, dtype=dtypes.get(key)) for key, values in stacks.items()}


def features_path(features_dir: str | Path, target: str) -> Path:
    return Path(features_dir) / f"{target}.npz"


def template_sources(parsed_dir: str, mmcif_dir: str | None) -> tuple[Callable[[str], Path], Callable[[str], Path]]:
    """(parsed npz of a template entry, the file its digest follows): the pipeline's parsed entries,
    or with ``mmcif_dir`` (a pdb_seqres database) the mmCIF parsed on demand into ``parsed_dir``."""
    if mmcif_dir is None:
        npz = lambda entry: Path(parsed_dir) / f"{entry}.npz"  # noqa: E731
        return npz, npz
    from foldworks.templates.seqres import mmcif_path, parsed_template

    return (lambda entry: parsed_template(entry, mmcif_dir, parsed_dir)), (lambda entry: mmcif_path(mmcif_dir, entry))


def planner(table: pd.DataFrame, selected: pd.DataFrame, hits_dir: str, parsed_dir: str, features_dir: str,
            mmcif_dir: str | None = None):
    """Plan of one query chain's feature file: its input digest hashes its selected rows and the
    hits and template structure files they read, so it is rebuilt exactly when one changed."""
    npz_of, source_of = template_sources(parsed_dir, mmcif_dir)
    lengths = {f"{e}_{c}": len(s) for e, c, s in zip(table["entry"], table["chain"], table["sequence"])}
    groups = dict(tuple(selected.groupby("query")))

    def plan(target: str) -> Plan:
        if target not in lengths:
            raise LookupError(f"templates {target}: not in the chain table")
        rows = groups.get(target, selected.iloc[0:0])
        files = sorted({str(hits_path(hits_dir, s, h)) for s, h in zip(rows["segment"], rows["query_sequence_hash"])}
                       | {str(source_of(t.split("_")[0])) for t in rows["template"]})
        digest = sha256_bytes(str(lengths[target]), rows.to_csv(sep="\t", index=False), *map(file_sha256, files))
        out = features_path(features_dir, target)

        def compute() -> Outcome:
            fsutil.write_npz_atomic(out, chain_features(rows, lengths[target], hits_dir, npz_of))
            return "ok", file_sha256(out), ""

        return Plan(digest, [str(out)], compute)

    return plan


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.templates.features", description=__doc__.split("\n")[0])
    parser.add_argument("--key", required=True, help="entry shard key")
    parser.add_argument("--items", required=True, help="comma-separated query chains <entry>_<chain>")
    parser.add_argument("--manifest", required=True, help="output manifest")
    parser.add_argument("--table", required=True, help="chain table (data/chains.parquet)")
    parser.add_argument("--selected", required=True, help="selection table (data/templates/selected.tsv)")
    parser.add_argument("--code", default="", help="code hash (part of each row's stamp)")
    parser.add_argument("--hits-dir", default="data/templates/hits")
    parser.add_argument("--parsed-dir", default="data/parsed",
                        help="parsed template entries (with --mmcif-dir: where they are parsed to)")
    parser.add_argument("--mmcif-dir", help="with a pdb_seqres database: the templates' mmCIF files")
    parser.add_argument("--features-dir", default="data/templates/features")
    parser.add_argument("--failures-dir", default="data/failures")
    args = parser.parse_args(argv)
    setup_logging("templates.features")
    items = sorted({item.split(":")[0] for item in args.items.split(",") if item})
    table = pd.read_parquet(args.table, columns=["entry", "chain", "sequence"])
    plan_of = planner(table, read_selected(args.selected), args.hits_dir, args.parsed_dir, args.features_dir,
                      args.mmcif_dir)
    run_items("template_features", args.key, items, args.manifest, stamp_of(args.code, ""), plan_of,
              failures_dir=args.failures_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
