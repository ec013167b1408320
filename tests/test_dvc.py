"""DVC versioning and exact incremental reruns, with real git, DVC (local-directory remote) and Snakemake.

Unit tests of ``foldworks.repro`` first; then one tiny workflow run shared by the slow tests:
the project's tracked and new files are copied into a temp git repository, the tiny config runs
there (``tests/tiny_config.yaml`` with ``pdb.source`` = a private copy of its mirror entries, so
one entry can be changed at the source, and the MSA database built from a fixed FASTA of the
entries' own sequences, so that it does not depend on the chain table, as with the demo's seqdb), ``make push`` records and pushes it, the listed files are committed, the repository is
``git clone``d and ``make pull`` restores the clone.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT, demo_entry_key, demo_msa_chars, require_tool
from foldworks.provenance import (_file_code_digest, code_digest_cache_dir, code_hash, code_text, config_hash,
                                  provenance_record, sidecar_path, write_sidecars)
from foldworks.repro import artifacts, check, snake
from foldworks.repro.config import load_workflow_config
from foldworks.shards import Row, group_entries, key_chars, read_manifest, write_manifest

VENV = Path(sys.prefix)
ENV = {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}",
       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
CONFIG_ARGS = ["--configfile", "tiny.yaml"]
MUTATED_ENTRY = "1crn"  # crambin, one chain: Gly20 -> Ala changes its sequence


# ---------------------------------------------------------------- unit tests (seconds) ----------

def test_parse_job_stats_reads_the_table_and_stops_at_total():
    output = ("Building DAG of jobs...\nJob stats:\njob          count\n---------  -------\n"
              "parse              1\nchains             1\nall                1\ntotal              3\n\n"
              "rule parse:\n    jobid: 3\n")
    assert snake.parse_job_stats(output) == {"parse": 1, "chains": 1, "all": 1}
    assert snake.parse_job_stats("Nothing to be done (all requested files are present and up to date).") == {}


CODE = '''"""Module docstring."""
import math  # why


class Box:
    """A box."""

    size = "not a docstring"

    def area(self) -> float:
        """Square Å.

        Spans lines.
        """
        total = 0
        for _ in range(2):
            label = "# not a comment"
            total += 1
        return self.size ** 2  # trailing comment
'''


@pytest.mark.parametrize("edited", [
    CODE.replace("# why", "# because"),  # a comment
    CODE.replace("Square Å.", "Square Å (angstrom squared)."),  # a multi-line docstring
    CODE.replace('"""A box."""', '"""A box, edited."""'),  # a class docstring
    CODE.replace("\n\n\nclass", "\n\n\n\n\nclass").replace("math  # why", "math   "),  # blank lines, spaces
    CODE.replace('"""Module docstring."""\n', ""),  # the module docstring removed
])
def test_code_text_ignores_comments_docstrings_and_blank_lines(edited):
    assert code_text(edited.encode()) == code_text(CODE.encode())


@pytest.mark.parametrize("edited", [
    CODE.replace("** 2", "** 3"),
    CODE.replace('"not a docstring"', '"other"'),  # a string that is not a docstring is data
    CODE.replace('"# not a comment"', '"# other"'),  # a # inside a string is not a comment
    CODE.replace("            total +=", "        total +="),  # indentation (out of the loop)
])
def test_code_text_sees_code_edits(edited):
    assert code_text(edited.encode()) != code_text(CODE.encode())


def test_code_hash_of_a_stage_ignores_its_docstrings(tmp_path):
    package = tmp_path / "foldworks"
    shutil.copytree(REPO_ROOT / "src" / "foldworks", package, ignore=shutil.ignore_patterns("__pycache__"))
    scoring = package / "evaluate" / "scoring.py"
    before = code_hash("evaluate", root=package)
    text = scoring.read_text(encoding="utf-8")
    first_doc = text.index('"""') + 3
    scoring.write_text(text[:first_doc] + "Edited. " + text[first_doc:] + "\n# trailing note\n", encoding="utf-8")
    code_hash.cache_clear()
    assert code_hash("evaluate", root=package) == before
    scoring.write_text(text.replace("def ", "def _renamed_", 1), encoding="utf-8")
    code_hash.cache_clear()
    assert code_hash("evaluate", root=package) != before


