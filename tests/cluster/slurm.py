"""A real one-node SLURM cluster on this host, for the tests: ``munged``, ``slurmctld`` and
``slurmd`` as child processes of the test session, configured in a temporary directory.

The node is this host as ``slurmd -C`` reports it (CPUs, memory); no accounting database
(``accounting_storage/none``: no ``sacct``, so jobs are followed with ``squeue`` and kept in
``slurmctld``'s memory for ``MinJobAge`` seconds after they end); no cgroups (a container has
none to give): processes are tracked with ``proctrack/linuxproc`` and a job step over its memory
request is killed by the accounting poll (``OverMemoryKill``, every second). Every client
(``sbatch``, ``squeue``, the ``srun`` inside each job) finds the configuration through
``SLURM_CONF``, which :meth:`SlurmCluster.start` exports (and an ``srun`` wrapper on PATH sets
for the jobs).

Run as a script to start a cluster by hand: ``python tests/cluster/slurm.py DIR`` (prints the
``SLURM_CONF`` to export; Ctrl-C stops it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The programs the cluster needs (Debian: ``apt-get install slurm-wlm munge``).
BINARIES = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scancel", "srun")
PARTITION = "main"
#: tests/snakemake_server.py: STEADY_STATUS_CHECKS
STEADY = "CAUSALPOS_TEST_STEADY_STATUS_CHECKS"
#: What :meth:`SlurmCluster.start` exports to the test process (and :meth:`SlurmCluster.stop`
#: restores).
EXPORTED = ("SLURM_CONF", "PATH", STEADY)

SLURM_CONF = """\
ClusterName=causalpos-test
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=3600
ReturnToService=2
MpiDefault=none
NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName={partition} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def skip_reason() -> str | None:
    """Why a cluster cannot be started here (None when it can)."""
    missing = missing_binaries()
    if missing:
        return (
            f"SLURM test cluster: {', '.join(missing)} not found "
            "(Debian/Ubuntu: `apt-get install slurm-wlm munge`; .ci/run installs them)"
        )
    if os.geteuid() != 0:
        return "SLURM test cluster: slurmd must run as root (SlurmUser=root); run the tests as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_resources() -> tuple[int, int]:
    """(CPUs, RealMemory MB) of this host as ``slurmd -C`` reports them."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return int(fields["CPUs"]), int(fields["RealMemory"])


class SlurmCluster:
    """A one-node cluster under ``root``; :meth:`start` runs it, :meth:`stop` ends its
    daemons (by pid, the ones it started)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        # munged wants every directory above its socket searchable by all, which pytest's
        # temporary directories (0700) are not: the socket lives in its own directory in /tmp.
        self.munge_dir = Path(tempfile.mkdtemp(prefix="causalpos-munge-"))
        self.munge_dir.chmod(0o755)
        self.munge_socket = self.munge_dir / "munge.socket"
        self.procs: list[subprocess.Popen] = []
        self.cpus, self.mem_mb = node_resources()
        self.startup_s: float | None = None

    def env(self) -> dict[str, str]:
        """The environment of the cluster's clients; with :data:`STEADY`, the Snakemake runs of
        tests/wfutil.py check their jobs' states at ``--seconds-between-status-checks``
        throughout (tests/snakemake_server.py: ``steady_status_checks``)."""
        path = f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": path, STEADY: "1"}

    def _write_srun(self) -> None:
        """An ``srun`` first on PATH that sets ``SLURM_CONF``: the executor plugin's job step
        removes every ``SLURM_*`` variable before it calls ``srun`` inside the job, so a
        configuration anywhere but /etc/slurm/slurm.conf would not reach it."""
        real = shutil.which("srun")
        wrapper = self.root / "bin" / "srun"
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {real} "$@"\n')
        wrapper.chmod(0o755)

    def _write_config(self) -> None:
        for d in ("state", "spool", "log", "munge"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o755)  # munged wants its socket's directory searchable
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.conf.write_text(
            SLURM_CONF.format(
                host=self.host,
                root=self.root,
                ctld_port=_free_port(),
                slurmd_port=_free_port(),
                munge_socket=self.munge_socket,
                cpus=self.cpus,
                mem_mb=self.mem_mb,
                partition=PARTITION,
            )
        )

    def _spawn(self, *cmd: str, log: str) -> None:
        out = open(self.root / "log" / log, "wb")  # noqa: SIM115 - the daemon's lifetime
        self.procs.append(
            subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env(), cwd=self.root
            )
        )

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        """Start munged, slurmctld, slurmd; wait until ``sinfo`` shows the node idle; export
        :data:`EXPORTED` to this process (so the jobs' ``srun`` finds the configuration)."""
        t0 = time.monotonic()
        self._write_config()
        self._write_srun()
        munge = self.root / "munge"
        self._spawn(
            "munged",
            "--foreground",
            f"--key-file={munge / 'munge.key'}",
            f"--socket={self.munge_socket}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
            log="munged.out",
        )
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged's socket")
        self._spawn("slurmctld", "-D", "-i", log="slurmctld.out")
        self._spawn("slurmd", "-D", log="slurmd.out")
        self._wait(lambda: self.node_state() == "idle", timeout, "the node to be idle")
        self._saved_env = {k: os.environ.get(k) for k in EXPORTED}
        os.environ.update({k: self.env()[k] for k in EXPORTED})
        self.startup_s = time.monotonic() - t0
        return self

    def node_state(self) -> str:
        proc = subprocess.run(
            ["sinfo", "--noheader", "--format", "%T"],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=30,
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                logs = "\n".join(
                    f"--- {f.name}\n{f.read_text(errors='replace')[-2000:]}"
                    for f in sorted((self.root / "log").glob("*"))
                )
                raise RuntimeError(
                    f"SLURM test cluster: gave up waiting for {what} "
                    f"({'a daemon exited' if dead else f'{timeout:.0f} s'})\n{logs}"
                )
            time.sleep(0.2)

    def squeue(self, *args: str) -> str:
        return subprocess.run(
            ["squeue", "--noheader", *args],
            capture_output=True,
            text=True,
            env=self.env(),
            check=True,
            timeout=30,
        ).stdout

    def stop(self) -> None:
        """SIGTERM to each daemon this object started (slurmd, slurmctld, munged), then wait."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        shutil.rmtree(self.munge_dir, ignore_errors=True)
        for key, value in getattr(self, "_saved_env", {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the daemons on kill too
    cluster = SlurmCluster(Path(sys.argv[1]).resolve()).start()
    print(
        f"export SLURM_CONF={cluster.conf} PATH={cluster.root / 'bin'}:$PATH"
        f"  # started in {cluster.startup_s:.1f} s",
        flush=True,
    )
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        cluster.stop()
