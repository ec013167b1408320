"""Design sequences for your own backbone with ProteinMPNN weights.

    python -m foldworks.design --structure my.cif --checkpoint v_48_020.pt --out designs/ \\
        [--chains-to-design "A B"] [--fixed-positions "A:1-10,15 B:3"] [--tied-positions "A:1-50 B:1-50"] \\
        [--homo-oligomer] [--omit-aas XC] [--bias-aa "W:-1.0,A:0.5"] [--bias-by-res FILE] [--omit-aa-by-res FILE] \\
        [--temperature 0.1 0.2] [--num-seq 8] [--batch-size 1] [--backbone-noise 0.0] [--seed 37] \\
        [--save-probs] [--score-only | --conditional-probs-only [--conditional-probs-backbone-only]
         | --unconditional-probs-only]

Positions are 1-based within a chain as parsed (gaps in residue numbering count). A tied group
"A:1-50 B:1-50" ties A1 with B1, A2 with B2, …; separate several groups with ";".
``--homo-oligomer`` ties every designed chain position by position (equal lengths required).
``--bias-by-res`` / ``--omit-aa-by-res``: JSON ``{chain: {position: {"A": bias, …}}}`` /
``{chain: {position: "CP"}}``. ``--checkpoint`` takes a released ProteinMPNN ``.pt`` or a
foldworks ``mpnn`` checkpoint. Defaults are ProteinMPNN's (X omitted, T = 0.1, one sequence).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from foldworks.design.structure import DesignOptions, StructureInputError, read_chains

log = logging.getLogger("foldworks.design")


def parse_positions(text: str) -> list[int]:
    """``"1-3,7"`` → ``[1, 2, 3, 7]``."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        if not low.isdigit() or not (high or low).isdigit():
            raise StructureInputError(f"positions {text!r}: {part!r} is not a number or range (e.g. 1-10,15)")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def parse_chain_specs(text: str) -> dict[str, list[int]]:
    """``"A:1-3 B:7"`` → ``{"A": [1, 2, 3], "B": [7]}``."""
    specs = {}
    for item in text.split():
        chain, sep, positions = item.partition(":")
        if not sep:
            raise StructureInputError(f"position spec {item!r}: expected CHAIN:POSITIONS, e.g. A:1-10,15")
        specs[chain] = parse_positions(positions)
    return specs


def parse_tied(text: str) -> list[dict[str, list[int]]]:
    """``"A:1-2 B:1-2"`` → ``[{"A": [1], "B": [1]}, {"A": [2], "B": [2]}]`` (groups separated by ``;``)."""
    groups = []
    for block in filter(str.strip, text.split(";")):
        specs = parse_chain_specs(block)
        lengths = {len(v) for v in specs.values()}
        if len(lengths) != 1:
            raise StructureInputError(f"tied positions {block!r}: every chain needs the same number of positions")
        for i in range(lengths.pop()):
            groups.append({chain: [positions[i]] for chain, positions in specs.items()})
    return groups


def parse_bias(text: str) -> dict[str, float]:
    """``"W:-1.0,A:0.5"`` → ``{"W": -1.0, "A": 0.5}`` (added to the logits, divided by T)."""
    out = {}
    for item in filter(None, text.split(",")):
        letter, _, value = item.partition(":")
        try:
            out[letter.strip()] = float(value)
        except ValueError:
            raise StructureInputError(f"--bias-aa {text!r}: {item!r} is not LETTER:NUMBER") from None
    return out


def build_options(args: argparse.Namespace) -> DesignOptions:
    chains = read_chains(args.structure)
    designed = args.chains_to_design.split() if args.chains_to_design else None
    tied = parse_tied(args.tied_positions) if args.tied_positions else []
    if args.homo_oligomer:
        members = sorted(designed or chains)
        lengths = {len(chains[c].sequence) for c in members}
        if len(lengths) != 1:
            raise StructureInputError(f"--homo-oligomer: designed chains {members} differ in length {sorted(lengths)}")
        tied += [{c: [p] for c in members} for p in range(1, lengths.pop() + 1)]
    by_res = json.loads(Path(args.bias_by_res).read_text()) if args.bias_by_res else {}
    omit_by_res = json.loads(Path(args.omit_aa_by_res).read_text()) if args.omit_aa_by_res else {}
    return DesignOptions(designed_chains=designed,
                         fixed_positions=parse_chain_specs(args.fixed_positions) if args.fixed_positions else {},
                         tied_positions=tied, omit_by_position=omit_by_res, bias_by_position=by_res)


