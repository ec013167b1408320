# foldworks — the two commands: `make demo` (main job) and `make test` (test suite).
# `make demo` sets up what the workflow runs: .venv with pinned Python deps and the HH-suite /
# MMseqs2 binaries. `make test` also sets up the tests' metric references (TMscore,
# OpenStructure) and a throw-away Slurm. Tools come from apt-get when root; otherwise the
# scripts print how to install them without root (conda) and stop.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
CORES ?= all
CONFIG ?= config/config.yaml
# Offline form: make demo PDB_SOURCE=../shared/pdb_mirror EXTRA_FASTA=../shared/seqdb/seqdb.fasta
PDB_SOURCE ?=
EXTRA_FASTA ?=
SNAKEMAKE_ARGS ?=
PYTEST_ARGS ?=
OVERRIDES := .make/overrides.yaml

.PHONY: help demo test setup venv sysdeps testdeps lint docs check-cuda clean-results lock push pull update-holdings

# Every target's help is the `## ` text on its line (tests/test_setup.py checks that each has one).
help: ## list the targets
	@echo "make demo [CONFIG=my.yaml] [PDB_SOURCE=../shared/pdb_mirror EXTRA_FASTA=../shared/seqdb/seqdb.fasta]"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  make \1\t- \2/' | expand -t 24

setup: venv sysdeps ## the Python environment and the workflow's tools (HH-suite, MMseqs2)

venv: $(VENV)/.installed ## .venv with the pinned Python dependencies

$(VENV)/.installed: requirements.txt requirements.lock pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@echo "[setup] installing pinned Python dependencies into $(VENV) (first time: ~2 min)"
	@$(VPY) -m pip install -q --disable-pip-version-check -r requirements.txt -c requirements.lock 2>&1 | grep -v "is ignored: it is neither" || true
	@$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 | grep -v "is ignored: it is neither" || true
	@$(VPY) -c "import torch, lightning, snakemake, gemmi, pandas, seaborn, foldworks" \
		|| { echo "[setup] Python dependencies failed to install"; exit 1; }
	@touch $@

sysdeps: ## HH-suite and MMseqs2 (apt-get as root; otherwise prints the conda command)
	@bash workflow/scripts/ensure_tools.sh

# Only the tests need the metric reference tools and a (throw-away, single-node) Slurm cluster.
testdeps: ## the tests' tools: TMscore, OpenStructure, Slurm + MUNGE
	@bash workflow/scripts/ensure_testtools.sh
	@bash workflow/scripts/ensure_slurm.sh

$(OVERRIDES): FORCE
	@mkdir -p .make
	@{ echo "# written by make from PDB_SOURCE / EXTRA_FASTA; do not edit"; \
	   if [ -n "$(PDB_SOURCE)" ]; then echo "pdb: {source: '$(abspath $(PDB_SOURCE))'}"; fi; \
	   if [ -n "$(EXTRA_FASTA)" ]; then echo "msa: {databases: [{name: foldworks, fasta: ['$(abspath $(EXTRA_FASTA))']}]}"; fi; \
	   if [ -z "$(PDB_SOURCE)$(EXTRA_FASTA)" ]; then echo "{}"; fi; } > $@.tmp
	@cmp -s $@.tmp $@ 2>/dev/null && rm -f $@.tmp || mv $@.tmp $@

FORCE:

demo: setup $(OVERRIDES) ## set up, then run the workflow on CONFIG (default config/config.yaml: the demo)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores $(CORES) \
		--configfile $(CONFIG) $(OVERRIDES) $(SNAKEMAKE_ARGS)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores 1 \
		--configfile $(CONFIG) $(OVERRIDES) --report results/report.html

test: setup testdeps ## set up (workflow and test tools), then run the test suite
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) -m pytest $(PYTEST_ARGS)

lint: setup ## snakemake --lint on CONFIG
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --lint --configfile $(CONFIG)

lock: venv ## rewrite requirements.lock from .venv
	@{ echo "# Full pinned environment (pip constraints). Regenerate with \`make lock\`."; \
	   $(VPY) -m pip freeze --exclude-editable | grep -v '^torch=='; } > requirements.lock

# The wwPDB holdings behind `pdb.entries: all` (https source), cached in data/raw/holdings/;
# the workflow refreshes them by itself only after pdb.holdings_max_age_days. HOLDINGS_URL: a
# mirror of https://files.wwpdb.org/pub/pdb/holdings (URL or directory).
HOLDINGS_URL ?= https://files.wwpdb.org/pub/pdb/holdings
update-holdings: venv ## re-download the wwPDB holdings now (pdb.entries: all with an https source)
	PYTHONPATH=src $(VPY) -m foldworks.fetch.holdings --refresh --url $(HOLDINGS_URL)

# docs/parameters.md is generated from the config schema and the code's defaults (a test fails when stale).
docs: venv ## regenerate docs/parameters.md
	PYTHONPATH=src $(VPY) -m foldworks.paramdocs --write docs/parameters.md

# GPU check: torch's CUDA build and every GPU it sees, with bf16 support (exit 1 when none).
check-cuda: venv ## print torch's CUDA version and the visible GPUs (fails when there is none)
	@$(VPY) -c 'import torch; n = torch.cuda.device_count(); print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", n); [print(" ", i, torch.cuda.get_device_name(i), "bf16" if torch.cuda.is_bf16_supported() else "no bf16") for i in range(n)]; raise SystemExit(0 if n else "no CUDA device visible to torch")'

clean-results: ## delete checkpoints, predictions, metrics, plots and the summary
	rm -rf results/checkpoints results/predictions results/metrics results/plots results/summary.tsv

# Reproducing a run with DVC (README "Reproducing a run"). Use the run's CONFIG, PDB_SOURCE,
# EXTRA_FASTA and SNAKEMAKE_ARGS (profile). DVC_REMOTE: a remote other than the default one.
# NO_SETUP=1: use $(VENV) as it is, without the install step (e.g. a linked, shared .venv).
# ALLOW_UNVERIFIED=1: accept checkpoints/metrics that carry no provenance (runs made before it).
DVC_REMOTE ?=
NO_SETUP ?=
ALLOW_UNVERIFIED ?=
REPRO := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PYTHONPATH="$(CURDIR)/src" $(VPY) -m foldworks.repro
REPRO_ARGS = --configfile $(CONFIG) $(OVERRIDES) --snakemake-args "$(SNAKEMAKE_ARGS)" \
	$(if $(DVC_REMOTE),--remote $(DVC_REMOTE)) $(if $(ALLOW_UNVERIFIED),--allow-missing)

push: $(if $(NO_SETUP),,venv) $(OVERRIDES) ## after a run: record data/ and results/ with DVC, push them, list the files to commit
	$(REPRO) push $(REPRO_ARGS)

pull: $(if $(NO_SETUP),,venv) $(OVERRIDES) ## in a clone: dvc pull, check provenance, make Snakemake see everything up to date
	$(REPRO) pull $(REPRO_ARGS)
