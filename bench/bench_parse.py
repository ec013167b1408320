"""Benchmark: the parse stage function against bare ``gemmi.read_structure`` on the same files.

    .venv/bin/python bench/bench_parse.py [--mirror ../shared/pdb_mirror] [--reps 5] [--out bench/parse.md]

For every mirror entry and every repetition, both are timed back to back (same file, warm page
cache; one untimed warm-up pass first). Reported: the total wall time per pass (median over
repetitions) and the ratio parse_entry / read_structure. Goal: ratio ≤ 1.4.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import statistics
import time
from pathlib import Path

import gemmi

from foldworks.parse import parse_entry

REPO = Path(__file__).resolve().parents[1]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def time_pass(files: list[Path]) -> tuple[dict[str, float], dict[str, float], int]:
    """One pass: seconds per file for read_structure and parse_entry, and the failed-parse count."""
    gemmi_s: dict[str, float] = {}
    parse_s: dict[str, float] = {}
    failed = 0
    for path in files:
        start = time.perf_counter()
        gemmi.read_structure(str(path))
        gemmi_s[path.name] = time.perf_counter() - start
        start = time.perf_counter()
        parsed = parse_entry(path, path.name[:4])
        parse_s[path.name] = time.perf_counter() - start
        failed += parsed.status != "ok"
    return gemmi_s, parse_s, failed


def report(files: list[Path], passes: list[tuple[dict, dict, int]], reps: int) -> str:
    """Markdown summary of the timed passes."""
    g_tot = [sum(g.values()) for g, _, _ in passes]
    p_tot = [sum(p.values()) for _, p, _ in passes]
    g_med, p_med = statistics.median(g_tot), statistics.median(p_tot)
    per_file = {f.name: (statistics.median(g[f.name] for g, _, _ in passes),
                         statistics.median(p[f.name] for _, p, _ in passes)) for f in files}
    worst = sorted(per_file.items(), key=lambda kv: kv[1][1] - kv[1][0], reverse=True)[:5]
    lines = [
        "# Parse stage benchmark", "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.node()}, {_cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"Python {platform.python_version()}, gemmi {gemmi.__version__}",
        f"- input: {len(files)} mirror entries ({sum(f.name.endswith('.pdb.gz') for f in files)} legacy .pdb.gz), "
        f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB gzipped",
        f"- repetitions: {reps} timed passes after 1 warm-up pass; both timed back to back per file; "
        f"failed parses: {passes[0][2]}",
        "- command: `.venv/bin/python bench/bench_parse.py`", "",
        "| | total per pass (median), s | min, s | max, s |", "|---|---|---|---|",
        f"| `gemmi.read_structure` | {g_med:.3f} | {min(g_tot):.3f} | {max(g_tot):.3f} |",
        f"| `foldworks.parse.parse_entry` | {p_med:.3f} | {min(p_tot):.3f} | {max(p_tot):.3f} |", "",
        f"**Ratio parse_entry / read_structure: {p_med / g_med:.2f}x** (goal ≤ 1.4x).", "",
        "Largest absolute overheads (median per file, s):", "",
        "| file | read_structure | parse_entry | ratio |", "|---|---|---|---|",
    ]
    lines += [f"| {name} | {g:.4f} | {p:.4f} | {p / g:.2f} |" for name, (g, p) in worst]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=Path(os.environ.get("FOLDWORKS_PDB_MIRROR",
                                                                           REPO.parent / "shared" / "pdb_mirror")))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "parse.md")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # parse logs per entry; keep timing free of I/O to stderr
    files = sorted(p for p in args.mirror.iterdir() if p.name.endswith((".cif.gz", ".pdb.gz")))
    time_pass(files)  # warm-up: imports, gemmi tables, page cache
    passes = [time_pass(files) for _ in range(args.reps)]
    text = report(files, passes, args.reps)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