def probs_mode(args: argparse.Namespace) -> str:
    """The probability-only mode asked for ("" for design)."""
    if args.unconditional_probs_only:
        return "unconditional"
    if args.conditional_probs_only:
        return "conditional_backbone" if args.conditional_probs_backbone_only else "conditional"
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.design", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--structure", required=True, type=Path, help="PDB or mmCIF file (may be gzipped)")
    parser.add_argument("--checkpoint", required=True, type=Path, help="ProteinMPNN .pt or foldworks mpnn checkpoint")
    parser.add_argument("--out", required=True, type=Path, help="output folder (seqs/, probs/, score_only/)")
    parser.add_argument("--chains-to-design", default="", help='space-separated chain IDs (default: all)')
    parser.add_argument("--fixed-positions", default="", help='e.g. "A:1-10,15 B:3" (kept native)')
    parser.add_argument("--tied-positions", default="", help='e.g. "A:1-50 B:1-50"; groups separated by ";"')
    parser.add_argument("--homo-oligomer", action="store_true", help="tie all designed chains position by position")
    parser.add_argument("--omit-aas", default="X", help="amino acids never sampled (default X)")
    parser.add_argument("--bias-aa", default="", help='global logit bias, e.g. "W:-1.0,A:0.5"')
    parser.add_argument("--bias-by-res", default=None, help="JSON {chain: {position: {AA: bias}}}")
    parser.add_argument("--omit-aa-by-res", default=None, help='JSON {chain: {position: "AAs"}}')
    parser.add_argument("--temperature", type=float, nargs="+", default=[0.1], help="sampling temperature(s)")
    parser.add_argument("--num-seq", type=int, default=1, help="sequences per temperature")
    parser.add_argument("--batch-size", type=int, default=1, help="sequences sampled together")
    parser.add_argument("--backbone-noise", type=float, default=0.0, help="Gaussian noise on the backbone, Å")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0: draw one, reported in the FASTA)")
    parser.add_argument("--save-probs", action="store_true", help="also write per-position probabilities (npz)")
    parser.add_argument("--score-only", action="store_true", help="score the native sequence only")
    parser.add_argument("--conditional-probs-only", action="store_true",
                        help="log-probabilities of each designed position given the rest of the sequence")
    parser.add_argument("--conditional-probs-backbone-only", action="store_true",
                        help="with --conditional-probs-only: given the backbone only")
    parser.add_argument("--unconditional-probs-only", action="store_true",
                        help="log-probabilities from the structure alone (no sequence)")
    parser.add_argument("--threads", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    from foldworks.design.run import SamplingSettings, design_structure, write_outputs

    torch.set_num_threads(max(1, args.threads))
    try:
        if args.num_seq < 1 or args.batch_size < 1 or args.num_seq % args.batch_size:
            raise StructureInputError(f"--num-seq {args.num_seq} must be a positive multiple of --batch-size "
                                      f"{args.batch_size}")
        options = build_options(args)
        settings = SamplingSettings(temperatures=args.temperature, num_seq=args.num_seq, batch_size=args.batch_size,
                                    omit_aas=args.omit_aas, bias_aa=parse_bias(args.bias_aa),
                                    backbone_noise=args.backbone_noise, seed=args.seed, score_only=args.score_only,
                                    save_probs=args.save_probs, probs_only=probs_mode(args))
        result = design_structure(args.checkpoint, args.structure, options, settings)
        for path in write_outputs(result, args.out, args.save_probs):
            log.info("wrote %s", path)
    except (StructureInputError, ValueError, FileNotFoundError, KeyError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
