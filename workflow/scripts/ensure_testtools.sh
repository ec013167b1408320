#!/usr/bin/env bash
# Make sure the metric reference tools the test suite compares against are installed: TMscore
# (tm-align) and OpenStructure (compare-structures, with its compound library). The workflow
# never runs them, so only `make test` calls this script. As root on Debian/Ubuntu they are
# installed with apt-get; otherwise the script prints how to install them and exits 1.
set -euo pipefail

# The Debian paths foldworks.evaluate.reference runs OpenStructure from.
OST_STARTUP=/usr/lib/python3/dist-packages/ost/ost_startup.py
OST_LIB=/usr/share/openstructure/compounds.chemlib

missing=()
command -v TMscore >/dev/null 2>&1 || missing+=(tm-align)
[ -f "$OST_STARTUP" ] || missing+=(openstructure python3-ost)

ensure_compound_library() {
  # OpenStructure needs a compound library built from the CCD it ships (once, ~35 s).
  if [ ! -f "$OST_LIB" ] && command -v chemdict_tool >/dev/null 2>&1 && [ -w "$(dirname "$OST_LIB")" ]; then
    echo "[setup] building the OpenStructure compound library"
    chemdict_tool create /usr/share/openstructure/components.cif.gz "$OST_LIB" pdb >/dev/null
  fi
}
if [ ${#missing[@]} -eq 0 ]; then ensure_compound_library; exit 0; fi

pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing the tests' reference tools with apt-get: $pkgs"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  ensure_compound_library
  exit 0
fi
cat >&2 <<MSG
[setup] the test suite (not make demo) needs the metric reference tools; missing: ${pkgs% }
[setup] TMscore without root, with conda/mamba (bioconda tmalign provides TMscore):
[setup]     conda create -n foldworks-testtools -c conda-forge -c bioconda tmalign && conda activate foldworks-testtools
[setup] OpenStructure: the lDDT reference tests run Debian's build ($OST_STARTUP); as root:
[setup]     sudo apt-get install tm-align openstructure python3-ost
MSG
exit 1
