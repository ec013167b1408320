"""The conda environments in envs/ agree with requirements.txt, and every rule whose stage runs
HH-suite or MMseqs2 names envs/hhsuite.yaml (so `--software-deployment-method conda` gives it
the binaries). Static checks: fast, no tools needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT

ENVS = sorted((REPO_ROOT / "envs").glob("*.yaml"))
RULE_FILES = sorted((REPO_ROOT / "workflow" / "rules").glob("*.smk"))
TOOLS = ("hhblits", "hhfilter", "ffindex_", "cstranslate", "mmseqs")
HHSUITE_ENV = "envs/hhsuite.yaml"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: {line!r} is not pinned with =="
            pins[_norm(name)] = version.strip()
    return pins


def env_pip_pins(env_file: Path) -> dict[str, str]:
    env = yaml.safe_load(env_file.read_text())
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for line in dep.get("pip", []):
                name, _, version = line.partition("==")
                assert version, f"{env_file.name}: pip dependency {line!r} is not pinned with =="
                pins[_norm(name)] = version.strip()
    return pins


def parse_rules(text: str) -> dict[str, str]:
    """Rule/checkpoint name -> its body text, from one .smk file."""
    heads = list(re.finditer(r"^(?:rule|checkpoint)\s+(\w+)\s*:", text, flags=re.M))
    ends = [m.start() for m in heads[1:]] + [len(text)]
    return {m.group(1): text[m.end():end] for m, end in zip(heads, ends)}


def all_rules() -> dict[str, str]:
    rules = {}
    for path in RULE_FILES:
        rules.update(parse_rules(path.read_text()))
    return rules


def conda_env_of(body: str) -> str | None:
    match = re.search(r"^\s+conda:\s*\n\s+[\"']([^\"']+)[\"']", body, flags=re.M)
    return None if match is None else match.group(1)


def stage_package(body: str) -> str | None:
    match = re.search(r"python -m foldworks\.(\w+)", body)
    return None if match is None else match.group(1)


def package_runs_tools(package: str) -> bool:
    """True if a module of src/foldworks/<package> launches a subprocess naming an HH-suite/MMseqs2 tool."""
    for module in (REPO_ROOT / "src" / "foldworks" / package).rglob("*.py"):
        code = module.read_text()
        if "subprocess" in code and any(tool in code for tool in TOOLS):
            return True
    return False


@pytest.mark.parametrize("env_file", ENVS, ids=[p.name for p in ENVS])
def test_env_pip_pins_match_requirements(env_file):
    pins = requirement_pins()
    env_pins = env_pip_pins(env_file)
    assert env_pins, f"{env_file.name} pins no pip packages"
    for name, version in env_pins.items():
        assert name in pins, f"{env_file.name} pins {name} which requirements.txt lacks"
        assert pins[name] == version, f"{env_file.name}: {name}=={version}, requirements.txt: {pins[name]}"


@pytest.mark.parametrize("env_file", ENVS, ids=[p.name for p in ENVS])
def test_env_python_matches_venv_minor(env_file):
    env = yaml.safe_load(env_file.read_text())
    pythons = [d for d in env["dependencies"] if isinstance(d, str) and re.match(r"python[=<> ]", d)]
    assert pythons, f"{env_file.name} does not pin python"
    assert re.fullmatch(r"python=3\.\d+", pythons[0]), pythons


def test_the_parser_finds_every_rule():
    rules = all_rules()
    assert {"fetch", "parse", "chains", "msa_db", "msa", "features", "train", "predict"} <= set(rules)
    for name, body in rules.items():
        assert conda_env_of(body), f"rule {name} names no conda env"


def test_rules_running_external_tools_use_the_hhsuite_env():
    rules = all_rules()
    needs_tools = {name for name, body in rules.items()
                   if (pkg := stage_package(body)) and package_runs_tools(pkg)}
    assert {"msa_db", "msa", "chains"} <= needs_tools
    for name in needs_tools:
        env = conda_env_of(rules[name])
        assert env and env.endswith(HHSUITE_ENV), f"rule {name} runs HH-suite/MMseqs2 but uses {env}"
    for name in set(rules) - needs_tools:
        env = conda_env_of(rules[name])
        assert env is None or not env.endswith(HHSUITE_ENV), f"rule {name} uses the hhsuite env needlessly"


def test_every_named_env_exists():
    for name, body in all_rules().items():
        env = conda_env_of(body)
        if env:
            path = (REPO_ROOT / "workflow" / "rules" / env).resolve()
            assert path.is_file(), f"rule {name}: {env} does not exist"


def test_hhsuite_env_matches_the_ci_tools():
    """envs/hhsuite.yaml pins the same HH-suite/MMseqs2 versions as the Debian packages CI runs."""
    if shutil.which("dpkg-query") is None:
        pytest.skip("not a Debian system: no packaged tool versions to compare")
    env = yaml.safe_load((REPO_ROOT / HHSUITE_ENV).read_text())
    conda = dict(d.split("=", 1) for d in env["dependencies"] if isinstance(d, str) and "=" in d)
    for package, conda_name in (("hhsuite", "hhsuite"), ("mmseqs2", "mmseqs2")):
        shown = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
        if shown.returncode != 0:
            pytest.fail(f"{package} is not installed; `make test` installs it (workflow/scripts/ensure_tools.sh)")
        upstream = re.split(r"[+~]", shown.stdout.split(":")[-1])[0]  # 3.3.0+ds-7 -> 3.3.0
        assert _norm(conda[conda_name].replace("-", ".")) == _norm(upstream.replace("-", ".")), (package, upstream)
