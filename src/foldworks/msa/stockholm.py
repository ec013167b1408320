"""Stockholm alignments (jackhmmer ``-A`` output, OpenFold's ``*_hits.sto``) as A3M rows.

The first sequence is the query. Its residue columns become the A3M *match* columns: every
row keeps its letter there in upper case (``-``/``.`` become ``-``). Columns where the query
has a gap are insertions relative to the query: a letter there becomes a lower-case insertion
and a gap there is dropped, so the deletion counts of :func:`foldworks.msa.a3m.parse_a3m` are
those of AlphaFold's Stockholm conversion (supplement 1.2.2). Rows split over several blocks
are joined in file order; ``#=G*`` annotation and ``//`` lines are ignored.
"""

from __future__ import annotations

from foldworks.msa.a3m import A3MError


def stockholm_rows(text: str, name: str = "stockholm") -> list[tuple[str, str]]:
    """``[(sequence name, aligned text)]`` of a Stockholm file in order of first appearance.

    Raises :class:`A3MError` naming ``name`` for a file with no sequences, a malformed line or
    rows of unequal alignment length.
    """
    rows: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#") or line == "//":
            continue
        parts = line.split()
        if len(parts) != 2:
            raise A3MError(f"{name}: line {number} is not '<name> <aligned sequence>'")
        rows.setdefault(parts[0], []).append(parts[1])
    if not rows:
        raise A3MError(f"{name}: no sequences in the Stockholm file")
    joined = [(seq_name, "".join(parts)) for seq_name, parts in rows.items()]
    width = len(joined[0][1])
    for seq_name, aligned in joined:
        if len(aligned) != width:
            raise A3MError(f"{name}: row {seq_name!r} has {len(aligned)} alignment columns, the query has {width}")
    return joined


def stockholm_to_a3m(text: str, name: str = "stockholm") -> list[tuple[str, str]]:
    """A3M records ``[(header, aligned)]`` of a Stockholm alignment, query first (see module doc)."""
    rows = stockholm_rows(text, name)
    query = rows[0][1]
    match = [char not in "-." for char in query]
    records = []
    for seq_name, aligned in rows:
        out = []
        for is_match, char in zip(match, aligned):
            if is_match:
                out.append("-" if char in "-." else char.upper())
            elif char not in "-.":
                out.append(char.lower())
        records.append((seq_name, "".join(out)))
    return records
