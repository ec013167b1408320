"""Parse hhsearch/hhblits ``.hhr`` result files into alignment hits.

The fields follow AlphaFold's ``TemplateHit`` (``alphafold/data/parsers.py``): per hit the
template name, aligned columns, sum of posterior probabilities (``Sum_probs``) and the aligned
query and template strings, from which the residue index pairs are derived.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Alignment rows of the hit blocks that are annotation, not sequence.
_ANNOTATION_NAMES = ("Consensus", "ss_dssp", "ss_pred", "ss_conf")
_SCORE = re.compile(r"([\w-]+)=\s*([-+0-9.eE]+)%?")


class HHRError(ValueError):
    """An ``.hhr`` file that cannot be read as hhsearch output."""


@dataclass(frozen=True)
class Hit:
    """One template hit. ``query_start``/``template_start`` are 0-based residue indices of the
    first aligned column; ``query_aln``/``template_aln`` are equal-length strings with ``-`` gaps."""

    name: str
    prob: float
    evalue: float
    sum_probs: float
    aligned_cols: int
    query_start: int
    template_start: int
    query_aln: str
    template_aln: str

    def index_pairs(self) -> list[tuple[int, int]]:
        """``[(query index, template index)]`` (0-based) of the columns where neither has a gap."""
        pairs, qi, ti = [], self.query_start, self.template_start
        for q, t in zip(self.query_aln, self.template_aln):
            if q != "-" and t != "-":
                pairs.append((qi, ti))
            qi += q != "-"
            ti += t != "-"
        return pairs

    def identity(self) -> float:
        """Fraction of gap-free aligned columns with the same residue in query and template."""
        pairs = [(q, t) for q, t in zip(self.query_aln, self.template_aln) if q != "-" and t != "-"]
        return sum(q.upper() == t.upper() for q, t in pairs) / len(pairs) if pairs else 0.0


def _alignment_row(line: str) -> tuple[str, int, str] | None:
    """``(name, 1-based start, residues)`` of a ``Q``/``T`` sequence row; None for annotation rows."""
    parts = line.split()
    if len(parts) < 5 or parts[1] in _ANNOTATION_NAMES or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2]), parts[3]


def _parse_block(lines: list[str]) -> Hit:
    name = lines[0][1:].split()[0]
    scores = dict(_SCORE.findall(lines[1]))
    try:
        prob, evalue = float(scores["Probab"]), float(scores["E-value"])
        sum_probs, cols = float(scores.get("Sum_probs", 0.0)), int(scores["Aligned_cols"])
    except KeyError as exc:
        raise HHRError(f"hit {name}: score line lacks {exc}") from None
    query, template, starts = [], [], {}
    for line in lines[2:]:
        kind = line[:2]
        row = _alignment_row(line) if kind in ("Q ", "T ") else None
        if row is None:
            continue
        starts.setdefault(kind, row[1] - 1)
        (query if kind == "Q " else template).append(row[2])
    query_aln, template_aln = "".join(query), "".join(template)
    if not query_aln or len(query_aln) != len(template_aln):
        raise HHRError(f"hit {name}: query and template alignment rows differ in length or are missing")
    return Hit(name, prob, evalue, sum_probs, cols, starts["Q "], starts["T "], query_aln, template_aln)


def parse_hhr(text: str) -> list[Hit]:
    """Every hit of an ``.hhr`` file, in file order (best first). Raises :class:`HHRError`."""
    if not text.startswith("Query"):
        raise HHRError("not an hhr file: it does not start with 'Query'")
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("No ") and line[3:].strip().isdigit():
            blocks.append([])
        elif blocks and (blocks[-1] or line.startswith(">")):
            blocks[-1].append(line)
    return [_parse_block(block) for block in blocks if len(block) >= 2]
