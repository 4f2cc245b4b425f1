"""Where a network client's scenario may come from: a built-in name, an inline scenario object,
or a file in the one directory the operator named; a trace it plays must be one the twin ships
or one in that directory. Nothing else on the file system is opened, and errors about a file
never quote its content."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.errors import ConfigError, ScenarioNotFoundError
from twin.schema.scenario import ClusterScenario, Scenario
from twin.sim import families, kinds
from twin.sim.catalog import builtin_names
from twin.sim.job_sources import inside, lexically_inside, shipped_traces
from twin.sim.scenarios import UNREADABLE, as_cluster, load_raw, override, parse_text, validate

MAX_FILE_BYTES = 1 << 20
SUFFIXES = (".yaml", ".yml", ".json")
ScenarioSpec = str | dict[str, Any]


_QUOTED_LINE = re.compile(r"""(first line) (?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


@dataclass(frozen=True)
class ScenarioAccess:
    """The scenarios a client may ask for; `directory` (if any) is the operator's choice."""

    directory: Path | None = None

    def load(self, spec: ScenarioSpec, overrides: Sequence[str] = ()) -> Scenario:
        """The validated scenario named or given by `spec`, with `path=value` overrides."""
        raw, where, quote = self._raw(spec)
        for assignment in overrides:
            override(raw, assignment)
        return self._shipped_trace(validate(raw, where, quote=quote), where)

    def _shipped_trace(self, scenario: Scenario, where: str) -> Scenario:
        """A trace a scenario plays must be one the twin ships or one in the operator's
        directory: the scenario comes back naming that file by its full path, so nothing else
        on the file system is opened (or looked at, or named back)."""
        cluster = kinds.negotiable(scenario)
        if cluster is None or cluster.trace is None:
            return scenario
        roots = [shipped_traces(), *([self.directory] if self.directory is not None else [])]
        found = inside(cluster.trace.path, roots)
        if found is None:
            where_ok = " or in the scenario directory" if self.directory else ""
            raise ConfigError(
                f"{where}: trace.path is not a trace the twin ships (under traces/){where_ok}"
            )
        trace = cluster.trace.model_copy(update={"path": str(found)})
        return cluster.model_copy(update={"trace": trace})

    def public(self, detail: str) -> str:
        """`detail` (an error met while a client's scenario was read or its trace played) as
        the client may be told it: files named as the client names them (under `traces/`, or
        in the scenario directory), no line of a file quoted, so nothing of the server's file
        system or of a file's content is said back."""
        for root, shown in ((shipped_traces(), "traces/"), (self.directory, "")):
            if root is not None:
                detail = detail.replace(f"{root.resolve()}/", shown).replace(f"{root}/", shown)
        return _QUOTED_LINE.sub(r"\1", detail)

    def load_cluster(self, spec: ScenarioSpec) -> ClusterScenario:
        """A job-level scenario, the kind negotiation sessions run on."""
        return as_cluster(self.load(spec))

    def _raw(self, spec: ScenarioSpec) -> tuple[dict[str, Any], str, bool]:
        if isinstance(spec, dict):
            try:
                return copy.deepcopy(spec), "inline scenario", True
            except RecursionError:
                raise ConfigError(f"inline scenario: {UNREADABLE}") from None
        if spec in builtin_names() or families.is_family(spec):  # generated: no file opened
            raw, where = load_raw(spec)
            return raw, where, True
        path = self._file(spec)
        return _parse(path), f"scenario file {path.name!r}", False

    def _file(self, name: str) -> Path:
        """The file `name` inside the directory, or the same refusal whatever else it is."""
        if self.directory is not None and name.endswith(SUFFIXES) and name.isprintable():
            root = self.directory.resolve()
            if lexically_inside(root / name, [root]):  # as text first: no system call outside
                try:
                    path = (root / name).resolve()
                    if path.is_relative_to(root) and path.is_file():
                        return path
                except OSError:  # a loop of links, say: not a scenario file
                    pass
        where = " or a file in the scenario directory" if self.directory else ""
        raise ScenarioNotFoundError(
            f"scenario {name[:80]!r} is not a built-in name{where}; "
            f"built-in scenarios: {', '.join(builtin_names())}"
        )


def _parse(path: Path) -> dict[str, Any]:
    """The mapping in a scenario file; errors say where, never what the file holds."""
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"scenario file {path.name!r} is over {MAX_FILE_BYTES} bytes")
    raw = parse_text(data, f"scenario file {path.name!r}", as_json=path.suffix == ".json",
                     quote=False)  # fmt: skip
    if not isinstance(raw, dict):
        raise ConfigError(f"scenario file {path.name!r} does not hold a mapping")
    return raw
