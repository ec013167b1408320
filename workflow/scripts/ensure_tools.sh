#!/usr/bin/env bash
# Make sure the external tools foldworks calls are installed: HH-suite (hhblits, hhfilter,
# ffindex_*, cstranslate), MMseqs2, and the metric references TMscore (tm-align) and
# OpenStructure (compare-structures). On Debian as root they are installed with apt-get;
# otherwise we print the conda command for envs/hhsuite.yaml and fail.
set -euo pipefail

missing=()
command -v hhblits >/dev/null 2>&1 || missing+=(hhsuite)
command -v ffindex_from_fasta >/dev/null 2>&1 || missing+=(hhsuite)
command -v mmseqs >/dev/null 2>&1 || missing+=(mmseqs2)
# TMscore (tm-align) is the reference implementation the metric tests compare against.
command -v TMscore >/dev/null 2>&1 || missing+=(tm-align)
# OpenStructure (compare-structures) is the lDDT reference of the metric tests.
[ -f /usr/lib/python3/dist-packages/ost/ost_startup.py ] || missing+=(openstructure python3-ost)
if ! command -v cstranslate >/dev/null 2>&1 && ! ls /usr/libexec/hhsuite/cstranslate-* >/dev/null 2>&1; then
  missing+=(hhsuite)
fi
ensure_compound_library() {
  # OpenStructure needs a compound library built from the CCD it ships (once, ~35 s).
  local lib=/usr/share/openstructure/compounds.chemlib
  if [ ! -f "$lib" ] && command -v chemdict_tool >/dev/null 2>&1 && [ -w "$(dirname "$lib")" ]; then
    echo "[setup] building the OpenStructure compound library"
    chemdict_tool create /usr/share/openstructure/components.cif.gz "$lib" pdb >/dev/null
  fi
}
if [ ${#missing[@]} -eq 0 ]; then ensure_compound_library; exit 0; fi

pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing system tools with apt-get: $pkgs"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  ensure_compound_library
  exit 0
fi
echo "[setup] missing tools: $pkgs" >&2
echo "[setup] install them with conda:  conda env create -f envs/hhsuite.yaml && conda activate foldworks-hhsuite" >&2
echo "[setup] or on Debian/Ubuntu:      sudo apt-get install hhsuite mmseqs2" >&2
exit 1
