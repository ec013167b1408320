"""``python -m foldworks.repro push|pull|check`` — what ``make push`` and ``make pull`` run.

    push   the run is complete (``snakemake -n``: nothing to do) and its checkpoints and metrics
           match this checkout -> remove the shard manifests of an old key length whose items have
           all moved to current-length shards (foldworks.shards.prune) -> ``dvc add`` every artifact
           group (mtimes kept) -> ``dvc push`` -> print the ``.dvc`` files to commit.
    pull   ``dvc pull`` -> refuse, naming each artifact, if any checkpoint or metrics table was
           produced by other code or config than this checkout's -> ``snakemake --touch
           --forceall`` (consistent mtimes, metadata for every job) -> ``snakemake -n`` must
           report "Nothing to be done".
    check  only the provenance check, on the working tree.

Run from the repository root with the same ``--configfile`` files (and profile, in
``--snakemake-args``) as the workflow run; ``src/`` must be the package on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from foldworks.provenance import git_sha
from foldworks.repro import artifacts, check, snake
from foldworks.repro.config import ConfigError, load_workflow_config
from foldworks.shards import prune

#: The rules to force when artifacts of a stage do not match (downstream rules follow).
FORCERUN = {"results/checkpoints": "train", "results/metrics": "evaluate evaluate_baseline evaluate_design"}


class Refused(RuntimeError):
    """push/pull/check refuses; the message says why and what to do."""


def provenance_findings(repo: Path, config: dict[str, Any], allow_missing: bool
                        ) -> tuple[list[check.Finding], list[check.Finding]]:
    """All findings and the blocking ones, for the config the workflow would use
    (:func:`load_workflow_config`)."""
    findings = check.check_artifacts(repo, config)
    return findings, check.problems_of(findings, allow_missing)


def forcerun_hint(problems: list[check.Finding]) -> str:
    rules = sorted({rule for f in problems for prefix, rule in FORCERUN.items() if f.path.startswith(prefix)})
    return f"snakemake --forcerun {' '.join(rules)} ..." if rules else "the workflow"


def cmd_check(repo: Path, args: argparse.Namespace) -> None:
    findings, problems = provenance_findings(repo, load_workflow_config(repo, args.configfile), args.allow_missing)
    print(check.format_findings(findings, git_sha(repo), verbose=args.verbose))
    if problems:
        raise Refused(f"{len(problems)} artifact(s) do not match this checkout's code and config")


def cmd_push(repo: Path, args: argparse.Namespace, smk: list[str]) -> None:
    plan = snake.dry_run(repo, smk)
    if not plan.nothing_to_do:
        raise Refused(f"the run is not complete: snakemake -n would still run {plan.total} jobs "
                      f"({plan.summary()}). Finish it first; pushing now would record stale or partial results.")
    config = load_workflow_config(repo, args.configfile)
    findings, problems = provenance_findings(repo, config, args.allow_missing)
    print(check.format_findings(findings, git_sha(repo)))
    if problems:
        raise Refused("refusing to push: the artifacts above do not match this checkout "
                      f"(rerun them: {forcerun_hint(problems)})")
    # every current-length shard job has run (nothing to do): old-length manifests can go
    pruned = prune.summary(prune.prune_workflow(repo, config))
    if pruned:
        print("[push] " + pruned.replace("\n", "\n[push] "))
    groups = artifacts.present_groups(repo)
    restored = artifacts.add(repo, groups)
    print(f"[push] recorded {len(groups)} artifact groups with DVC ({restored} mtimes put back)")
    artifacts.push(repo, groups, args.remote)
    print(f"[push] pushed to DVC remote {artifacts.remote_url(repo, args.remote)}")
    if not snake.dry_run(repo, smk).nothing_to_do:
        raise Refused("after dvc add, snakemake -n has work to do; the pushed data are fine, but report this")
    to_commit = artifacts.files_to_commit(repo, groups)
    inside = [str(f) for f in args.configfile if (repo / f).resolve().is_relative_to(repo)]
    code = artifacts.uncommitted(repo, ["Snakefile", "workflow", "src", "config", *inside])
    if to_commit:
        print("[push] commit these files so others can `make pull` this state:\n  git add "
              + " ".join(to_commit) + " && git commit -m 'Results of <run>'")
    else:
        print("[push] nothing to commit: the .dvc files already record these results")
    if code:
        print("[push] the results depend on uncommitted code/config; commit it in the same commit:\n  "
              + "\n  ".join(code))


def cmd_pull(repo: Path, args: argparse.Namespace, smk: list[str]) -> None:
    groups = artifacts.pull(repo, args.remote)
    print(f"[pull] {len(groups)} artifact groups pulled from {artifacts.remote_url(repo, args.remote)}")
    findings, problems = provenance_findings(repo, load_workflow_config(repo, args.configfile), args.allow_missing)
    print(check.format_findings(findings, git_sha(repo)))
    if problems:
        raise Refused(
            "refusing to mark the pulled results up to date: the artifacts above were produced by other "
            "code or config than this checkout's. Either check out the commit that produced them (its SHA "
            f"is above) and `make pull` again, or regenerate them here: {forcerun_hint(problems)}")
    snake.touch_all(repo, smk)
    plan = snake.dry_run(repo, smk)
    if not plan.nothing_to_do:
        raise Refused(f"the pulled artifacts do not cover this config: snakemake -n would run {plan.total} "
                      f"jobs ({plan.summary()})")
    print("[pull] Snakemake: nothing to be done; every output is up to date and verified")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foldworks.repro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["push", "pull", "check"])
    parser.add_argument("--configfile", nargs="+", action="extend", default=[], type=Path,
                        help="the workflow's --configfile files, in order")
    parser.add_argument("--snakemake-args", default="", help="more Snakemake arguments, e.g. a --profile")
    parser.add_argument("--remote", default=None, help="DVC remote (default: the one in .dvc/config)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="accept artifacts that carry no provenance record (older runs)")
    parser.add_argument("--repo", type=Path, default=Path("."), help="repository root")
    parser.add_argument("-v", "--verbose", action="store_true", help="check: list matching artifacts too")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    repo = args.repo.resolve()
    smk = [*(["--configfile", *map(str, args.configfile)] if args.configfile else []),
           *shlex.split(args.snakemake_args)]
    commands = {"check": lambda: cmd_check(repo, args), "push": lambda: cmd_push(repo, args, smk),
                "pull": lambda: cmd_pull(repo, args, smk)}
    try:
        commands[args.command]()
    except (Refused, ConfigError, artifacts.DvcError, snake.SnakemakeError,
            subprocess.CalledProcessError) as exc:
        print(f"[{args.command}] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
