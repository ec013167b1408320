"""Locations and versions of the HH-suite executables used by the msa stages.

``cstranslate`` is not on PATH in the Debian ``hhsuite`` package (and its wrapper is
broken), so we call the SIMD build directly: ``cstranslate-avx2`` where the CPU has AVX2,
else ``cstranslate-plain``. ``$FOLDWORKS_HHSUITE_LIBEXEC`` and ``$FOLDWORKS_HHSUITE_DATA``
override the default directories for other installations.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

LIBEXEC_DIR = Path(os.environ.get("FOLDWORKS_HHSUITE_LIBEXEC", "/usr/libexec/hhsuite"))
DATA_DIR = Path(os.environ.get("FOLDWORKS_HHSUITE_DATA", "/usr/share/hhsuite/data"))
CS219_LIB = DATA_DIR / "cs219.lib"
CONTEXT_DATA_LIB = DATA_DIR / "context_data.lib"


class ToolError(RuntimeError):
    """An external tool is missing or failed; the message names the tool and the input."""


def cpu_has_avx2() -> bool:
    """True if ``/proc/cpuinfo`` lists the ``avx2`` flag (False where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return re.search(r"^flags\s*:.*\bavx2\b", text, flags=re.MULTILINE) is not None


def which(name: str) -> str:
    """Absolute path of an executable on PATH, or :class:`ToolError` naming it."""
    found = shutil.which(name)
    if found is None:
        package = "mmseqs2" if name == "mmseqs" else "hhsuite"
        raise ToolError(f"{name} not found on PATH (install it: apt-get install {package})")
    return found


@functools.lru_cache(maxsize=None)
def cstranslate() -> str:
    """Path of the ``cstranslate`` build matching this CPU (avx2, else plain)."""
    for variant in (("avx2", "plain") if cpu_has_avx2() else ("plain",)):
        candidate = LIBEXEC_DIR / f"cstranslate-{variant}"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("cstranslate")
    if found is None:
        raise ToolError(f"cstranslate not found in {LIBEXEC_DIR} nor on PATH")
    return found


def context_libraries() -> tuple[Path, Path]:
    """``(cs219.lib, context_data.lib)``; :class:`ToolError` if either is missing."""
    for path in (CS219_LIB, CONTEXT_DATA_LIB):
        if not path.is_file():
            raise ToolError(f"HH-suite context library {path} is missing")
    return CS219_LIB, CONTEXT_DATA_LIB


@functools.lru_cache(maxsize=None)
def tool_version(executable: str) -> str:
    """First ``N.N.N`` version string in a tool's usage text (``-h``, else no arguments)."""
    for args in (["-h"], []):
        try:
            proc = subprocess.run([executable, *args], capture_output=True, text=True,
                                  timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        match = re.search(r"\b(\d+\.\d+\.\d+)\b", proc.stdout + proc.stderr)
        if match:
            return match.group(1)
    return "unknown"


def run_tool(args: list[str], what: str, timeout_s: float | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (no shell); raise :class:`ToolError` naming ``what`` on failure or timeout.

    The error carries the exit status and the last lines of the tool's stderr/stdout.
    """
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s,
                              env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{what}: {Path(args[0]).name} timed out after {timeout_s} s") from exc
    except OSError as exc:
        raise ToolError(f"{what}: cannot run {args[0]}: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[-8:])
        raise ToolError(f"{what}: {Path(args[0]).name} exited with status {proc.returncode}:\n{tail}")
    return proc


@functools.lru_cache(maxsize=None)
def mmseqs_version() -> str:
    """``mmseqs version`` output (e.g. ``14-7e284+ds-1+b2``), or ``"unknown"``."""
    try:
        proc = subprocess.run([which("mmseqs"), "version"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired, ToolError):
        return "unknown"
    return proc.stdout.strip() or "unknown"
