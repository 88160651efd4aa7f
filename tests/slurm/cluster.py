"""A one-node Slurm cluster for tests: munge, MariaDB, slurmdbd, slurmctld and slurmd, all
started by the test as root in a temporary folder on free loopback ports, stopped by ``close``.

The node has two GPUs declared as gres with fake device files (character devices of the
NVIDIA major number made with mknod, or plain files where mknod is not allowed), so Slurm
hands out GPU indices (``SLURM_JOB_GPUS``) and runs the prolog as on a GPU node. Jobs are
tracked with ``proctrack/cgroup`` on cgroup v1 where the freezer hierarchy is writable (each
job's processes in ``/slurm_<node>/uid_<uid>/job_<id>/step_<step>``), else with
``proctrack/linuxproc`` (no job cgroups: ``cgroups`` is False). Accounting goes through
slurmdbd to MariaDB (``AdminComment`` can only be stored there once a job ended); without
MariaDB the cluster runs without accounting (``accounting`` is False).

``why_not()`` says in one line why no cluster can start here (not root, a daemon missing).
Every wait is a condition with a deadline; ``close`` stops every daemon it started and
removes the job cgroups slurmd left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import free_port, stop_all

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sacct")
DATABASE = ("mariadb-install-db", "mariadbd", "slurmdbd", "sacctmgr")
FREEZER = Path("/sys/fs/cgroup/freezer")
NVIDIA_MAJOR = 195


def why_not() -> str:
    """Why no cluster can start here ("" when one can)."""
    if os.geteuid() != 0:
        return "the Slurm tests start slurmctld and slurmd, which needs root"
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return f"Slurm not installed: {', '.join(missing)} missing (Debian: slurmctld slurmd " \
               "slurm-client munge)"
    return ""


def _cgroups_writable() -> bool:
    probe = FREEZER / f"gpu-exporter-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


def wait_for(what: str, check: Callable[[], object], timeout: float,
             interval: float = 0.1) -> object:
    """Poll ``check()`` until it returns something truthy; that value.

    Raises:
        TimeoutError: ``timeout`` seconds passed first.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Cluster:
    """The running cluster; ``run`` runs a Slurm command against it."""

    root: Path
    node: str = field(default_factory=lambda: f"gpuexp{os.getpid()}")
    accounting: bool = False
    cgroups: bool = False
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment of Slurm's commands (this cluster's configuration, Unix times)."""
        return {**os.environ, "SLURM_CONF": str(self.root / "etc" / "slurm.conf"),
                "SLURM_TIME_FORMAT": "%s"}

    def run(self, *argv: str, user: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command with the cluster's environment (as ``user`` through runuser)."""
        command = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        done = subprocess.run(command, env=self.env, capture_output=True, text=True,
                              timeout=60, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr}")
        return done

    def _daemon(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        log = (self.root / "log" / f"{name}.out").open("wb")
        self.daemons.append(subprocess.Popen(argv, env=dict(env or self.env), stdout=log,
                                             stderr=subprocess.STDOUT))
        log.close()

    def logs(self) -> str:
        """The tail of every daemon's log (for a failure's message)."""
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            text = path.read_text(errors="replace").strip().splitlines()[-15:]
            parts.append(f"== {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def start(self, prolog: str, epilog: str, ctld_epilog: str) -> None:
        """Start every daemon and wait until the node is idle.

        Raises:
            RuntimeError: a daemon exited, or the node did not come up (logs in the message).
        """
        for sub in ("etc", "log", "state", "spool", "munge", "dev", "db"):
            (self.root / sub).mkdir(mode=0o755)
        self.root.chmod(0o711)  # jobs run as nobody: it must reach the munge socket and config
        self.cgroups = _cgroups_writable()
        self.accounting = all(shutil.which(name) for name in DATABASE)
        self._munge()
        ports = {name: free_port() for name in ("ctld", "slurmd", "dbd", "db")}
        if self.accounting:
            self._database(ports["db"], ports["dbd"])
        self._write_config(ports, prolog, epilog, ctld_epilog)
        if self.accounting:
            self.run("sacctmgr", "-i", "add", "cluster", "gpuexp")
        conf = str(self.root / "etc" / "slurm.conf")
        self._daemon("slurmctld", ["slurmctld", "-D", "-c", "-f", conf])
        self._daemon("slurmd", ["slurmd", "-D", "-N", self.node, "-f", conf])

        def idle() -> bool:
            self._check_alive()
            done = self.run("sinfo", "-h", "-n", self.node, "-o", "%t", check=False)
            return done.stdout.strip() == "idle"

        wait_for("the Slurm node to be idle", idle, timeout=60)

    def _check_alive(self) -> None:
        for daemon in self.daemons:
            if daemon.poll() is not None:
                raise RuntimeError(f"{daemon.args[0]} exited {daemon.returncode}\n{self.logs()}")

    def _munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        (self.root / "munge").chmod(0o711)
        socket_path = self.root / "munge" / "munge.sock"
        self._daemon("munged", [
            "munged", "--foreground", "--force", f"--key-file={key}",
            f"--socket={socket_path}", f"--pid-file={self.root / 'munge' / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={self.root / 'munge' / 'seed'}"])
        wait_for("munged's socket", lambda: socket_path.exists() or self._check_alive(),
                 timeout=20)

    def _database(self, db_port: int, dbd_port: int) -> None:
        data = self.root / "db" / "data"
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}",
                        "--user=root", "--auth-root-authentication-method=normal",
                        "--skip-test-db"], capture_output=True, timeout=120, check=True)
        self._daemon("mariadbd", [
            "mariadbd", "--no-defaults", f"--datadir={data}", "--user=root",
            "--bind-address=127.0.0.1", f"--port={db_port}",
            f"--socket={self.root / 'db' / 'mysqld.sock'}",
            f"--pid-file={self.root / 'db' / 'mysqld.pid'}", "--skip-log-bin",
            "--innodb-buffer-pool-size=16M", f"--log-error={self.root / 'log' / 'mariadb.log'}"])

        def answers() -> bool:
            self._check_alive()
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", db_port)) == 0

        wait_for("MariaDB", answers, timeout=60)
        munge = self.root / "munge" / "munge.sock"
        dbd_conf = self.root / "etc" / "slurmdbd.conf"
        dbd_conf.write_text(
            f"AuthType=auth/munge\nAuthInfo=socket={munge}\nDbdHost=localhost\n"
            f"DbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n"
            f"PidFile={self.root / 'slurmdbd.pid'}\nLogFile={self.root / 'log' / 'slurmdbd.log'}\n"
            f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
            f"StoragePort={db_port}\nStorageUser=root\nStorageLoc=slurm_acct_db\n")
        dbd_conf.chmod(0o600)
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF (written before it starts).
        self._daemon("slurmdbd", ["slurmdbd", "-D"])

        def listening() -> bool:
            self._check_alive()
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", dbd_port)) == 0

        wait_for("slurmdbd", listening, timeout=60)

    def _devices(self) -> str:
        """Fake GPU device files: NVIDIA character devices where mknod is allowed."""
        paths = [self.root / "dev" / f"nvidia{n}" for n in range(2)]
        for minor, path in enumerate(paths):
            try:
                os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
            except OSError:
                path.write_text("")
        return str(self.root / "dev" / "nvidia[0-1]")

    def _write_config(self, ports: Mapping[str, int], prolog: str, epilog: str,
                      ctld_epilog: str) -> None:
        etc, munge = self.root / "etc", self.root / "munge" / "munge.sock"
        host = socket.gethostname().split(".")[0]
        accounting = (
            "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={ports['dbd']}\nAccountingStoragePass={munge}\n"
            if self.accounting else "AccountingStorageType=accounting_storage/none\n")
        proctrack = "proctrack/cgroup" if self.cgroups else "proctrack/linuxproc"
        (etc / "slurm.conf").write_text(f"""\
ClusterName=gpuexp
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports['ctld']}
SlurmdPort={ports['slurmd']}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={munge}
CredType=cred/munge
StateSaveLocation={self.root / 'state'}
SlurmdSpoolDir={self.root / 'spool'}
SlurmctldPidFile={self.root / 'slurmctld.pid'}
SlurmdPidFile={self.root / 'slurmd.pid'}
SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}
SlurmdLogFile={self.root / 'log' / 'slurmd.log'}
ProctrackType={proctrack}
TaskPlugin=task/none
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
{accounting}AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=600
FirstJobId={1000 + os.getpid() % 100000}
PrologFlags=Alloc
Prolog={prolog}
Epilog={epilog}
EpilogSlurmctld={ctld_epilog}
NodeName={self.node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=2 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        (etc / "gres.conf").write_text(f"NodeName={self.node} Name=gpu File={self._devices()}\n")
        (etc / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nCgroupAutomount=no\n"
            "ConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n")

    def close(self) -> None:
        """Stop every daemon (slurmd and slurmctld first) and remove the node's cgroups."""
        stop_all(reversed(self.daemons), timeout=10)
        for controller in Path("/sys/fs/cgroup").glob("*"):
            top = controller / f"slurm_{self.node}"
            for directory in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
                if directory.is_dir():
                    with contextlib.suppress(OSError):
                        directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