def _rule_code_parts() -> dict[str, tuple[str, ...]]:
    """Every ``code_hash(...)`` call of workflow/rules/*.smk: ``"<file>:<n>"`` -> its parts."""
    calls = {}
    for smk in sorted((REPO_ROOT / "workflow" / "rules").glob("*.smk")):
        for n, match in enumerate(re.finditer(r"code_hash\(([^)]*)\)", smk.read_text(encoding="utf-8"))):
            calls[f"{smk.stem}:{n}"] = tuple(ast.literal_eval(f"({match.group(1)},)"))
    return calls


@pytest.mark.parametrize("planner", ["fetch", "parse", "msa", "features", "common"])
def test_a_code_edit_in_one_stage_planner_restamps_only_that_stage(tmp_path, planner):
    package = tmp_path / "foldworks"
    shutil.copytree(REPO_ROOT / "src" / "foldworks", package, ignore=shutil.ignore_patterns("__pycache__"))
    calls = _rule_code_parts()
    users = {name for name, parts in calls.items() if f"shards/stages/{planner}" in parts}
    assert users, f"no rule hashes shards/stages/{planner}"
    before = {name: code_hash(*parts, root=package) for name, parts in calls.items()}
    with (package / "shards" / "stages" / f"{planner}.py").open("a", encoding="utf-8") as handle:
        handle.write("\n_EDITED = True\n")
    code_hash.cache_clear()
    after = {name: code_hash(*parts, root=package) for name, parts in calls.items()}
    assert {name for name in calls if after[name] != before[name]} == users


def test_code_text_of_source_that_does_not_parse_is_the_source():
    assert code_text(b"def broken(:\n") == b"def broken(:\n"


def _digest_uncached(path: Path) -> bytes:
    return hashlib.sha256(code_text(path.read_bytes())).digest()


def test_code_digest_cache_is_keyed_by_content_and_recomputes_bad_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("FOLDWORKS_CACHE_DIR", str(tmp_path / "cache"))
    module = tmp_path / "module.py"
    module.write_text(CODE, encoding="utf-8")
    _file_code_digest.cache_clear()
    digest = _file_code_digest(str(module), 1, 1)
    assert digest == _digest_uncached(module)
    entry = code_digest_cache_dir() / hashlib.sha256(module.read_bytes()).hexdigest()
    assert entry.read_text() == digest.hex()
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no temp file left behind
    for bad in ("", "zz" * 32, digest.hex()[:40]):  # empty, not hex, truncated
        entry.write_text(bad)
        _file_code_digest.cache_clear()
        assert _file_code_digest(str(module), 1, 1) == digest
    module.write_text(CODE.replace("** 2", "** 3"), encoding="utf-8")  # new bytes, new entry
    _file_code_digest.cache_clear()
    assert _file_code_digest(str(module), 2, 1) == _digest_uncached(module) != digest


