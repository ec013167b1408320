"""The conda environments in envs/ agree with requirements.txt, and every rule whose stage runs
HH-suite or MMseqs2 names envs/hhsuite.yaml (so `--software-deployment-method conda` gives it
the binaries). The profiles: default is executor-agnostic, slurm picks partitions from the site
variables, and `snakemake --profile slurm -n` plans one job per shard (no groups).
Static checks plus two small dry runs (seconds each); no tools or cluster needed."""

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
TOOLS = ("hhblits", "hhsearch", "hhfilter", "ffindex_", "cstranslate", "mmseqs")
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
    """Rule/checkpoint name -> its body text, from one .smk file. A rule defined in several
    branches (`if ...: rule x` / `else: rule x`, possibly indented) gets its bodies joined."""
    heads = list(re.finditer(r"^[ \t]*(?:rule|checkpoint)\s+(\w+)\s*:", text, flags=re.M))
    ends = [m.start() for m in heads[1:]] + [len(text)]
    rules: dict[str, str] = {}
    for match, end in zip(heads, ends):
        rules[match.group(1)] = rules.get(match.group(1), "") + text[match.end():end]
    return rules


def all_rules() -> dict[str, str]:
    rules = {}
    for path in RULE_FILES:
        rules.update(parse_rules(path.read_text()))
    return rules


def conda_env_of(body: str) -> str | None:
    match = re.search(r"^\s+conda:\s*\n\s+[\"']([^\"']+)[\"']", body, flags=re.M)
    return None if match is None else match.group(1)


def stage_package(body: str) -> str | None:
    """The package a rule's command runs; a shard job (`python -m foldworks.shards <stage>`)
    runs its stage's package (foldworks.shards.stages calls the stage's per-item CLI)."""
    match = re.search(r"python -m foldworks\.(\w+)(?: (\w+))?", body)
    if match is None:
        return None
    return match.group(2) if match.group(1) == "shards" else match.group(1)


def package_runs_tools(package: str) -> bool:
    """True if a module of src/foldworks/<package> launches a subprocess naming an HH-suite/MMseqs2 tool
    (directly or through foldworks.msa.tools.run_tool)."""
    for module in (REPO_ROOT / "src" / "foldworks" / package).rglob("*.py"):
        code = module.read_text()
        if ("subprocess" in code or "run_tool(" in code) and any(tool in code for tool in TOOLS):
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
    assert {"ingest", "chains", "msa_db", "msa", "features", "train", "predict"} <= set(rules)
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


# --- Profiles (profiles/default, profiles/local, profiles/slurm) -------------------------------

PROFILES = REPO_ROOT / "profiles"
GPU_RULES = ("train", "predict")


