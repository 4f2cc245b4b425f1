"""The twin as a pip user gets it: the project built into a wheel and installed into a new
virtual environment, outside the repository.

The registries are out of reach in tests, so the new environment finds the twin's dependencies
in the test run's own site-packages (one `.pth` line: a path, not the editable install's hook,
which a `.pth` inside that folder would run) and pip installs the wheel with `--no-index`: its
resolver still checks that every declared dependency is there."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path  # the new environment's bin/: its `python` and `twin`

    def top_level(self) -> set[str]:
        """The import names the wheel installs at the top level."""
        with zipfile.ZipFile(self.wheel) as archive:
            return {n.split("/")[0].removesuffix(".py") for n in archive.namelist()
                    if not n.split("/")[0].endswith(".dist-info")}  # fmt: skip


def build_and_install(work: Path) -> Installed:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(work / "dist"), str(ROOT)],
                   check=True, capture_output=True, text=True)  # fmt: skip
    (wheel,) = (work / "dist").glob("cluster_twin-*.whl")
    venv = work / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(venv)], check=True)  # fmt: skip
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True,
                             text=True).stdout.strip()  # fmt: skip
    Path(purelib, "twin-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-index", str(wheel)], check=True, capture_output=True,
                   text=True)  # fmt: skip
    return Installed(wheel, venv / "bin")
