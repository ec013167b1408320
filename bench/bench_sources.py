"""Entry selection at full-PDB scale: listing a 230,000-entry mirror and reading 230,000-entry holdings.

Usage: nice -n 10 .venv/bin/python bench/bench_sources.py [--entries 230000] [--workdir /tmp]
       [--out bench/sources.md]

Builds synthetic trees of empty files (``<id>.cif.gz``; divided ``<xy>/<id>.cif.gz``, ~1,300
shards, and flat) and synthetic holdings (every ID released, 5,000 removed), then times what
``workflow/rules/common.smk`` does at every workflow load (``resolve_entries``), cold cache
(first call after building) and warm (best of 3 more). Writes a Markdown table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import string
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from foldworks.fetch import holdings as hold  # noqa: E402
from foldworks.fetch.mirror import list_mirror  # noqa: E402
from foldworks.fetch.selection import resolve_entries  # noqa: E402

ALPHABET = string.digits + string.ascii_lowercase


def synthetic_ids(count: int) -> list[str]:
    """``count`` distinct IDs spread over the 1,296 middle-character shards."""
    shards = [a + b for a in ALPHABET for b in ALPHABET]
    ids = []
    for index in range(count):
        serial = index // len(shards)
        ids.append(f"{1 + serial // 36}{shards[index % len(shards)]}{ALPHABET[serial % 36]}")
    return ids


def build_tree(root: Path, ids: list[str], divided: bool) -> float:
    start = time.perf_counter()
    for entry in ids:
        directory = root / entry[1:3] if divided else root
        directory.mkdir(parents=True, exist_ok=True)
        os.close(os.open(directory / f"{entry}.cif.gz", os.O_CREAT | os.O_WRONLY, 0o644))
    return time.perf_counter() - start


def timed(func, repeats: int = 3) -> tuple[float, float, float, object]:
    """(first call wall s, best of ``repeats`` more: wall s, CPU s of this process, result).
    CPU time is shown because the 2 cores are shared: wall time depends on the others' load."""
    start = time.perf_counter()
    result = func()
    first = time.perf_counter() - start
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        func()
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
    return first, best, best_cpu, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=230_000)
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--out", default=str(REPO / "bench/sources.md"))
    args = parser.parse_args(argv)
    ids = synthetic_ids(args.entries)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="srcbench-") as tmp:
        base = Path(tmp)
        for layout in ("divided", "flat"):
            root = base / layout
            build = build_tree(root, ids, layout == "divided")
            os.sync()
            first, best, cpu, listing = timed(lambda: list_mirror(root))
            assert len(listing.entries) == len(ids) and listing.layout == layout
            rows.append((f"list_mirror, {layout} ({args.entries:,} files; built in {build:.0f} s)", first, best, cpu))
            pdb = {"entries": "all", "source": str(root)}
            first, best, cpu, result = timed(lambda: resolve_entries(pdb, base))
            rows.append((f"resolve_entries(entries: all), {layout}", first, best, cpu))
            listed = base / "list.txt"
            listed.write_text("\n".join(ids[::-1]) + "\n")
            first, best, cpu, result = timed(lambda: resolve_entries({"entries": str(listed), "source": str(root)}, base))
            assert len(result.entries) == len(ids)
            rows.append((f"resolve_entries(file of {len(ids):,} IDs), {layout}", first, best, cpu))
            shutil.rmtree(root)
        served = base / "served"
        served.mkdir()
        released = {e.upper(): "2024-01-10T00:00:00+0000" for e in ids}
        removed = {f"9{ALPHABET[i // 1296 % 36]}{ALPHABET[i // 36 % 36]}{ALPHABET[i % 36]}".upper():
                   {"status_code": "OBS", "obsolete_date": "2005-01-12T00:00:00", "superseded_by": ids[i % len(ids)].upper()}
                   for i in range(5000)}
        (served / hold.RELEASED).write_bytes(gzip.compress(json.dumps(released).encode()))
        (served / hold.REMOVED).write_bytes(gzip.compress(json.dumps(removed).encode()))
        sizes = {name: (served / name).stat().st_size for name in hold.FILES}
        cache = base / "cache"
        pdb = {"entries": "all", "source": "https://files.rcsb.org/download", "holdings": str(served)}
        first, best, cpu, result = timed(lambda: resolve_entries(pdb, base, cache_dir=cache))
        assert len(result.entries) == len(ids)
        rows.append((f"resolve_entries(entries: all), https source, holdings {len(ids):,} released "
                     f"({sizes[hold.RELEASED] / 1e6:.1f} MB gz) + 5,000 removed; first call copies them into the cache",
                     first, best, cpu))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [f"# Entry selection at scale (bench/bench_sources.py, {args.entries:,} synthetic entries)", "",
             "| what | first call, wall s | warm (best of 3), wall s | warm, CPU s |", "|---|---:|---:|---:|"]
    lines += [f"| {what} | {first:.2f} | {best:.2f} | {cpu:.2f} |" for what, first, best, cpu in rows]
    lines += ["", f"Load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores."]
    lines += ["", f"Peak RSS of the benchmark process: {peak:.0f} MB.", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
