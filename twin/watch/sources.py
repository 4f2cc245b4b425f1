"""Where a watch reads a running cluster from: Slurm's commands (`squeue --json --states=all`,
`sinfo --json`, `scontrol show config`) or the files a cron job writes with them; Kubernetes
through `kubectl get ... -o json`, or its files likewise.

A capture is a directory: the exports as the cluster wrote them and `taken.txt`, the epoch
seconds the capture began (a file's modification time where a cron job wrote it). Slurm's
layout is the one `tests/slurm_workload.drive` writes, so recorded watches and driven runs
are scored the same way."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from twin.errors import ConfigError
from twin.schema.snapshot import Snapshot

TAKEN_FILE = "taken.txt"
CONFIG_FILE = "config.txt"  # `scontrol show config`, once a watch (beside its captures)
COMMAND_TIMEOUT_S = 60.0
# A capture read: its state, and by job id each start it shows and the cluster's estimates.
Reading = tuple[Snapshot, dict[str, float], dict[str, float]]


class CaptureError(Exception):
    """A capture could not be taken (a command failed, a file is missing): the watch says so
    and tries again at its next poll."""


class Source(Protocol):
    described: str

    def prepare(self, out: Path) -> None:
        """Before the first capture: what is read once (Slurm's config), into `out`."""

    def capture(self, into: Path) -> float:
        """The cluster's exports now, into `into`; when they were taken (epoch seconds)."""

    def read(self, into: Path, out: Path, window_s: float) -> Reading:
        """The state the capture in `into` holds (`out` holding what `prepare` wrote) and, by
        job id, when each job started (so far as the capture shows) and the cluster's own
        estimate of each waiting job's start, where it makes one."""


def _run(argv: Sequence[str], flag: str) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)  # fmt: skip
    except FileNotFoundError:
        raise CaptureError(f"{flag}: {argv[0]} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise CaptureError(f"{flag}: {' '.join(argv)} ran past {COMMAND_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise CaptureError(f"{flag}: {' '.join(argv)} exited {done.returncode}: {said}")
    return done.stdout


def _taken(into: Path, taken_s: float) -> float:
    """Records when the capture was taken (to the millisecond); that time, as recorded, so a
    recorded watch played again scores the same."""
    text = f"{taken_s:.3f}"
    (into / TAKEN_FILE).write_text(text + "\n")
    return float(text)


def _copied(found: Sequence[Path], into: Path) -> float:
    """A cron job's files, copied into the capture; taken when the newest was written."""
    for path in found:
        shutil.copyfile(path, into / path.name)
    return _taken(into, max(p.stat().st_mtime for p in found))


class SlurmExports:
    """What Slurm's captures share: the state, its jobs' starts and Slurm's estimates, read
    from `squeue.json` and `sinfo.json` (and the `config.txt` beside the captures)."""

    def read(self, into: Path, out: Path, window_s: float) -> Reading:
        from twin.forecast.slurm import read_slurm

        config = out / CONFIG_FILE
        return read_slurm(into / "squeue.json", into / "sinfo.json", window_s=window_s,
                          config=config if config.is_file() else None)  # fmt: skip


class KubernetesExports:
    """What Kubernetes captures share: the `*.json` exports merged; starts from the running
    pods (Kubernetes makes no estimate of a pending pod's start)."""

    def read(self, into: Path, out: Path, window_s: float) -> Reading:
        from twin.forecast.kubernetes import from_kubernetes

        state = from_kubernetes(sorted(into.glob("*.json")), window_s=window_s)
        return state, {j.job_id: j.start_s for j in state.running if j.start_s is not None}, {}


@dataclass
class SlurmCommands(SlurmExports):
    """`squeue` and `sinfo` run at each poll (on this host's Slurm, as `SLURM_CONF` and the
    environment name it), `scontrol show config` once."""

    described: str = "Slurm (squeue, sinfo)"

    def prepare(self, out: Path) -> None:
        try:
            (out / CONFIG_FILE).write_text(_run(["scontrol", "show", "config"], "--slurm"))
        except CaptureError as exc:
            raise ConfigError(f"{exc} (Debian's slurm-client; or give --slurm-dir)") from None

    def capture(self, into: Path) -> float:
        taken = time.time()
        squeue = _run(["squeue", "--json", "--states=all"], "--slurm")
        sinfo = _run(["sinfo", "--json"], "--slurm")
        (into / "squeue.json").write_text(squeue)
        (into / "sinfo.json").write_text(sinfo)
        return _taken(into, taken)


@dataclass
class SlurmFiles(SlurmExports):
    """`squeue.json` and `sinfo.json` in a directory, as a cron job writes them (and
    `config.txt`, `scontrol show config`, where it writes that too)."""

    folder: Path
    described: str = ""

    def __post_init__(self) -> None:
        self.described = f"Slurm files in {self.folder}"

    def prepare(self, out: Path) -> None:
        if not self.folder.is_dir():
            raise ConfigError(f"--slurm-dir: {self.folder} is not a directory")
        config = self.folder / CONFIG_FILE
        if config.is_file() and config.resolve() != (out / CONFIG_FILE).resolve():
            shutil.copyfile(config, out / CONFIG_FILE)

    def capture(self, into: Path) -> float:
        found = [self.folder / "squeue.json", self.folder / "sinfo.json"]
        missing = [p.name for p in found if not p.is_file()]
        if missing:
            raise CaptureError(f"--slurm-dir: no {' or '.join(missing)} in {self.folder}")
        return _copied(found, into)


@dataclass
class KubernetesCommands(KubernetesExports):
    """`kubectl get pods -A -o json` and `kubectl get nodes -o json` at each poll (the
    context kubectl's own configuration names)."""

    described: str = "Kubernetes (kubectl)"
    kubectl: Sequence[str] = field(default=("kubectl",))

    def prepare(self, out: Path) -> None:
        if shutil.which(self.kubectl[0]) is None:
            raise ConfigError(f"--kubectl: {self.kubectl[0]} is not on PATH; or give "
                              "--kubernetes-dir")  # fmt: skip

    def capture(self, into: Path) -> float:
        taken = time.time()
        pods = _run([*self.kubectl, "get", "pods", "-A", "-o", "json"], "--kubectl")
        nodes = _run([*self.kubectl, "get", "nodes", "-o", "json"], "--kubectl")
        (into / "pods.json").write_text(pods)
        (into / "nodes.json").write_text(nodes)
        return _taken(into, taken)


@dataclass
class KubernetesFiles(KubernetesExports):
    """The `*.json` exports (`kubectl get ... -o json`) in a directory, as a cron job writes
    them; merged as `twin forecast --kubernetes A --kubernetes B` merges them."""

    folder: Path
    described: str = ""

    def __post_init__(self) -> None:
        self.described = f"Kubernetes files in {self.folder}"

    def prepare(self, out: Path) -> None:
        if not self.folder.is_dir():
            raise ConfigError(f"--kubernetes-dir: {self.folder} is not a directory")

    def capture(self, into: Path) -> float:
        found = sorted(self.folder.glob("*.json"))
        if not found:
            raise CaptureError(f"--kubernetes-dir: no *.json in {self.folder}")
        return _copied(found, into)


@dataclass
class Recorded:
    """The captures of a recorded watch (or a driven run: `NNNN/` directories), played again
    in order: the offline backtest of the same snapshots."""

    folder: Path
    kind: str  # "slurm" or "kubernetes", by the files the first capture holds
    captures: list[Path]
    described: str = ""

    @classmethod
    def of(cls, folder: Path) -> Recorded:
        if not folder.is_dir():
            raise ConfigError(f"--replay: {folder} is not a directory")
        captures = sorted(p for p in folder.iterdir() if p.is_dir() and (p / TAKEN_FILE).is_file())
        if not captures:
            raise ConfigError(f"--replay: {folder} holds no captures (NNNN/ directories with "
                              f"{TAKEN_FILE})")  # fmt: skip
        kind = "slurm" if (captures[0] / "squeue.json").is_file() else "kubernetes"
        return cls(folder, kind, captures, f"captures recorded in {folder}")

    def prepare(self, out: Path) -> None:
        config = self.folder / CONFIG_FILE
        if config.is_file() and config.resolve() != (out / CONFIG_FILE).resolve():
            shutil.copyfile(config, out / CONFIG_FILE)

    def capture(self, into: Path) -> float:
        raise CaptureError("a recorded watch takes no captures")

    def read(self, into: Path, out: Path, window_s: float) -> Reading:
        return self._exports().read(into, out, window_s)

    def _exports(self) -> SlurmExports | KubernetesExports:
        return SlurmExports() if self.kind == "slurm" else KubernetesExports()
