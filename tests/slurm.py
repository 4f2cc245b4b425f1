"""A real Slurm for the tests, from Debian's packages (slurmctld, slurmd, slurm-client, munge):
a private `munged`, one `slurmctld` and one `slurmd` per emulated node, with their own config,
ports and state in a temporary directory, GPUs from `gres.conf` on character devices made with
`mknod`; every daemon started here is stopped by its PID. And a workload driver: jobs submitted
with `sbatch`, snapshots of `squeue --json --states=all`, `sinfo --json` and `squeue --start`
while they run, and what Slurm did with each job at the end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.daemons import stop

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")


class NoSlurmError(Exception):
    """Raised when a private Slurm cannot be had here (the reason)."""


@dataclass(frozen=True)
class Nodes:
    """`count` emulated nodes named `<prefix>1..`, each with `gpus` GPUs of `model` (a
    `Type=` in gres.conf; more models on one node as `extra`), in `partitions`."""

    prefix: str
    count: int
    gpus: int
    model: str
    partitions: tuple[str, ...] = ("gpu",)
    cpus: int = 32
    extra: tuple[tuple[str, int], ...] = ()

    def names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.count + 1)]

    def gres(self) -> str:
        return ",".join(f"gpu:{m}:{n}" for m, n in ((self.model, self.gpus), *self.extra))


@dataclass
class Slurm:
    """A running private Slurm: its directory, client environment and the daemons' PIDs."""

    root: Path
    env: dict[str, str]
    nodes: tuple[Nodes, ...]
    bf_interval_s: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *argv: str, timeout_s: float = 30) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, *flags: str, run_s: float) -> str:
        """Submit a job that runs `run_s` seconds; its id."""
        out = self.run("sbatch", "--parsable", "--output=/dev/null", *flags,
                       f"--wrap=sleep {run_s:g}")  # fmt: skip
        return out.strip().split(";")[0]

    def snapshot(self, into: Path) -> float:
        """`squeue --json --states=all`, `sinfo --json` and `squeue --start` now, into
        `into/`; the wall-clock time (epoch seconds) the capture began."""
        into.mkdir(parents=True, exist_ok=True)
        taken = time.time()
        (into / "squeue.json").write_text(self.run("squeue", "--json", "--states=all"))
        (into / "sinfo.json").write_text(self.run("sinfo", "--json"))
        (into / "start.txt").write_text(self.run("squeue", "--start", "--noheader",
                                                 "--format=%i %S"))  # fmt: skip
        (into / "taken.txt").write_text(f"{taken:.3f}\n")
        return taken

    def jobs(self) -> list[dict[str, object]]:
        doc = json.loads(self.run("squeue", "--json", "--states=all"))
        jobs: list[dict[str, object]] = doc["jobs"]
        return jobs

    def idle(self, timeout_s: float = 60) -> None:
        """Until every node is idle (registered, nothing running)."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.run("sinfo", "--noheader", "--Node", "--format=%N %t").split()
            if states and all(s == "idle" for s in states[1::2]):
                return
            if time.monotonic() > deadline:
                raise NoSlurmError(f"nodes not idle: {states}; {self.log_tail()}")
            time.sleep(0.3)

    def log_tail(self) -> str:
        log = self.root / "slurmctld.log"
        return log.read_text(errors="replace")[-1500:] if log.exists() else ""


def free_ports(count: int) -> list[int]:
    """`count` consecutive free TCP ports on loopback."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base: int = s.getsockname()[1]
        if base + count >= 65535:
            continue
        try:
            with contextlib.ExitStack() as held:
                for port in range(base, base + count):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            return list(range(base, base + count))
        except OSError:
            continue
    raise NoSlurmError("no run of free ports")


def config(root: Path, nodes: Sequence[Nodes], ports: list[int], bf_interval_s: int) -> str:
    lines = [
        "ClusterName=twin", "SlurmctldHost=localhost", f"SlurmctldPort={ports[0]}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge.sock'}", f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}", f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}", f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd-%n.log'}", f"PlugStackConfig={root / 'plugstack.conf'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "GresTypes=gpu",
        "SlurmdParameters=config_overrides",  # emulated nodes: the config, not this machine
        "SchedulerType=sched/backfill", f"SchedulerParameters=bf_interval={bf_interval_s}",
        "MinJobAge=86400", "ReturnToService=2", "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none", "KillWait=2", "OverTimeLimit=0",
    ]  # fmt: skip
    port = iter(ports[1:])
    partitions: dict[str, list[str]] = {}
    for group in nodes:
        first = next(port)
        for _ in range(group.count - 1):
            next(port)
        lines.append(
            f"NodeName={group.prefix}[1-{group.count}] NodeHostname=localhost "
            f"Port={first}-{first + group.count - 1} CPUs={group.cpus} RealMemory=64000 "
            f"Gres={group.gres()} State=UNKNOWN"
        )
        for name in group.partitions:
            partitions.setdefault(name, []).append(f"{group.prefix}[1-{group.count}]")
    for i, (name, members) in enumerate(partitions.items()):
        default = "YES" if i == 0 else "NO"
        lines.append(f"PartitionName={name} Nodes={','.join(members)} Default={default} "
                     "MaxTime=INFINITE State=UP")  # fmt: skip
    return "\n".join(lines) + "\n"


