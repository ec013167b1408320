"""Set-up scripts and the Makefile: `make demo` needs only the workflow's tools, a user without root
is told exactly what to install, and `make help` lists every target."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO_ROOT

SCRIPTS = REPO_ROOT / "workflow" / "scripts"
#: Commands ensure_tools.sh checks (cstranslate: on PATH, or Debian's CPU-specific builds).
WORKFLOW_TOOLS = ("hhblits", "hhfilter", "ffindex_from_fasta", "ffindex_build", "mmseqs")
#: What the scripts themselves call.
SHELL_UTILS = ("id", "sort", "tr", "ls", "dirname", "cat")


def as_non_root(tools: tuple[str, ...]):
    """A runner of ``bash <script>`` as a non-root user on a PATH holding only ``tools`` (and the
    shell utilities), or skip: root runs it as ``nobody`` (runuser), anyone else as themselves."""
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser: no non-root user to run the set-up scripts as")
        prefix = [runuser, "-u", "nobody", "--"]
    else:
        prefix = []
    bin_dir = Path(tempfile.mkdtemp(prefix="foldworks-path-"))
    bin_dir.chmod(0o755)
    for name in tools + SHELL_UTILS:
        found = shutil.which(name)
        if found is None:
            shutil.rmtree(bin_dir)
            pytest.skip(f"{name} is not installed here")
        (bin_dir / name).symlink_to(found)

    def run(script: str) -> subprocess.CompletedProcess:
        env = {"PATH": str(bin_dir), "HOME": "/nonexistent", "LANG": "C"}
        return subprocess.run([*prefix, shutil.which("bash") or "/bin/bash", str(SCRIPTS / script)],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)

    return run, bin_dir


@pytest.fixture()
def workflow_tools_only():
    run, bin_dir = as_non_root(WORKFLOW_TOOLS)
    yield run
    shutil.rmtree(bin_dir)


@pytest.fixture()
def no_mmseqs():
    run, bin_dir = as_non_root(tuple(t for t in WORKFLOW_TOOLS if t != "mmseqs"))
    yield run
    shutil.rmtree(bin_dir)


def test_demo_tool_check_passes_as_non_root_without_the_test_tools(workflow_tools_only):
    """HH-suite and MMseqs2 present, TMscore and OpenStructure absent from PATH: the demo's check passes."""
    done = workflow_tools_only("ensure_tools.sh")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_missing_workflow_tool_names_it_and_the_non_root_install(no_mmseqs):
    done = no_mmseqs("ensure_tools.sh")
    assert done.returncode == 1
    assert "missing: mmseqs2" in done.stderr
    assert "conda env create -f envs/hhsuite.yaml" in done.stderr
    assert "apt-get install hhsuite mmseqs2" in done.stderr
    assert "installing" not in done.stdout  # no attempt to install without root


def test_test_tool_check_as_non_root_says_what_to_install(workflow_tools_only):
    """TMscore is not on that PATH: the test-only check fails and names both ways to install it."""
    done = workflow_tools_only("ensure_testtools.sh")
    assert done.returncode == 1
    assert "tm-align" in done.stderr and "-c bioconda tmalign" in done.stderr
    assert "apt-get install tm-align openstructure python3-ost" in done.stderr


def test_conda_env_named_by_the_message_holds_the_workflow_tools():
    import yaml

    env = yaml.safe_load((REPO_ROOT / "envs" / "hhsuite.yaml").read_text())
    packages = {re.split(r"[=<> ]", dep)[0] for dep in env["dependencies"] if isinstance(dep, str)}
    assert {"hhsuite", "mmseqs2"} <= packages
    assert "bioconda" in env["channels"]


def makefile_targets(text: str) -> dict[str, str]:
    """Target name -> its `## ` help text ('' when none), for every explicit rule of the Makefile."""
    targets = {}
    for match in re.finditer(r"^([A-Za-z][\w-]*):(?!=)([^\n]*)$", text, re.MULTILINE):
        targets[match.group(1)] = match.group(2).partition("## ")[2].strip()
    return targets


def test_make_help_lists_every_target():
    text = (REPO_ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, re.MULTILINE).group(1).split()
    targets = makefile_targets(text)
    assert set(phony) <= set(targets), f".PHONY names targets without a rule: {set(phony) - set(targets)}"
    undocumented = sorted(name for name, help_text in targets.items() if name != "FORCE" and not help_text)
    assert not undocumented, f"Makefile targets without a `## ` help text: {undocumented}"
    shown = subprocess.run(["make", "-s", "help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for name in targets:
        if name != "FORCE":
            assert re.search(rf"^\s+make {re.escape(name)}\s+- ", shown.stdout, re.MULTILINE), name


def test_demo_sets_up_only_the_workflow_tools_and_test_sets_up_both():
    text = (REPO_ROOT / "Makefile").read_text()
    recipe = {name: body for name, body in re.findall(r"^([\w-]+):[^\n]*\n((?:\t[^\n]*\n)*)", text, re.MULTILINE)}
    assert "ensure_tools.sh" in recipe["sysdeps"] and "ensure_testtools" not in recipe["sysdeps"]
    assert "ensure_testtools.sh" in recipe["testdeps"]
    dry = subprocess.run(["make", "-n", "demo"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert "ensure_tools.sh" in dry.stdout and "ensure_testtools" not in dry.stdout
    dry = subprocess.run(["make", "-n", "test"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert "ensure_tools.sh" in dry.stdout and "ensure_testtools.sh" in dry.stdout


def test_citation_file_matches_the_package():
    import tomllib

    import yaml

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    cff = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["message"] and cff["title"] == project["name"]
    assert str(cff["version"]) == project["version"]
    assert cff["license"] == project["license"]["text"]
    assert cff["authors"] == [{"name": "foldworks maintainers"}]
    for ref in cff["references"]:
        assert ref["type"] == "article" and ref["title"] and ref["authors"], ref
        assert re.fullmatch(r"10\.\d{4,9}/\S+", ref["doi"]), ref["doi"]
        assert isinstance(ref["year"], int) and all(isinstance(ref[k], int) for k in ("start", "end") if k in ref)
    cited = {(ref["authors"][0]["family-names"], ref["year"]) for ref in cff["references"]}
    assert cited == {("Jumper", 2021), ("Ahdritz", 2024), ("Dauparas", 2022), ("Steinegger", 2019),
                     ("Steinegger", 2017), ("Mölder", 2021)}


def test_license_is_the_apache_2_text():
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