def load_profile(name: str, env: dict[str, str], monkeypatch) -> dict:
    """A profile as Snakemake reads it (YTE evaluated with ``env``): key -> value or list."""
    from snakemake.profiles import ProfileConfigFileParser

    for key in ("FOLDWORKS_SLURM_CPU_PARTITION", "FOLDWORKS_SLURM_GPU_PARTITION", "FOLDWORKS_SLURM_ACCOUNT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with open(PROFILES / name / "config.yaml") as stream:
        return dict(ProfileConfigFileParser().parse(stream))


def per_rule(items: list[str]) -> dict[tuple[str, str], str]:
    """``["rule:name=expr", ...]`` -> {(rule, name): expr}."""
    pairs = {}
    for item in items:
        target, _, expr = item.partition("=")
        rule, _, name = target.partition(":")
        pairs[(rule, name)] = expr
    return pairs


def test_default_profile_is_executor_agnostic(monkeypatch):
    text = (PROFILES / "default" / "config.yaml").read_text()
    assert "slurm" not in text.replace("profiles/slurm", "") and "__import__" not in text and "environ" not in text
    profile = load_profile("default", {}, monkeypatch)
    assert "executor" not in profile and "default-resources" not in profile
    resources = per_rule(profile["set-resources"])
    assert {name for _, name in resources} <= {"mem_mb", "runtime"}
    # every per-entry and GPU stage has a wall-clock limit; msa escalates memory and time per attempt
    for rule in ("ingest", "msa", "features", *GPU_RULES):
        assert (rule, "runtime") in resources, rule
    for name in ("mem_mb", "runtime"):
        values = [eval(resources[("msa", name)], {"attempt": attempt}) for attempt in (1, 2, 3)]
        assert values[0] < values[1] < values[2], (name, values)


def test_slurm_profile_cpu_partition_and_account(monkeypatch, tmp_path):
    profile = load_profile("slurm", {"FOLDWORKS_SLURM_CPU_PARTITION": "short", "FOLDWORKS_SLURM_ACCOUNT": "lab7",
                                     "XDG_CACHE_HOME": str(tmp_path)}, monkeypatch)
    assert profile["executor"] == "slurm"
    assert int(profile["retries"]) >= 2
    assert profile["slurm-status-command"] in {"squeue", "sacct"}
    defaults = dict(item.split("=", 1) for item in profile["default-resources"])
    assert defaults["slurm_partition"] == "'short'" and defaults["slurm_account"] == "'lab7'"
    assert "slurm-partition-config" not in profile


def test_slurm_profile_sends_gpu_jobs_to_the_gpu_partition(monkeypatch, tmp_path):
    """With a GPU partition set, the plugin's own partition selection (2.8.0) reads the file the
    profile wrote: a job requesting a GPU can only go to the GPU partition, others go to the CPU one."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file

    profile = load_profile("slurm", {"FOLDWORKS_SLURM_CPU_PARTITION": "short", "FOLDWORKS_SLURM_GPU_PARTITION": "a100",
                                     "XDG_CACHE_HOME": str(tmp_path)}, monkeypatch)
    path = Path(profile["slurm-partition-config"])
    assert path.is_relative_to(tmp_path)
    defaults = dict(item.split("=", 1) for item in profile["default-resources"])
    assert "slurm_partition" not in defaults  # a fixed partition would override the selection
    partitions = read_partition_file(path)
    logger = SimpleNamespace(info=print, warning=print, debug=lambda *_: None)

    def pick(**resources):
        return get_best_partition(partitions, SimpleNamespace(resources=resources, threads=2, name="job"), logger)

    assert pick(gpu=1, mem_mb=8000, runtime=1440) == "a100"
    assert pick(mem_mb=2000, runtime=2) == "short"
    assert pick(mem_mb=4000, runtime=720, _cores=2) == "short"


def test_profile_entry_points():
    assert (REPO_ROOT / "slurm").resolve() == (PROFILES / "slurm").resolve()
    assert requirement_pins()["snakemake-executor-plugin-slurm"] == "2.8.0"
    local = yaml.safe_load((PROFILES / "local" / "config.yaml").read_text())
    assert local["executor"] == "local"


def dry_run(tmp_path: Path, n: int, scenario: str, make_ids=None, entry_chars: int = 2, msa_chars: int = 2) -> str:
    """`snakemake --profile slurm -n` (as typed in the repo root) at ``n`` synthetic entries
    (bench/bench_shards.py: IDs spread over the divided-layout keys, 3 chains per entry), with
    the full-PDB shard keys by default (``pdb.shard_chars``, ``msa.shard_chars``: 2; the demo
    config uses 1)."""
    import os
    import sys
    import time

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from bench_shards import SITE_ENV, fake_upstream, synthetic_ids

    ids = (make_ids or synthetic_ids)(n)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "entries.txt").write_text("\n".join(ids) + "\n")
    config = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    config["pdb"].update(entries=str(tmp_path / "entries.txt"), shard_chars=entry_chars)
    config["msa"]["shard_chars"] = msa_chars
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    if scenario == "after-chains":
        fake_upstream(tmp_path, ids, time.time() - 3600, entry_chars)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, **SITE_ENV, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([str(bin_dir / "snakemake"), "--profile", "slurm", "-n", "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "config.yaml")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def outputs_of(log: str, rule: str) -> list[str]:
    """First output of every job of ``rule`` in a dry-run log."""
    blocks = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)+)", log, re.MULTILINE)
    return [re.search(r"^    output: ([^,\s]+)", body, re.MULTILINE).group(1) for name, body in blocks if name == rule]


def all_outputs_of(log: str, rule: str) -> list[str]:
    """Every output of every job of ``rule`` in a dry-run log."""
    blocks = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)+)", log, re.MULTILINE)
    return [path for name, body in blocks if name == rule
            for path in re.search(r"^    output: (.+)$", body, re.MULTILINE).group(1).split(", ")]


def test_dry_run_has_one_job_per_entry_shard_and_no_groups(tmp_path):
    """250 consecutive IDs (9a00 ...): one ingest (fetch + parse) job per divided-layout key (the
    middle two characters), each running exactly that key's entries; no group jobs."""
    import sys

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from bench_dryrun import synthetic_ids

    log = dry_run(tmp_path, 250, "fresh", synthetic_ids)
    shards: dict[str, list[str]] = {}
    for entry in synthetic_ids(250):
        shards.setdefault(entry[1:3], []).append(entry)
    assert len(shards) == 7
    assert sorted(all_outputs_of(log, "ingest")) == sorted(
        [f"data/raw/shards/{k}.tsv" for k in shards] + [f"data/parsed/shards/{k}.tsv" for k in shards])
    assert "rule fetch:" not in log and "rule parse:" not in log
    for key, entries in shards.items():
        assert f"fetch --key {key} --items {','.join(sorted(entries))} " in log
        assert f"parse --key {key} --items {','.join(sorted(entries))} " in log
    assert "Group job" not in log


@pytest.mark.parametrize("entry_chars", [1, 0])
def test_short_entry_keys_shard_by_the_first_of_the_middle_two_or_not_at_all(tmp_path, entry_chars):
    """`pdb.shard_chars: 1` (1abc -> a) or 0 (one shard `all`, the demo's) with `msa.shard_chars: 1`:
    one ingest job per key running exactly its entries and, after the checkpoint, one msa job per
    first hex character and one features job per entry key."""
    import pandas as pd

    from foldworks.shards import entry_shard, group_entries

    log = dry_run(tmp_path / "fresh", 300, "fresh", entry_chars=entry_chars, msa_chars=1)
    from bench_shards import synthetic_ids  # bench/ is on the path now (dry_run)

    shards = group_entries(synthetic_ids(300), entry_chars)
    assert (len(shards) == 1) == (entry_chars == 0) and len(shards) <= 36
    assert sorted(all_outputs_of(log, "ingest")) == sorted(
        [f"data/raw/shards/{k}.tsv" for k in shards] + [f"data/parsed/shards/{k}.tsv" for k in shards])
    for key, entries in shards.items():
        assert f"fetch --key {key} --items {','.join(entries)} " in log
    log = dry_run(tmp_path / "after", 300, "after-chains", entry_chars=entry_chars, msa_chars=1)
    table = pd.read_parquet(tmp_path / "after/data/chains.parquet")
    assert sorted(outputs_of(log, "msa")) == [f"data/msa/shards/{p}.tsv" for p in sorted({h[0] for h in table["sequence_hash"]})]
    keys = sorted({entry_shard(e, entry_chars) for e in table["entry"]})
    assert sorted(outputs_of(log, "features")) == [f"data/features/shards/{k}.tsv" for k in keys]


def test_dry_run_after_chains_has_one_job_per_msa_and_features_shard(tmp_path):
    """After the checkpoint: one msa job per hash prefix (msa.shard_chars hex characters) of the
    unique sequences, one features job per entry shard."""
    import pandas as pd

    from foldworks.shards import SEQ_SHARD_CHARS

    log = dry_run(tmp_path, 400, "after-chains")
    table = pd.read_parquet(tmp_path / "data/chains.parquet")
    prefixes = sorted({h[:SEQ_SHARD_CHARS] for h in table["sequence_hash"]})
    assert sorted(outputs_of(log, "msa")) == [f"data/msa/shards/{p}.tsv" for p in prefixes]
    assert sorted(outputs_of(log, "features")) == [f"data/features/shards/{k}.tsv" for k in sorted(set(table["entry"].str[1:3]))]
    assert "Group job" not in log


def test_workflow_patches_no_snakemake_internals():
    """The issue's check: no assignment to Snakemake classes or private functions in workflow/."""
    done = subprocess.run(["grep", "-rnE", r"DAG\.|snakemake\.dag|_update_group|_check_groups|validate_group",
                           str(REPO_ROOT / "workflow")], capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    profile = yaml.safe_load((PROFILES / "slurm" / "config.yaml").read_text())
    assert "groups" not in profile and "group-components" not in profile
