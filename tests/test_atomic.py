"""SIGKILL during the write of ``msa`` and ``features`` outputs leaves no partial output, and the
rerun completes.

Real processes, real SIGKILL. To kill at the worst moment rather than at a random one, the
processes load a test-only ``sitecustomize`` (from a temp folder on ``PYTHONPATH``) that, when
``FOLDWORKS_TEST_PAUSE`` is set, stops inside ``os.fsync`` (temp file written, not yet synced)
or ``os.replace`` (synced, not yet renamed) for a path containing a given string, writes a
marker with its PID, and waits to be killed. Nothing else about the stages is changed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO_ROOT, require_tool
from foldworks.ids import sequence_hash
from foldworks.msa.a3m import validate_a3m
from foldworks.msa.fasta import read_fasta
from foldworks.parse import parse_entry, write_parsed

SITECUSTOMIZE = '''
import json, os, time
_cfg = os.environ.get("FOLDWORKS_TEST_PAUSE")
if _cfg:
    _cfg = json.loads(_cfg)
    _real = {"fsync": os.fsync, "replace": os.replace}

    def _path(name, args):
        if name == "replace":
            return os.fspath(args[1])
        try:
            return os.readlink(f"/proc/self/fd/{args[0]}")
        except OSError:
            return ""

    def _wrap(name):
        def wrapped(*args, **kwargs):
            path = _path(name, args)
            if name == _cfg["point"] and _cfg["match"] in path:
                marker = f"{_cfg['marker']}.{os.getpid()}"
                with open(marker + ".part", "w") as handle:
                    handle.write(json.dumps({"pid": os.getpid(), "path": path}))
                _real["replace"](marker + ".part", marker)
                time.sleep(3600)  # until the test kills us
            return _real[name](*args, **kwargs)
        return wrapped

    os.fsync = _wrap("fsync")
    os.replace = _wrap("replace")
'''

POINTS = ("fsync", "replace")


@pytest.fixture(scope="module")
def hook_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("pause_hook")
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return directory


def _env(hook_dir: Path, pause: dict | None) -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(hook_dir), str(REPO_ROOT / "src")])}
    env.pop("FOLDWORKS_TEST_PAUSE", None)
    if pause:
        env["FOLDWORKS_TEST_PAUSE"] = json.dumps(pause)
    return env


def _complete_markers(marker: Path) -> list[Path]:
    """The markers ``<marker>.<pid>`` paused processes have finished writing (not their ``.part`` temps)."""
    return sorted(p for p in marker.parent.glob(f"{marker.name}.[0-9]*") if p.name.rsplit(".", 1)[1].isdigit())


def _wait_for_markers(marker: Path, proc: subprocess.Popen, timeout: float = 300) -> list[dict]:
    """Markers written by paused processes (``{pid, path}``); fails if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _complete_markers(marker)
        if found:
            return [json.loads(p.read_text()) for p in found]
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"process ended (rc {proc.returncode}) before reaching the pause point:\n{err[-4000:]}")
        time.sleep(0.1)
    pytest.fail("no process reached the pause point in time")


