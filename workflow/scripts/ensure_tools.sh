#!/usr/bin/env bash
# Make sure the external tools the workflow runs are on PATH: HH-suite (hhblits, hhfilter,
# ffindex_*, cstranslate) and MMseqs2. Nothing else: the test-only metric references are
# ensure_testtools.sh's. As root on Debian/Ubuntu the missing ones are installed with apt-get;
# otherwise the script prints how to install them without root (conda) and exits 1.
set -euo pipefail

missing=()
for tool in hhblits hhfilter ffindex_from_fasta ffindex_build; do
  command -v "$tool" >/dev/null 2>&1 || missing+=(hhsuite)
done
# Debian installs cstranslate only as CPU-specific builds under /usr/libexec/hhsuite.
if ! command -v cstranslate >/dev/null 2>&1 && ! ls /usr/libexec/hhsuite/cstranslate-* >/dev/null 2>&1; then
  missing+=(hhsuite)
fi
command -v mmseqs >/dev/null 2>&1 || missing+=(mmseqs2)
[ ${#missing[@]} -eq 0 ] && exit 0

pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing the workflow's tools with apt-get: $pkgs"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  exit 0
fi
cat >&2 <<MSG
[setup] the workflow needs HH-suite and MMseqs2 on PATH; missing: ${pkgs% }
[setup] without root, with conda/mamba (bioconda hhsuite 3.3.0 + mmseqs2), then rerun make:
[setup]     conda env create -f envs/hhsuite.yaml && conda activate foldworks-hhsuite
[setup] as root on Debian/Ubuntu:
[setup]     sudo apt-get install hhsuite mmseqs2
[setup] on a cluster: load modules that put hhblits, hhfilter, ffindex_build and mmseqs on PATH.
MSG
exit 1