def test_code_digest_without_a_writable_cache_is_still_computed(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FOLDWORKS_CACHE_DIR", str(blocker / "cache"))  # mkdir under a file fails, even as root
    module = tmp_path / "module.py"
    module.write_text(CODE, encoding="utf-8")
    _file_code_digest.cache_clear()
    assert _file_code_digest(str(module), 1, 1) == _digest_uncached(module)


def test_provenance_matches_only_its_own_config_slice_and_code(tmp_path):
    package = tmp_path / "src" / "foldworks"
    shutil.copytree(REPO_ROOT / "src" / "foldworks", package, ignore=shutil.ignore_patterns("__pycache__"))
    config = {"evaluate": {"baseline": "helix"}, "experiments": {"a": {"model": "distogram"}}}
    record = provenance_record("evaluate", config["evaluate"], ("evaluate",))
    assert record["code_hash"] == code_hash("evaluate", root=package)
    assert check.compare(record, "evaluate", config["evaluate"], "evaluate", package) == []
    changed = check.compare(record, "evaluate", {"baseline": "other"}, "evaluate", package)
    assert len(changed) == 1 and "config_hash" in changed[0]
    with open(package / "train" / "run.py", "a") as handle:  # train code: not evaluate's
        handle.write("\n_EDITED = True\n")
    code_hash.cache_clear()
    assert check.compare(record, "evaluate", config["evaluate"], "evaluate", package) == []
    with open(package / "evaluate" / "scoring.py", "a") as handle:
        handle.write("\n# a comment is not code\n")
    code_hash.cache_clear()
    assert check.compare(record, "evaluate", config["evaluate"], "evaluate", package) == []
    with open(package / "evaluate" / "scoring.py", "a") as handle:
        handle.write("\n_EDITED = True\n")
    code_hash.cache_clear()
    changed = check.compare(record, "evaluate", config["evaluate"], "evaluate", package)
    assert len(changed) == 1 and "code_hash" in changed[0] and "src/foldworks/evaluate" in changed[0]
    assert "stage" in check.compare(record, "train", config["evaluate"], "x", package)[0]


def test_metrics_sidecars_are_found_and_checked(tmp_path):
    (tmp_path / "src").symlink_to(REPO_ROOT / "src")
    table = tmp_path / "results" / "metrics" / "train" / "a.tsv"
    table.parent.mkdir(parents=True)
    table.write_text("target\n")
    config = load_workflow_config(REPO_ROOT, [REPO_ROOT / "tests" / "tiny_config.yaml"])
    assert [f.status for f in check.check_artifacts(tmp_path, config)] == [check.MISSING]
    write_sidecars([table], provenance_record("evaluate", config["evaluate"], ("evaluate",), inputs=[table]))
    assert sidecar_path(table) == table.with_name("a.provenance.json")
    findings = check.check_artifacts(tmp_path, config)
    assert [(f.path, f.status) for f in findings] == [("results/metrics/train/a.tsv", check.OK)]
    table.unlink()
    assert [f.status for f in check.check_artifacts(tmp_path, config)] == [check.MISMATCH]


def test_workflow_config_replaces_the_demo_and_is_filled_from_the_schema(tmp_path):
    override = tmp_path / "o.yaml"
    override.write_text("pdb: {entries: [1crn]}\nexperiments: {x: {model: distogram}}\n")
    config = load_workflow_config(REPO_ROOT, [override])
    assert config["pdb"]["entries"] == ["1crn"]
    assert set(config["experiments"]) == {"x"}  # not merged over the demo's experiments
    assert config["evaluate"]["baseline"] == "helix"  # filled in from the schema's defaults
    assert config["fetch"]["retries"] == 4
    demo = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    assert set(load_workflow_config(REPO_ROOT)["experiments"]) == set(demo["experiments"])


def test_restore_times_puts_back_every_changed_mtime(tmp_path):
    group = tmp_path / "data" / "g"
    (group / "sub").mkdir(parents=True)
    for name in ("a", "sub/b"):
        (group / name).write_text(name)
        os.utime(group / name, ns=(1_000_000_000, 1_000_000_000))
    times = artifacts.snapshot_times(tmp_path, ["data/g"])
    (group / "a").unlink()
    (group / "a").write_text("a")  # a re-link: new file, new mtime
    os.utime(group / "sub" / "b")
    assert artifacts.restore_times(times) >= 2
    assert {p: p.lstat().st_mtime_ns for p in times} == {p: t[1] for p, t in times.items()}


# ---------------------------------------------------------------- end to end (minutes) ----------

@dataclass
class Run:
    root: Path
    repo: Path
    clone: Path
    mirror: Path
    push_output: str
    pull_output: str
    committed: list[str]
    old_key_chars: int  # of the manifests planted before make push


def sh(cmd: list[str], cwd: Path, timeout: int = 900, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if ok and result.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({result.returncode}) in {cwd}:\n"
                    f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def smk(cwd: Path, *args: str, timeout: int = 900) -> str:
    result = sh([str(VENV / "bin" / "snakemake"), *CONFIG_ARGS, *args], cwd, timeout)
    return result.stdout + result.stderr


def dry_run(cwd: Path, *args: str) -> snake.DryRun:
    return snake.dry_run(cwd, [*CONFIG_ARGS, *args], timeout=600)


def link_venv(checkout: Path) -> None:
    """The clone uses the project's venv as it is (``make ... NO_SETUP=1``), never reinstalls it."""
    (checkout / ".venv").symlink_to(VENV)
    with open(checkout / ".git" / "info" / "exclude", "a") as handle:
        handle.write(".venv\n")


def entry_sequences_fasta(mirror: Path, entries: list[str], out: Path) -> None:
    """One FASTA record per protein entity of the entries (the MSA database's fixed input)."""
    import gemmi

    records = []
    for entry in entries:
        structure = gemmi.read_structure(str(mirror / f"{entry}.cif.gz"))
        structure.setup_entities()
        for entity in structure.entities:
            if entity.polymer_type == gemmi.PolymerType.PeptideL and entity.full_sequence:
                sequence = gemmi.one_letter_code([gemmi.Entity.first_mon(m) for m in entity.full_sequence])
                records.append(f">{entry}_{entity.name}\n{sequence.upper()}\n")
    out.write_text("".join(records))


def mutate_gly_to_ala(path: Path, seq_id: int) -> None:
    """Point mutation Gly -> Ala at ``label_seq_id`` in every table of a gzipped mmCIF (Cβ absent)."""
    import gzip

    import gemmi

    doc = gemmi.cif.read(str(path))
    block = doc.sole_block()
    for prefix, key, names in (("_entity_poly_seq.", "num", ["mon_id"]),
                               ("_pdbx_poly_seq_scheme.", "seq_id", ["mon_id", "pdb_mon_id", "auth_mon_id"]),
                               ("_atom_site.", "label_seq_id", ["label_comp_id", "auth_comp_id"])):
        table = block.find(prefix, [key, *names])
        assert len(table) > 0, f"{path}: no {prefix} table"
        for row in table:
            if row[0] == str(seq_id):
                assert row[1] == "GLY", f"{path}: residue {seq_id} is {row[1]}"
                for column in range(1, len(names) + 1):
                    row[column] = "ALA"
    for tag in ("_entity_poly.pdbx_seq_one_letter_code", "_entity_poly.pdbx_seq_one_letter_code_can"):
        value = "".join(gemmi.cif.as_string(block.find_value(tag)).split())
        block.set_pair(tag, gemmi.cif.quote(value[:seq_id - 1] + "A" + value[seq_id:]))
    with gzip.open(path, "wt") as handle:
        handle.write(doc.as_string())


def copy_project(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_symlink() or source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)


def plant_old_length_manifests(shards: Path) -> int:
    """Manifests a run with another ``pdb.shard_chars`` would have left: the run's fetch rows under
    keys of another length (with a state copy), and one manifest holding an entry (1zzz) that no
    current shard holds. Returns the other key length."""
    current = [path for path in shards.glob("*.tsv") if not path.name.startswith(".")]
    rows = [row for path in current for row in read_manifest(path).values()]
    assert len(rows) >= 10, f"expected the tiny run's fetch manifests in {shards}"
    old_chars = 1 if key_chars(current[0].stem) == 2 else 2
    for key, entries in group_entries([row.item for row in rows], old_chars).items():
        kept = [row for row in rows if row.item in entries]
        write_manifest(shards / f"{key}.tsv", kept)
        write_manifest(shards / f".{key}.state.tsv", kept)
    write_manifest(shards / f"{'z' * old_chars}.tsv", [Row("1zzz", "ok", "0" * 64, "0" * 16, "0" * 64)])
    return old_chars


@pytest.fixture(scope="module")
def run(tmp_path_factory, pdb_mirror) -> Run:
    for tool in ("hhblits", "mmseqs", "ffindex_build", "make", "git"):
        require_tool(tool)
    root = tmp_path_factory.mktemp("dvc")
    repo, mirror = root / "repo", root / "mirror"
    config = yaml.safe_load((REPO_ROOT / "tests" / "tiny_config.yaml").read_text())
    mirror.mkdir()
    for entry in config["pdb"]["entries"]:
        shutil.copy2(pdb_mirror / f"{entry}.cif.gz", mirror)
    entry_sequences_fasta(mirror, config["pdb"]["entries"], root / "entries.fasta")
    config["pdb"]["source"] = str(mirror)
    config["msa"]["databases"][0]["fasta"] = [str(root / "entries.fasta")]
    copy_project(repo)
    (repo / "tiny.yaml").write_text(yaml.safe_dump(config))
    sh(["git", "init", "-q", "-b", "main"], repo)
    link_venv(repo)
    # A lab repoints the default remote once and commits .dvc/config (README "Reproducing a run").
    sh([str(VENV / "bin" / "dvc"), "remote", "modify", "storage", "url", str(root / "remote")], repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "commit", "-qm", "project"], repo)
    smk(repo, "--cores", "2", timeout=1500)
    old_chars = plant_old_length_manifests(repo / "data/raw/shards")
    push = sh(["make", "push", "CONFIG=tiny.yaml", "NO_SETUP=1"], repo).stdout
    match = re.search(r"git add (.+?) && git commit", push)
    assert match, f"make push did not say what to commit:\n{push}"
    committed = match.group(1).split()
    sh(["git", "add", *committed], repo)
    sh(["git", "commit", "-qm", "results"], repo)
    clone = root / "clone"
    sh(["git", "clone", "-q", str(repo), str(clone)], root)
    link_venv(clone)
    pull = sh(["make", "pull", "CONFIG=tiny.yaml", "NO_SETUP=1"], clone).stdout
    return Run(root, repo, clone, mirror, push, pull, committed, old_chars)


def metrics_files(checkout: Path) -> dict[str, bytes]:
    base = checkout / "results" / "metrics"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*.tsv"))}


@pytest.mark.slow
def test_push_clone_pull_leaves_nothing_to_do(run):
    for group in ("data/raw", "data/msa", "data/msa_db", "data/features", "results/checkpoints",
                  "results/predictions", "results/metrics"):
        assert f"{group}.dvc" in run.committed, run.push_output
    assert sh(["git", "status", "--porcelain"], run.repo).stdout == "", "make push left files uncommitted"
    assert "Nothing to be done" in smk(run.repo, "-n"), "make push disturbed the run's mtimes"
    assert any((run.root / "remote").rglob("*")), "nothing was pushed to the remote"
    # make push removed the old-length manifests whose entries all moved, kept the other (1zzz)
    shards, stale = run.repo / "data/raw/shards", "z" * run.old_key_chars
    manifests = [p.name for p in shards.glob("*.tsv") if not p.name.startswith(".")]
    assert [name for name in manifests if key_chars(name[:-4]) == run.old_key_chars] == [f"{stale}.tsv"]
    assert not [p for p in shards.glob(".*.state.tsv") if key_chars(p.stem[1:-6]) == run.old_key_chars]
    assert read_manifest(shards / f"{stale}.tsv").keys() == {"1zzz"}
    assert re.search(rf"data/raw/shards: removed \d+ manifest\(s\) of an old key length; kept {stale}\.tsv "
                     r"\(1 item not", run.push_output), run.push_output
    assert (run.clone / "data/raw/shards" / f"{stale}.tsv").exists()
    assert "nothing to be done" in run.pull_output
    assert "Nothing to be done" in smk(run.clone, "-n")
    assert metrics_files(run.clone) == metrics_files(run.repo)
    assert (run.clone / "results/checkpoints/distogram/best.ckpt").read_bytes() == \
        (run.repo / "results/checkpoints/distogram/best.ckpt").read_bytes()
    assert not (run.clone / "results/checkpoints/distogram/resume").exists()  # .dvcignore
    findings = check.check_artifacts(run.clone, load_workflow_config(run.clone, [run.clone / "tiny.yaml"]))
    assert len(findings) >= 4 + 8 and {f.status for f in findings} == {check.OK}


@pytest.mark.slow
def test_forced_evaluate_reproduces_the_pulled_metrics_byte_for_byte(run):
    pulled = metrics_files(run.clone)
    sidecars = {p: json.loads(p.read_text()) for p in (run.clone / "results/metrics").rglob("*.provenance.json")}
    mtimes = {p: p.stat().st_mtime_ns for p in (run.clone / "results/metrics").rglob("*.tsv")}
    forced = ("--forcerun", "evaluate", "evaluate_baseline", "evaluate_design")  # design experiments too
    plan = dry_run(run.clone, *forced)
    assert plan.counts == {"evaluate": 3, "evaluate_baseline": 1, "report": 1, "evaluate_design": 2,
                           "report_design": 1, "all": 1}
    smk(run.clone, "--cores", "2", *forced)
    assert all(p.stat().st_mtime_ns > mtime for p, mtime in mtimes.items()), "evaluate did not rewrite them"
    assert metrics_files(run.clone) == pulled
    for path, before in sidecars.items():
        after = json.loads(path.read_text())
        for key in ("stage", "config_hash", "code_hash", "input_manifest_hash", "packages"):
            assert after[key] == before[key], (path, key)
    assert "Nothing to be done" in smk(run.clone, "-n")


@pytest.mark.slow
def test_pull_refuses_results_of_other_code_or_config(run):
    other = run.root / "other"
    sh(["git", "clone", "-q", str(run.repo), str(other)], run.root)
    link_venv(other)
    config = yaml.safe_load((other / "tiny.yaml").read_text())
    config["experiments"]["distogram"]["trainer"]["seed"] = 1
    (other / "tiny.yaml").write_text(yaml.safe_dump(config))
    with open(other / "src/foldworks/evaluate/scoring.py", "a") as handle:
        handle.write("\n_CHANGED_EVALUATION = True\n")
    sh(["git", "commit", "-qam", "other code and config"], other)
    result = sh(["make", "pull", "CONFIG=tiny.yaml", "NO_SETUP=1"], other, ok=False)
    message = result.stdout + result.stderr
    assert result.returncode != 0
    assert "refusing to mark the pulled results up to date" in message
    for path in ("results/checkpoints/distogram/best.ckpt", "results/metrics/distogram.tsv",
                 "results/metrics/baseline.tsv"):
        assert re.search(rf"mismatch +{re.escape(path)}: ", message), message
    assert "results/checkpoints/msa_trunk/best.ckpt" not in message  # its slice did not change
    assert "--forcerun evaluate evaluate_baseline evaluate_design train" in message
    assert not (other / ".snakemake" / "metadata").exists()  # nothing was marked up to date


@pytest.mark.slow
def test_push_refuses_an_unfinished_run(run):
    work = run.root / "unfinished"
    shutil.copytree(run.clone, work, symlinks=True)
    (work / "results/metrics/distogram.tsv").unlink()  # a target of rule all
    result = sh(["make", "push", "CONFIG=tiny.yaml", "NO_SETUP=1"], work, ok=False)
    assert result.returncode != 0
    assert "the run is not complete: snakemake -n would still run" in result.stderr, result.stdout + result.stderr
    assert "evaluate=1" in result.stderr and "report=1" in result.stderr
    assert sh(["git", "status", "--porcelain"], work).stdout == ""  # no .dvc file was touched


def passed_hashes(workdir: Path) -> set[str]:
    """Sequence hashes of the chains that passed the filters in ``workdir``'s chain table."""
    import pandas as pd

    table = pd.read_parquet(workdir / "data/chains.parquet", columns=["sequence_hash", "passed_filters"])
    return set(table.loc[table["passed_filters"], "sequence_hash"])


@pytest.mark.slow
def test_changed_input_structure_reruns_only_its_entry_and_the_global_steps(run):
    """Snakemake cannot plan past a checkpoint that will rerun: a dry run then lists the jobs up
    to ``chains`` (and the global ones whose inputs it can see) but no msa/features job. So the
    test counts in three steps: the dry run before the checkpoint; then — after running only up
    to ``data/chains.parquet`` — the msa stage (the changed sequence's shard and checkpoint
    ``msa_index``, behind which a dry run cannot see either); then — after running up to
    ``data/msa/index.tsv`` — the changed entry's features shard and train/eval, which is exact.

    The mirror is shared with the other tests (their clones record its files' size and mtime in
    the fetch shards' ``mirror`` param): the changed file stays in place until the third dry
    run (putting the original back first is a second change of the source, which rightly
    refetches the entry and hides everything past the checkpoint again), then its bytes *and*
    mtime are put back, so the mirror is exactly what the other tests' clones recorded."""
    work = run.root / "changed_entry"
    shutil.copytree(run.clone, work, symlinks=True)
    source = run.mirror / f"{MUTATED_ENTRY}.cif.gz"
    original, original_stat = source.read_bytes(), source.stat()
    try:
        mutate_gly_to_ala(source, 20)
        # the changed mirror file alone (its ingest shard's `mirror` param: size and mtime of the
        # shard's files) reruns its ingest (fetch + parse) shard (the ID's middle two characters),
        # which refetches and reparses only the changed entry: no --forcerun
        before = dry_run(work)
        print(f"before the checkpoint: {before.summary()}")
        assert {rule: before.counts.get(rule, 0) for rule in ("ingest", "chains")} == \
            {"ingest": 1, "chains": 1}, before.counts
        assert not {"msa_db", "msa", "features"} & set(before.counts), before.counts
        assert f"raw/shards/{demo_entry_key(MUTATED_ENTRY)}.tsv" in before.output
        hashes_before = passed_hashes(work)
        smk(work, "--cores", "2", "data/chains.parquet")
        hashes_after = passed_hashes(work)
        after = dry_run(work)
        # third step: once the msa shard and checkpoint msa_index have run, the features shards
        # are re-evaluated against the new MSA index: exactly the changed entry's shard remains
        smk(work, "--cores", "2", "data/msa/index.tsv")
        past_index = dry_run(work)
    finally:
        source.write_bytes(original)
        os.utime(source, ns=(original_stat.st_atime_ns, original_stat.st_mtime_ns))
    print(f"past the checkpoint: {after.summary()}")
    # msa_index will rerun: Snakemake skips the rerun reasons of every job downstream of it (dag.py
    # update_needrun masks them, expecting them to be triggered) and its `ancient` output triggers
    # no features shard, so the plan stops at the msa stage, as it stops at `chains` above
    # msa: the shard of the changed sequence, and the shard that lost the old one if other sequences
    # keep it (its item list changed: it reruns to drop the row and aligns nothing)
    added, removed = hashes_after - hashes_before, hashes_before - hashes_after
    assert added, "the mutation changed no passed sequence"
    chars = demo_msa_chars()
    msa_shards = {h[:chars] for h in added} | {h[:chars] for h in removed
                                               if any(k.startswith(h[:chars]) for k in hashes_after)}
    assert after.counts == {"msa": len(msa_shards), "msa_index": 1, "msa_summary": 1, "fetch_manifest": 1,
                            "failures_report": 1, "all": 1}, after.counts
    print(f"past msa_index: {past_index.summary()}")
    stages = ("ingest", "chains", "msa_db", "msa", "msa_index", "features")
    assert {rule: past_index.counts.get(rule, 0) for rule in stages} == \
        {"ingest": 0, "chains": 0, "msa_db": 0, "msa": 0, "msa_index": 0, "features": 1}, past_index.counts
    assert f"features/shards/{demo_entry_key(MUTATED_ENTRY)}.tsv" in past_index.output
    # 3 structure + 2 design experiments (mpnn, mpnn_ft): the demo's five, shrunk by tiny_config
    assert {rule: past_index.counts[rule] for rule in ("train", "predict", "evaluate", "evaluate_baseline", "report",
                                                       "evaluate_design", "report_design")} \
        == {"train": 5, "predict": 5, "evaluate": 3, "evaluate_baseline": 1, "report": 1, "evaluate_design": 2,
            "report_design": 1}
    assert set(past_index.counts) <= {"features", "train", "predict", "evaluate", "evaluate_baseline", "report",
                                      "evaluate_design", "report_design",
                                      "fetch_manifest", "failures_report", "msa_summary", "all"}, past_index.counts


@pytest.mark.slow
def test_evaluation_only_config_or_code_edit_reruns_only_evaluate_and_report(run):
    """tiny_config's only evaluate key (``baseline``) has one allowed value, so the scratch copy's
    schema gains an optional evaluate key first (no default: the slice is unchanged until set)."""
    work = run.root / "evaluate_edit"
    shutil.copytree(run.clone, work, symlinks=True)
    schema = work / "workflow/schemas/config.schema.yaml"
    text = schema.read_text()
    anchor = next(line + "\n" for line in text.splitlines() if line.startswith("      baseline: {enum: [helix]"))
    schema.write_text(text.replace(anchor, anchor + "      note: {type: string}\n"))
    assert "Nothing to be done" in smk(work, "-n")
    # the design experiments' evaluation (same evaluate slice and code) reruns too
    expected = {"evaluate": 3, "evaluate_baseline": 1, "report": 1, "evaluate_design": 2, "report_design": 1,
                "all": 1}
    config = yaml.safe_load((work / "tiny.yaml").read_text())
    config["evaluate"] = {"note": "rescored"}
    (work / "tiny.yaml").write_text(yaml.safe_dump(config))
    assert dry_run(work).counts == expected
    config.pop("evaluate")
    (work / "tiny.yaml").write_text(yaml.safe_dump(config))
    with open(work / "src/foldworks/evaluate/scoring.py", "a") as handle:
        handle.write("\n_EDITED = True\n")
    assert dry_run(work).counts == expected


@pytest.mark.slow
def test_touching_tracked_files_or_checking_out_away_and_back_reruns_nothing(run):
    tracked = sh(["git", "ls-files"], run.clone).stdout.split()
    random.Random(0).shuffle(tracked)
    for name in tracked:
        os.utime(run.clone / name)
    assert "Nothing to be done" in smk(run.clone, "-n")
    sh(["git", "checkout", "-q", "-b", "side"], run.clone)
    for name in ("src/foldworks/evaluate/scoring.py", "workflow/rules/evaluate.smk", "README.md"):
        with open(run.clone / name, "a") as handle:
            handle.write("\n_SIDE_BRANCH = True\n" if name.endswith(".py") else "\n# side branch\n")
    sh(["git", "commit", "-qam", "side"], run.clone)
    sh(["git", "checkout", "-q", "main"], run.clone)
    assert "Nothing to be done" in smk(run.clone, "-n")
    sh(["git", "checkout", "-q", "side"], run.clone)
    assert dry_run(run.clone).counts == {"evaluate": 3, "evaluate_baseline": 1, "report": 1, "evaluate_design": 2,
                                         "report_design": 1, "all": 1}
    sh(["git", "checkout", "-q", "main"], run.clone)
    assert "Nothing to be done" in smk(run.clone, "-n")


@pytest.mark.slow
def test_two_cpu_training_runs_with_the_same_seed_give_identical_tensors(run):
    """Two fresh copies of the clone train ``distogram`` again, as the workflow's job does; both
    checkpoints equal each other and the pulled one, tensors and provenance (relative paths alike)."""
    import torch

    config = load_workflow_config(run.clone, [run.clone / "tiny.yaml"])
    params = json.dumps(config["experiments"]["distogram"], sort_keys=True)
    out = "results/checkpoints/distogram"
    copies = [run.root / f"train{i}" for i in (1, 2)]
    for work in copies:
        shutil.copytree(run.clone, work, symlinks=True)
        for name in ("best.ckpt", "last.ckpt"):
            (work / out / name).unlink()
        result = subprocess.run(
            [sys.executable, "-m", "foldworks.train", "--experiment", "distogram", "--params", params,
             "--chains", "data/chains.parquet", "--features-dir", "data/features", "--out-dir", out,
             "--threads", "1"], cwd=work, env={**ENV, "PYTHONPATH": str(work / "src")},
            capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-4000:]
    for name in ("best.ckpt", "last.ckpt"):
        first, second, pulled = (torch.load(d / out / name, map_location="cpu", weights_only=True)
                                 for d in (*copies, run.clone))
        for other in (second, pulled):
            assert first["state_dict"].keys() == other["state_dict"].keys()
            for key, tensor in first["state_dict"].items():
                assert torch.equal(tensor, other["state_dict"][key]), (name, key)
            for key in ("stage", "config_hash", "code_hash", "input_manifest_hash"):
                assert first["provenance"][key] == other["provenance"][key], (name, key)
        assert first["provenance"]["config_hash"] == config_hash(config["experiments"]["distogram"])
