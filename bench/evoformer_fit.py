"""Does a model beat the helix baseline on the chains it was trained on? Per chain and mean.

    .venv/bin/python bench/evoformer_fit.py MODEL.tsv HELIX.tsv [--label train]

``MODEL.tsv`` is an evaluate-stage metrics table (e.g. the train subset that ``predict --train-subset``
writes and ``evaluate --train-out`` scores), ``HELIX.tsv`` the helix baseline's table for the same
split (``results/metrics/train/baseline.tsv`` covers every train chain). Only targets in both are
compared. Prints a markdown table of lDDT-Cα, GDT-TS and TM-score (model / helix) per target, then
the means and how many targets the model wins on each score. A model that cannot beat an ideal
helix on its own training chains has not fitted them; one that beats it there and still loses on
test has learnt something that does not transfer (issue 14, BENCHMARKS.md "Fitting the training
chains").
"""

from __future__ import annotations

import argparse

import pandas as pd

from foldworks.report.summary import read_metric_table

SCORES = ("lddt_ca", "gdt_ts", "tm_score")


def paired(model: pd.DataFrame, helix: pd.DataFrame) -> pd.DataFrame:
    """Rows of both tables on common targets: ``{score}_model`` and ``{score}_helix`` columns."""
    cols = ["target", *SCORES]
    return model[["length", *cols]].merge(helix[cols], on="target", suffixes=("_model", "_helix"))


def summary_lines(both: pd.DataFrame, label: str) -> list[str]:
    """Markdown: one row per target, then the means and the model's win counts."""
    head = "| target | residues | " + " | ".join(f"{s} model / helix" for s in SCORES) + " |"
    lines = [head, "|" + "---|" * (2 + len(SCORES))]
    for row in both.sort_values("target").itertuples():
        cells = [f"{getattr(row, s + '_model'):.3f} / {getattr(row, s + '_helix'):.3f}" for s in SCORES]
        lines.append(f"| {row.target} | {row.length} | " + " | ".join(cells) + " |")
    means = [f"**{both[s + '_model'].mean():.3f} / {both[s + '_helix'].mean():.3f}**" for s in SCORES]
    lines.append(f"| mean ({label}, {len(both)} chains) | | " + " | ".join(means) + " |")
    wins = [f"{int((both[s + '_model'] > both[s + '_helix']).sum())} of {len(both)}" for s in SCORES]
    lines.append("| model wins | | " + " | ".join(wins) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="evaluate-stage metrics TSV of the model")
    parser.add_argument("helix", help="evaluate-stage metrics TSV of the helix baseline")
    parser.add_argument("--label", default="train", help="split name for the mean row")
    args = parser.parse_args(argv)
    both = paired(read_metric_table(args.model), read_metric_table(args.helix))
    if both.empty:
        raise SystemExit(f"no target is in both {args.model} and {args.helix}")
    print("\n".join(summary_lines(both, args.label)))


if __name__ == "__main__":
    main()