def _kill_paused(cmd: list[str], hook_dir: Path, point: str, match: str, marker: Path) -> dict:
    """Start ``cmd`` with the pause hook, SIGKILL it at ``point``; return the marker."""
    proc = subprocess.Popen(cmd, env=_env(hook_dir, {"point": point, "match": match, "marker": str(marker)}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        paused = _wait_for_markers(marker, proc)
        assert paused[0]["pid"] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        return paused[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _assert_no_final_and_temps_hidden(out: Path, temp_path: str, pattern: str) -> None:
    """No final output; what SIGKILL left is the hidden temp, which the output glob does not match."""
    assert not out.exists()
    assert list(out.parent.glob(pattern)) == []
    leftovers = [p.name for p in out.parent.iterdir()]
    assert leftovers == [Path(temp_path).name], leftovers
    assert leftovers[0].startswith(f".{out.name}.") and leftovers[0].endswith(".tmp")


# ---------------------------------------------------------------- one stage process


@pytest.fixture(scope="module")
def features_inputs(pdb_mirror: Path, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("features_in")
    parsed = parse_entry(pdb_mirror / "1aki.cif.gz", "1aki")
    write_parsed(parsed, base / "1aki.npz", base / "1aki.json")
    sequence = parsed.chains[0]["sequence"]
    a3m = base / "query.a3m"
    a3m.write_text(f">{sequence_hash(sequence)}\n{sequence}\n")
    return {"parsed": base / "1aki.npz", "a3m": a3m}


def _features_cmd(inputs: dict[str, Path], out: Path) -> list[str]:
    return [sys.executable, "-m", "foldworks.features", "--parsed", str(inputs["parsed"]), "--chain", "A",
            "--a3m", str(inputs["a3m"]), "--target", "1aki_A", "--out", str(out),
            "--params", json.dumps({"max_msa_rows": 16, "seed": 0})]


@pytest.mark.parametrize("point", POINTS)
def test_features_killed_mid_write_leaves_no_output_and_rerun_completes(
        point: str, features_inputs, hook_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "features" / "1aki_A.npz"
    paused = _kill_paused(_features_cmd(features_inputs, out), hook_dir, point, f"{out.parent}/", tmp_path / "marker")
    _assert_no_final_and_temps_hidden(out, paused["path"] if point == "fsync" else _temp_of(paused, out), "*.npz")
    rerun = subprocess.run(_features_cmd(features_inputs, out), env=_env(hook_dir, None),
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    reference = tmp_path / "reference" / "1aki_A.npz"
    subprocess.run(_features_cmd(features_inputs, reference), env=_env(hook_dir, None), check=True,
                   capture_output=True, timeout=120)
    with np.load(out) as got, np.load(reference) as want:
        assert sorted(got.files) == sorted(want.files) and "aatype" in got.files
        for name in want.files:
            assert np.array_equal(got[name], want[name])


def _temp_of(paused: dict, out: Path) -> str:
    """The temp name of a process paused in ``os.replace`` (the marker holds the destination)."""
    assert paused["path"] == str(out)
    temps = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    assert len(temps) == 1
    return str(temps[0])


@pytest.fixture(scope="module")
def msa_db(seqdb_fasta: Path, tmp_path_factory) -> tuple[Path, Path]:
    """A small real HH-suite database (60 short seqdb records) and a one-record query of it."""
    require_tool("hhblits")
    base = tmp_path_factory.mktemp("msa_db")
    records = [(h, s) for h, s in read_fasta(seqdb_fasta) if 40 <= len(s) <= 90][:60]
    fasta = base / "db.fasta"
    fasta.write_text("".join(f">{h.split()[0][:20]}\n{s}\n" for h, s in records))
    prefix = base / "small"
    subprocess.run([sys.executable, "-m", "foldworks.msa.build_db", "--fasta", str(fasta), "--out-prefix", str(prefix),
                    "--threads", "1"], env=_env(base, None), check=True, capture_output=True, timeout=300)
    sequence = records[0][1]
    query = base / f"{sequence_hash(sequence)}.fasta"
    query.write_text(f">{sequence_hash(sequence)}\n{sequence}\n")
    return prefix, query


def _msa_cmd(prefix: Path, query: Path, out: Path) -> list[str]:
    """The msa stage's search of one query (its stable Python entry point; the CLI's database
    arguments belong to the msa rule and are exercised by the workflow test below)."""
    code = ("import sys; from foldworks.msa.search import run_hhblits; "
            "run_hhblits(sys.argv[1], sys.argv[2], sys.argv[3], 1, {'iterations': 1, 'timeout_s': 120})")
    return [sys.executable, "-c", code, str(query), str(prefix), str(out)]


@pytest.mark.parametrize("point", POINTS)
def test_msa_killed_mid_write_leaves_no_output_and_rerun_completes(point: str, msa_db, hook_dir: Path, tmp_path: Path) -> None:
    prefix, query = msa_db
    out = tmp_path / "msa" / "ab" / f"{query.stem}.a3m"
    paused = _kill_paused(_msa_cmd(prefix, query, out), hook_dir, point, f"{out.parent}/", tmp_path / "marker")
    _assert_no_final_and_temps_hidden(out, paused["path"] if point == "fsync" else _temp_of(paused, out), "*.a3m")
    rerun = subprocess.run(_msa_cmd(prefix, query, out), env=_env(hook_dir, None), capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    sequence = next(read_fasta(query))[1]
    validate_a3m(out.read_text(), sequence, name=query.stem)
    reference = tmp_path / "reference.a3m"
    subprocess.run(_msa_cmd(prefix, query, reference), env=_env(hook_dir, None), check=True, capture_output=True,
                   timeout=300)
    assert out.read_text() == reference.read_text()  # hhblits is deterministic: the rerun is the full result


# ---------------------------------------------------------------- the workflow


ENTRIES = ["1crn", "3u7t", "1ubq", "1aki", "4lzt", "2igd", "5pti", "1fki"]
# the features shards of 1crn and 1ubq (keys "cr", "ub"); their per-target files below
TARGETS = ["data/features/shards/cr.tsv", "data/features/shards/ub.tsv"]
TARGET_FILES = ["data/features/1crn_A.npz", "data/features/1ubq_A.npz"]


def _snakemake(workdir: Path, hook_dir: Path, pause: dict | None, *args: str) -> subprocess.Popen:
    cmd = [str(Path(sys.executable).parent / "snakemake"), "-s", str(REPO_ROOT / "Snakefile"), "--directory",
           str(workdir), "--configfile", str(workdir / "config.yaml"), "--cores", "2", *args]
    return subprocess.Popen(cmd, env=_env(hook_dir, pause), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _kill_if_alive(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow
def test_workflow_killed_during_msa_and_features_writes_then_rerun_completes(pdb_mirror, hook_dir, tmp_path) -> None:
    for tool in ("hhblits", "mmseqs"):
        require_tool(tool)
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = yaml.safe_load((REPO_ROOT / "tests" / "tiny_config.yaml").read_text())
    # the full-PDB shard keys (TARGETS: one features shard per divided-layout key); the demo's short keys
    # would put every entry into one shard
    config["pdb"] = {"entries": ENTRIES, "source": str(pdb_mirror), "shard_chars": 2}
    config["msa"]["shard_chars"] = 2
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))

    # 1. SIGKILL the whole Snakemake process group while an msa job is about to rename its a3m.
    proc = _snakemake(workdir, hook_dir, {"point": "replace", "match": "data/msa/", "marker": str(tmp_path / "m1")},
                      *TARGETS)
    try:
        paused = _wait_for_markers(tmp_path / "m1", proc, timeout=600)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    for marker in paused:
        _kill_if_alive(marker["pid"])  # a job outside Snakemake's process group would still be waiting
        final = workdir / marker["path"]
        assert final.suffix == ".a3m" and not final.exists()
        assert [p for p in final.parent.glob("*.a3m")] == []  # temps are hidden, never *.a3m
    # A killed Snakemake leaves its lock: the documented recovery is `snakemake --unlock`.
    unlock = _snakemake(workdir, hook_dir, None, "--unlock")
    assert unlock.wait(timeout=120) == 0

    # 2. SIGKILL only the features job(s) (Snakemake lives on, --keep-going): the run fails cleanly
    #    and the failures report names the killed job.
    proc = _snakemake(workdir, hook_dir, {"point": "fsync", "match": "data/features/", "marker": str(tmp_path / "m2")},
                      "--keep-going", *TARGETS)
    killed: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            for marker in _complete_markers(tmp_path / "m2"):
                pid = int(marker.name.rsplit(".", 1)[1])
                if pid not in killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=60)
    assert killed and proc.returncode != 0, err[-3000:]
    assert not any((workdir / t).exists() for t in TARGETS + TARGET_FILES)
    report = pd.read_csv(workdir / "results/failures.tsv", sep="\t", dtype=str, keep_default_na=False)
    failed = report[report["stage"] == "features"]
    assert len(failed) == len(killed) and set(failed["key"]) <= {"cr", "ub"}, report.to_string()  # shard keys
    assert failed["reason"].str.startswith("job failed: ").all()

    # 3. The plain rerun (no --rerun-incomplete) completes and the report forgets the failures.
    proc = _snakemake(workdir, hook_dir, None, *TARGETS)
    _out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-4000:]
    for target in TARGET_FILES:
        with np.load(workdir / target) as data:
            assert data["aatype"].shape[0] > 20
    report = pd.read_csv(workdir / "results/failures.tsv", sep="\t", dtype=str, keep_default_na=False)
    assert "features" not in set(report["stage"])
    for a3m in (workdir / "data/msa").rglob("*.a3m"):  # every alignment complete: query row present
        assert f"\n>{a3m.stem}\n" in "\n" + a3m.read_text()
