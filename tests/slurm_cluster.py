"""A throw-away single-node Slurm cluster (munged + slurmctld + slurmd) for tests.

Installs nothing: it needs root and the Debian ``slurm-wlm`` and ``munge`` binaries
(``workflow/scripts/ensure_slurm.sh`` installs them). Everything lives in one temp directory
(configs, munge key and socket, state, spool, logs, fake GPU device files) except
``/etc/slurm/slurm.conf``, which must exist because the jobstep executor plugin strips
``SLURM_CONF`` before its inner ``srun``: it becomes a symlink to the temp config while the
cluster runs and is removed again by :meth:`SlurmCluster.stop`. An existing, real
``/etc/slurm/slurm.conf`` is never touched (the cluster then refuses to start).

The node advertises ``cpus`` CPUs (``SlurmdParameters=config_overrides`` lets it claim more
than the machine has) and two fake GPUs (symlinks to ``/dev/null``; slurmd 22.05 refuses GRES
without ``File=`` and refuses regular files). Partitions: ``cpu`` (default) and ``gpu``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
LOCK_FILE = Path("/tmp/foldworks-slurm-test.lock")
CPU_PARTITION = "cpu"
GPU_PARTITION = "gpu"
# Job credential lifetime (s). Slurm holds a requeued job (BeginTime) for this + 1 s before it may
# start again: 120 s by default, shortened so the requeue test does not idle for two minutes. The
# scheduler then starts it at its next pass: sched_interval/bf_interval 3 s (defaults 60/30 s).
CRED_EXPIRE_S = 15


def unavailable_reason() -> str | None:
    """Why a test cluster cannot start here (``None`` when it can)."""
    if os.geteuid() != 0:
        return "a single-node Slurm test cluster needs root (munged/slurmd run as root)"
    missing = [name for name in BINARIES if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]
    if missing:
        return f"Slurm binaries missing ({', '.join(missing)}): run workflow/scripts/ensure_slurm.sh"
    if SYSTEM_CONF.exists() and not SYSTEM_CONF.is_symlink():
        return f"{SYSTEM_CONF} exists (a real Slurm installation); not replacing it with a test cluster"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _slurm_conf(root: Path, host: str, cpus: int, mem_mb: int) -> str:
    return f"""# foldworks test cluster (tests/slurm_cluster.py); removed when the test ends
ClusterName=foldworkstest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire={CRED_EXPIRE_S}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
DefMemPerCPU=500
MinJobAge=600
ReturnToService=2
SchedulerParameters=sched_min_interval=100000,sched_interval=3,bf_interval=3
GresTypes=gpu
NodeName={host} CPUs={cpus} RealMemory={mem_mb} Gres=gpu:2 State=UNKNOWN
PartitionName={CPU_PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName={GPU_PARTITION} Nodes=ALL Default=NO MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """Start/stop a one-node cluster rooted at ``root`` (an empty temp directory)."""

    def __init__(self, root: Path, cpus: int = 8, mem_mb: int = 16000) -> None:
        self.root = Path(root)
        self.cpus = cpus
        self.mem_mb = mem_mb
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.root / "etc" / "slurm.conf"
        self._lock: int | None = None
        self._linked = False

    @property
    def env(self) -> dict[str, str]:
        """Environment for client commands (sbatch, squeue, snakemake) aimed at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_configs(self) -> None:
        for sub in ("etc", "munge", "state", "spool", "log", "dev"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        for index in range(2):
            fake = self.root / "dev" / f"fakegpu{index}"
            if not fake.is_symlink():
                fake.symlink_to("/dev/null")
        self.conf.write_text(_slurm_conf(self.root, self.host, self.cpus, self.mem_mb))
        (self.root / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nName=gpu File={self.root}/dev/fakegpu[0-1]\n"
        )
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)

    def _link_system_conf(self) -> None:
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        if SYSTEM_CONF.is_symlink():
            SYSTEM_CONF.unlink()  # a stale link from a killed test run
        SYSTEM_CONF.symlink_to(self.conf)
        self._linked = True

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        subprocess.run(
            [_binary("munged"), "--force", f"--socket={munge}/munge.socket", f"--key-file={munge}/munge.key",
             f"--pid-file={munge}/munged.pid", f"--log-file={self.root}/log/munged.log",
             f"--seed-file={munge}/munged.seed"],
            check=True, capture_output=True, text=True, timeout=20,
        )

    def start(self, timeout_s: float = 30.0) -> "SlurmCluster":
        """Write configs, start the daemons and wait until the node is idle."""
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        self._lock = os.open(LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # one test cluster per machine at a time
        try:
            self._write_configs()
            self._link_system_conf()
            self._start_munge()
            for daemon in ("slurmctld", "slurmd"):
                extra = ["-c"] if daemon == "slurmctld" else []
                subprocess.run([_binary(daemon), *extra, "-f", str(self.conf)], check=True,
                               capture_output=True, text=True, timeout=20, env=self.env)
            self._wait_idle(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            result = subprocess.run([_binary("sinfo"), "-h", "-N", "-o", "%t"], capture_output=True,
                                    text=True, timeout=10, env=self.env)
            state = result.stdout.strip()
            if result.returncode == 0 and state and all(s == "idle" for s in state.split()):
                return
            time.sleep(0.3)
        raise RuntimeError(f"test Slurm node not idle after {timeout_s} s (state {state!r}):\n{self.logs()}")

    def logs(self, tail_chars: int = 3000) -> str:
        """The tails of the daemon logs (for failure messages)."""
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-tail_chars:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel jobs, stop every daemon this cluster started, remove the system config link."""
        if self.conf.exists() and (self.root / "slurmctld.pid").exists():
            subprocess.run([_binary("scancel"), "--full", "--quiet", "--user=root"],
                           capture_output=True, timeout=10, env=self.env, check=False)
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
            _terminate(self.root / pid_file)
        if self._linked and SYSTEM_CONF.is_symlink() and os.readlink(SYSTEM_CONF) == str(self.conf):
            SYSTEM_CONF.unlink()
        self._linked = False
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(pid_file: Path, grace_s: float = 5.0) -> None:
    """SIGTERM the daemon named in ``pid_file``, SIGKILL it after ``grace_s`` seconds."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
