#!/usr/bin/env bash
# Make sure the Slurm and MUNGE binaries the Slurm end-to-end test (tests/test_slurm.py) needs
# are installed: slurmctld, slurmd, sbatch/squeue/scontrol (Debian slurm-wlm) and munged (munge).
# Installs them with apt-get when root on Debian/Ubuntu. It never starts or configures a
# cluster: the test starts its own from a temp directory and stops it again. Elsewhere (no root)
# it only prints what is missing and exits 0: the Slurm test then skips with that reason.
set -euo pipefail

missing=()
for tool in slurmctld slurmd sbatch squeue scontrol; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=(slurm-wlm)
done
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || missing+=(munge)
[ ${#missing[@]} -eq 0 ] && exit 0

pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing Slurm for the cluster test with apt-get: $pkgs"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  exit 0
fi
echo "[setup] Slurm test prerequisites missing ($pkgs); tests/test_slurm.py will be skipped." >&2
echo "[setup] install them as root with: apt-get install slurm-wlm munge" >&2
exit 0