def gres_config(root: Path, nodes: Sequence[Nodes]) -> str:
    """gres.conf: each node's GPUs on character devices of its own (made here)."""
    lines = []
    for group in nodes:
        for node in group.names():
            index = 0
            for model, count in ((group.model, group.gpus), *group.extra):
                devices = root / "dev" / node
                devices.mkdir(parents=True, exist_ok=True)
                for i in range(index, index + count):
                    os.mknod(devices / f"gpu{i}", 0o600 | 0o020000, os.makedev(1, 3))
                lines.append(f"NodeName={node} Name=gpu Type={model} "
                             f"File={devices}/gpu[{index}-{index + count - 1}]")  # fmt: skip
                index += count
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def slurm(nodes: Sequence[Nodes], *, bf_interval_s: int = 5) -> Iterator[Slurm]:
    """A private Slurm of `nodes`, idle and answering; NoSlurmError saying why where one cannot
    be started here. Every daemon is stopped by its PID afterwards."""
    missing = [n for n in (*DAEMONS, *CLIENTS) if shutil.which(n) is None and
               not Path(f"/usr/sbin/{n}").exists()]  # fmt: skip
    if missing:
        raise NoSlurmError(f"{', '.join(missing)} not installed (make test installs Debian's "
                           "slurmctld, slurmd, slurm-client and munge)")  # fmt: skip
    if os.getuid() != 0:
        raise NoSlurmError("a private Slurm's daemons run as root here")
    root = Path(tempfile.mkdtemp(prefix="twin-slurm-"))
    ports = free_ports(1 + sum(g.count for g in nodes))
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    (root / "plugstack.conf").write_text("")
    (root / "slurm.conf").write_text(config(root, nodes, ports, bf_interval_s))
    try:
        (root / "gres.conf").write_text(gres_config(root, nodes))
    except OSError as exc:  # a container without CAP_MKNOD
        shutil.rmtree(root, ignore_errors=True)
        raise NoSlurmError(f"cannot make the GPUs' character devices here: {exc}") from None
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = Slurm(root, env, tuple(nodes), bf_interval_s)
    try:
        start(cluster, ["munged", "--foreground", "--force", f"--socket={root / 'munge.sock'}",
                        f"--key-file={key}", f"--pid-file={root / 'munged.pid'}",
                        f"--log-file={root / 'munged.log'}", f"--seed-file={root / 'munge.seed'}"],
              ready=(root / "munge.sock").exists)  # fmt: skip
        start(cluster, ["slurmctld", "-D", "-i"], ready=lambda: answers(cluster))
        for group in nodes:
            for node in group.names():
                (root / "spool" / node).mkdir()
                start(cluster, ["slurmd", "-D", "-N", node], ready=lambda: True)
        cluster.idle()
        yield cluster
    finally:
        if cluster.procs and cluster.procs[-1].poll() is None:
            cancel_all(cluster)  # job steps outlive their slurmd: end them first
        for proc in reversed(cluster.procs):
            stop(proc, grace_s=20)
        shutil.rmtree(root, ignore_errors=True)


def cancel_all(cluster: Slurm, timeout_s: float = 30) -> None:
    """Cancel every job and wait until none runs: a job's slurmstepd is not slurmd's to stop."""
    subprocess.run(["scancel", "--full", "--user", "root"], env=cluster.env, capture_output=True,
                   timeout=30, check=False)  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = subprocess.run(["squeue", "--noheader", "--states=RUNNING,COMPLETING",
                                 "--format=%i"], env=cluster.env, capture_output=True,
                                text=True, timeout=30, check=False)  # fmt: skip
        if listed.returncode != 0 or not listed.stdout.strip():
            return
        time.sleep(0.3)


def answers(cluster: Slurm) -> bool:
    done = subprocess.run(["scontrol", "ping"], env=cluster.env, capture_output=True,
                          text=True, timeout=10, check=False)  # fmt: skip
    return "UP" in done.stdout


def start(cluster: Slurm, argv: list[str], *, ready: object) -> None:
    name = argv[0]
    binary = shutil.which(name) or f"/usr/sbin/{name}"
    with (cluster.root / f"{name}-{len(cluster.procs)}.out").open("wb") as out:
        proc = subprocess.Popen([binary, *argv[1:]], env=cluster.env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    cluster.procs.append(proc)
    deadline = time.monotonic() + 30
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None or time.monotonic() > deadline:
            said = (cluster.root / f"{name}-{len(cluster.procs) - 1}.out").read_text(
                errors="replace")  # fmt: skip
            raise NoSlurmError(f"{name} would not start: {said[-800:]} {cluster.log_tail()}")
        time.sleep(0.2)
