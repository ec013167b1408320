"""Shared fixtures: locate the offline PDB mirror and sequence set (never copied into the repo)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def schema_default(*keys: str):
    """The default of the config key ``keys`` in workflow/schemas/config.schema.yaml (what a test
    config that does not set the key gets: the Snakefile fills it in from the schema)."""
    import yaml

    node = yaml.safe_load((REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    for key in keys:
        node = node["properties"][key]
    return node["default"]


def demo_entry_key(entry: str) -> str:
    """The entry shard key of ``entry`` under the default ``pdb.shard_chars`` (a test config's, unless set)."""
    from foldworks.shards import entry_shard

    return entry_shard(entry, int(schema_default("pdb", "shard_chars")))


def demo_msa_chars() -> int:
    """The default ``msa.shard_chars`` (hhblits msa shard key length of a test config that does not set it)."""
    return int(schema_default("msa", "shard_chars"))


def _shared_path(env_var: str, relative: str) -> Path | None:
    candidates = [os.environ.get(env_var), str(REPO_ROOT.parent / "shared" / relative)]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return Path(candidate).resolve()
    return None


@pytest.fixture(scope="session")
def pdb_mirror() -> Path:
    """The offline mirror of 71 wwPDB entries (``$FOLDWORKS_PDB_MIRROR`` or ``../shared/pdb_mirror``)."""
    path = _shared_path("FOLDWORKS_PDB_MIRROR", "pdb_mirror")
    if path is None:
        pytest.skip("offline PDB mirror not found: set FOLDWORKS_PDB_MIRROR or provide ../shared/pdb_mirror")
    return path


@pytest.fixture(scope="session")
def seqdb_fasta() -> Path:
    """The real-protein FASTA for toy MSA databases (``$FOLDWORKS_SEQDB`` or ``../shared/seqdb/seqdb.fasta``)."""
    path = _shared_path("FOLDWORKS_SEQDB", "seqdb/seqdb.fasta")
    if path is None:
        pytest.skip("sequence set not found: set FOLDWORKS_SEQDB or provide ../shared/seqdb/seqdb.fasta")
    return path


def require_tool(name: str) -> str:
    """Return the path of an external tool; fail (not skip) if `make test` set-up did not install it."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; `make test` installs it (workflow/scripts/ensure_tools.sh, ensure_testtools.sh)")
    return found


def run_snakemake(workdir: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile in ``workdir`` on ``workdir/config.yaml`` with 2 cores.

    Uses the snakemake of the running interpreter's environment (the project's .venv); output is
    captured as text. ``timeout`` in seconds.
    """
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    cmd = [str(bin_dir / "snakemake"), "-s", str(REPO_ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def one_torch_thread():
    """One intra-op torch thread for the test: small tensors gain nothing from more, and
    oversubscribed cores stall (torch imported here, so torch-free test modules stay torch-free)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
