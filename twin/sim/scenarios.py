"""Scenarios by name (shipped YAML files) or from a YAML / JSON file, with overrides."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import TypeAdapter, ValidationError

from twin.errors import ConfigError, ScenarioNotFoundError
from twin.schema.distributions import Distribution
from twin.schema.scenario import ArrivalProcess, ClusterScenario, GpuClusterScenario, Scenario
from twin.sim import families, kinds
from twin.sim.catalog import BUILTIN, builtin_names
from twin.text_files import read_text

SCENARIO_ADAPTER: TypeAdapter[Scenario] = TypeAdapter(Scenario)


def load_raw(name_or_path: str) -> tuple[dict[str, Any], str]:
    """The scenario's raw mapping and where it came from (a built-in's name, a family member's
    `family:NAME/SEED`, or a file)."""
    if families.is_family(name_or_path):
        return families.member(name_or_path), f"scenario {name_or_path!r}"
    if name_or_path in builtin_names():
        text = (BUILTIN / f"{name_or_path}.yaml").read_text()
        where = f"built-in scenario {name_or_path!r}"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ScenarioNotFoundError(
                f"no scenario named {name_or_path!r} and no such file; "
                f"built-in scenarios: {', '.join(builtin_names())}"
            )
        where = str(path)
        text = read_text(path, where)
    raw = parse_text(text, where, as_json=where.endswith(".json"), quote=True)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a scenario must be a mapping, got {type(raw).__name__}")
    return raw, where


UNREADABLE = "the value is nested too deep or holds a number too long to read"


def parse_text(text: str | bytes, where: str, *, as_json: bool, quote: bool) -> Any:
    """The value in a YAML or JSON text; ConfigError says where it is not readable (and, with
    `quote`, why in the parser's words)."""
    try:
        if as_json:
            return json.loads(text)
        return copy.deepcopy(_yaml(text)) if len(text) <= CACHED_CHARS else _yaml.__wrapped__(text)
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}{_at(exc)}: not valid {'JSON' if as_json else 'YAML'}"
                          f"{_why(exc) if quote else ''}") from None  # fmt: skip
    except (RecursionError, ValueError):
        raise ConfigError(f"{where}: {UNREADABLE}") from None


def _at(exc: Exception) -> str:
    """Where in the text a parser stopped, as `, line L, column C` (1-based), if it says."""
    if isinstance(exc, json.JSONDecodeError):
        return f", line {exc.lineno}, column {exc.colno}"
    mark = getattr(exc, "problem_mark", None)
    return "" if mark is None else f", line {mark.line + 1}, column {mark.column + 1}"


def _why(exc: Exception) -> str:
    """The parser's own words for the problem, in one line (without its position)."""
    if isinstance(exc, json.JSONDecodeError):
        return f": {exc.msg}"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f": {problem}" + (f" ({context})" if context else "")


CACHED_CHARS = 64 * 1024  # scenario files are a few KB; a big text is parsed, not kept


@functools.lru_cache(maxsize=64)
def _yaml(text: str | bytes) -> Any:
    """A YAML text's value, parsed once (callers get a copy: they may change theirs), by
    libyaml where PyYAML was built with it (the same values, ~8x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def override(raw: dict[str, Any], assignment: str) -> None:
    """Apply `a.b.0.c=value` to a raw scenario; value is JSON when it parses, else a string."""
    key, sep, text = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {assignment!r} must look like path.to.field=value")
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        value = text
    except (RecursionError, ValueError):  # nested past the recursion limit; 4,300+ digits
        raise ConfigError(f"override {key[:80]!r}: {UNREADABLE}") from None
    node: Any = raw
    parts = key.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"override {key!r}: {part!r} is not an index of a {len(node)}-item list"
                )
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ConfigError(f"override {key!r}: {'.'.join(parts[:i])!r} is not a mapping or list")


def validate(raw: dict[str, Any], where: str, *, quote: bool = True) -> Scenario:
    """The validated scenario; the error names the first bad field and what it allows (and,
    with `quote`, the value given)."""
    try:
        return SCENARIO_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {describe(exc, quote=quote)}") from None


def describe(exc: ValidationError, *, quote: bool = True) -> str:
    """One line per problem: the field path, what is wrong, and (with `quote`) the value given."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p))
        if err["type"] in ("union_tag_not_found", "union_tag_invalid"):
            lines.append(_which_member(loc, err))
            continue
        given = err.get("input")
        shown = "" if not quote or isinstance(given, dict | list) else f" (got {given!r})"
        lines.append(f"field {loc or '<root>'}: {err['msg']}{shown}")
    return "; ".join(lines)


def _which_member(loc: str, err: Any) -> str:
    """A union's tag missing or unknown, in the domain's words: the field that names the
    member (a scenario's `kind`, a distribution's `dist`, an arrival process's `process`), the
    values it takes and, if given, what it got."""
    field = str(err["ctx"]["discriminator"]).strip("'")
    where = f"{loc}.{field}" if loc else field
    allowed = ", ".join(sorted(TAGS_BY_FIELD.get(field, ())))
    what = {"kind": "a scenario", "dist": "a distribution", "process": "an arrival process"}
    said = f"{what.get(field, 'it')} names its {field}, one of: {allowed}"
    if err["type"] == "union_tag_not_found":
        return f"field {where}: missing; {said}"
    return f"field {where}: {err['ctx']['tag']!r} is not one; {said}"


def _union_tags(*unions: Any) -> frozenset[str]:
    """The tags of discriminated unions (each member's discriminator value)."""
    tags = set()
    for union in unions:
        members, field = get_args(union)
        for member in get_args(members):
            tags.add(str(member.model_fields[field.discriminator].default))
    return frozenset(tags)


UNION_TAGS = _union_tags(Scenario, Distribution, ArrivalProcess)
"""Where a validation error's location names the union member it tried (not a field)."""
TAGS_BY_FIELD = {
    get_args(union)[1].discriminator: _union_tags(union)
    for union in (Scenario, Distribution, ArrivalProcess)
}
"""The values each union's naming field takes (`kind`, `dist`, `process`)."""


def _is_union_tag(part: object) -> bool:
    return part in UNION_TAGS


def load(name_or_path: str, overrides: Sequence[str] = ()) -> Scenario:
    """A validated scenario by built-in name or file path, with `path=value` overrides."""
    raw, where = load_raw(name_or_path)
    for assignment in overrides:
        override(raw, assignment)
    return validate(raw, where)


def load_cluster(name_or_path: str) -> ClusterScenario:
    """A job-level (cluster) scenario, the kind negotiation sessions run on."""
    return as_cluster(load(name_or_path))


def as_cluster(scenario: Scenario) -> ClusterScenario:
    """`scenario` if it is a job-level one; else a ConfigError saying what it is."""
    cluster = kinds.negotiable(scenario)
    if cluster is None:
        raise ConfigError(
            f"negotiation sessions need a cluster scenario; {scenario.name!r} is a "
            f"{scenario.kind} task (use the OpenEnv control plane at /ws for it)"
        )
    return cluster


def load_task(task: str) -> GpuClusterScenario:
    """A classic GPUClusterEnv task (`easy`, `medium`, `hard`) as its built-in scenario."""
    scenario = kinds.step_task(load(f"gpucluster-{task}"))
    assert scenario is not None, "gpucluster-* are step-model scenarios"
    return scenario
