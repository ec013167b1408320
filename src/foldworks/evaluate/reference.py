"""Run the reference implementations the metrics are checked against (tests and bench only).

- ``TMscore model ref`` (tm-align package): RMSD, TM-score, GDT-TS, GDT-HA, residues paired by
  number.
- OpenStructure 2.3.1 ``compare-structures`` (Debian ``openstructure`` + ``python3-ost``): lDDT.
  The ``ost`` wrapper is broken on Debian 12, so the action is started through
  ``ost_startup.py``; it needs ``compounds.chemlib`` (built by ``chemdict_tool create``, see
  ``workflow/scripts/ensure_testtools.sh``). Flags used: ``-c A:A`` (chain mapping), ``-rna``
  (residues paired by number), ``-l -spr`` (lDDT with per-residue scores), ``-ca`` for Cα-only;
  stereochemistry checks (``-sc``) are off; hydrogens are removed (the default ``-rm hyd``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from foldworks.constants import ATOM_TYPES, RESTYPE_1TO3, RESTYPES

OST_STARTUP = Path("/usr/lib/python3/dist-packages/ost/ost_startup.py")
OST_ACTION = Path("/usr/bin/ost-compare-structures")
OST_CHEMLIB = Path("/usr/share/openstructure/compounds.chemlib")
_SETUP_HINT = "`make test` installs it (workflow/scripts/ensure_testtools.sh)"


class ReferenceToolMissing(RuntimeError):
    """A reference program is not installed; the message says how to get it."""


def tmscore_path() -> str:
    """Path of ``TMscore`` or :class:`ReferenceToolMissing`."""
    found = shutil.which("TMscore")
    if found is None:
        raise ReferenceToolMissing(f"TMscore (Debian tm-align) is not installed; {_SETUP_HINT}")
    return found


def ost_command() -> list[str]:
    """Command prefix of OpenStructure's ``compare-structures`` or :class:`ReferenceToolMissing`."""
    python = shutil.which("python3", path="/usr/bin") or "/usr/bin/python3"
    for needed in (OST_STARTUP, OST_ACTION):
        if not needed.exists():
            raise ReferenceToolMissing(
                f"OpenStructure is not installed ({needed} missing; Debian openstructure + "
                f"python3-ost); {_SETUP_HINT}")
    if not OST_CHEMLIB.exists():
        raise ReferenceToolMissing(
            f"OpenStructure compound library {OST_CHEMLIB} missing (chemdict_tool create); {_SETUP_HINT}")
    return [python, str(OST_STARTUP), str(OST_ACTION), "-cl", str(OST_CHEMLIB)]


def write_pdb(path: str | Path, aatype: np.ndarray, positions: np.ndarray, mask: np.ndarray,
              numbers: np.ndarray | None = None, bfactors: np.ndarray | None = None) -> None:
    """Write chain A of atom37 arrays (``positions [L, 37, 3]`` Å, ``mask [L, 37]``) as PDB.

    Residues are numbered ``numbers [L]`` (default ``1..L``); residues without atoms are left out.
    """
    numbers = np.arange(1, len(aatype) + 1) if numbers is None else numbers
    lines, serial = [], 0
    for index, (kind, number) in enumerate(zip(aatype, numbers)):
        name = RESTYPE_1TO3.get(RESTYPES[kind] if kind < len(RESTYPES) else "X", "UNK")
        for slot in np.flatnonzero(mask[index]):
            serial += 1
            atom = ATOM_TYPES[slot]
            x, y, z = positions[index, slot]
            b = 0.0 if bfactors is None else float(bfactors[index])
            label = f" {atom:<3s}" if len(atom) < 4 else atom
            lines.append(f"ATOM  {serial:5d} {label} {name} A{int(number):4d}    "
                         f"{x:8.3f}{y:8.3f}{z:8.3f}  1.00{b:6.2f}           {atom[0]}")
    Path(path).write_text("\n".join(lines + ["TER", "END"]) + "\n")


class OstLddt(NamedTuple):
    """OpenStructure's lDDT: global score and ``{residue number: lDDT}``."""

    global_score: float
    per_residue: dict[int, float]


def run_ost_lddt(model: str | Path, reference: str | Path, ca_only: bool = False,
                 timeout: float = 300.0) -> OstLddt:
    """lDDT of ``model`` against ``reference`` (PDB files, chain A) by ``compare-structures``."""
    env = {**os.environ, "OST_ROOT": "/usr", "DNG_ROOT": "/usr", "OST_EXEC_DIR": "/usr/bin"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        command = ost_command() + ["-m", str(model), "-r", str(reference), "-c", "A:A", "-rna",
                                   "-l", "-spr", "-o", str(out)] + (["-ca"] if ca_only else [])
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"compare-structures failed on {model}: {done.stdout[-2000:]}")
        result = json.loads(out.read_text())["result"]
    chain = next(iter(next(iter(result.values())).values()))["lddt"]["single_chain_lddt"][0]
    if chain.get("status") != "SUCCESS":
        raise RuntimeError(f"compare-structures lDDT failed on {model}: {chain.get('error')}")
    per_residue = {int(r["residue_number"]): float(r["lddt"]) for r in chain["per_residue_scores"]}
    return OstLddt(float(chain["global_score"]), per_residue)


def run_tmscore(model: str | Path, reference: str | Path) -> dict[str, float]:
    """RMSD (Å), TM-score, GDT-TS, GDT-HA as printed by ``TMscore model reference``."""
    out = subprocess.run([tmscore_path(), str(model), str(reference)], capture_output=True,
                         text=True, check=True).stdout
    grab = {"rmsd": r"RMSD of  the common residues=\s*([\d.]+)", "tm": r"TM-score\s*=\s*([\d.]+)",
            "gdt_ts": r"GDT-TS-score=\s*([\d.]+)", "gdt_ha": r"GDT-HA-score=\s*([\d.]+)"}
    found = {key: re.search(pattern, out) for key, pattern in grab.items()}
    missing = [key for key, match in found.items() if match is None]
    if missing:
        raise RuntimeError(f"TMscore output on {model} lacks {missing}: {out[-1000:]}")
    return {key: float(match.group(1)) for key, match in found.items()}
