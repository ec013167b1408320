# foldworks — the two commands: `make demo` (main job) and `make test` (test suite).
# Both set up everything on a fresh Debian machine: .venv with pinned Python deps, and the
# HH-suite / MMseqs2 binaries (apt-get when root, otherwise the conda command is printed).

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

.PHONY: demo test setup venv sysdeps testdeps lint report clean-results lock help push pull update-holdings

help:
	@echo "make demo   - set up, then run the whole workflow on $(CONFIG)"
	@echo "make test   - set up, then run the test suite"
	@echo "make demo PDB_SOURCE=../shared/pdb_mirror EXTRA_FASTA=../shared/seqdb/seqdb.fasta  (offline)"
	@echo "make push   - after a run: record data/ and results/ with DVC, push them, list the files to commit"
	@echo "make pull   - in a clone: dvc pull, check provenance, make Snakemake see everything up to date"
	@echo "make update-holdings - re-download the wwPDB holdings now (pdb.entries: all with an https source)"

setup: venv sysdeps

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements.lock pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@echo "[setup] installing pinned Python dependencies into $(VENV) (first time: ~2 min)"
	@$(VPY) -m pip install -q --disable-pip-version-check -r requirements.txt -c requirements.lock 2>&1 | grep -v "is ignored: it is neither" || true
	@$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 | grep -v "is ignored: it is neither" || true
	@$(VPY) -c "import torch, lightning, snakemake, gemmi, pandas, seaborn, foldworks" \
		|| { echo "[setup] Python dependencies failed to install"; exit 1; }
	@touch $@

sysdeps:
	@bash workflow/scripts/ensure_tools.sh

# Only the tests need a (throw-away, single-node) Slurm cluster.
testdeps:
	@bash workflow/scripts/ensure_slurm.sh

$(OVERRIDES): FORCE
	@mkdir -p .make
	@{ echo "# written by make from PDB_SOURCE / EXTRA_FASTA; do not edit"; \
	   if [ -n "$(PDB_SOURCE)" ]; then echo "pdb: {source: '$(abspath $(PDB_SOURCE))'}"; fi; \
	   if [ -n "$(EXTRA_FASTA)" ]; then echo "msa: {databases: [{name: foldworks, fasta: ['$(abspath $(EXTRA_FASTA))']}]}"; fi; \
	   if [ -z "$(PDB_SOURCE)$(EXTRA_FASTA)" ]; then echo "{}"; fi; } > $@.tmp
	@cmp -s $@.tmp $@ 2>/dev/null && rm -f $@.tmp || mv $@.tmp $@

FORCE:

demo: setup $(OVERRIDES)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores $(CORES) \
		--configfile $(CONFIG) $(OVERRIDES) $(SNAKEMAKE_ARGS)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores 1 \
		--configfile $(CONFIG) $(OVERRIDES) --report results/report.html

test: setup testdeps
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) -m pytest $(PYTEST_ARGS)

lint: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --lint --configfile $(CONFIG)

lock: venv
	@{ echo "# Full pinned environment (pip constraints). Regenerate with \`make lock\`."; \
	   $(VPY) -m pip freeze --exclude-editable | grep -v '^torch=='; } > requirements.lock

# The wwPDB holdings behind `pdb.entries: all` (https source), cached in data/raw/holdings/;
# the workflow refreshes them by itself only after pdb.holdings_max_age_days. HOLDINGS_URL: a
# mirror of https://files.wwpdb.org/pub/pdb/holdings (URL or directory).
HOLDINGS_URL ?= https://files.wwpdb.org/pub/pdb/holdings
update-holdings: venv
	PYTHONPATH=src $(VPY) -m foldworks.fetch.holdings --refresh --url $(HOLDINGS_URL)

clean-results:
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

push: $(if $(NO_SETUP),,venv) $(OVERRIDES)
	$(REPRO) push $(REPRO_ARGS)

pull: $(if $(NO_SETUP),,venv) $(OVERRIDES)
	$(REPRO) pull $(REPRO_ARGS)
