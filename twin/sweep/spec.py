"""What a sweep runs: the grid (or a random sample of it) over scenarios, seeds, policies and
scenario overrides, each run keyed by its inputs so an interrupted sweep can resume."""

from __future__ import annotations

import hashlib
import itertools
import random
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import Field, NonNegativeInt, PositiveInt, ValidationError

from twin.errors import ConfigError
from twin.schema.base import Frozen
from twin.text_files import read_text

Value = str | int | float | bool | None


def _own_policies() -> list[str | None]:
    return [None]  # each tenant's own


class SweepSpec(Frozen):
    """A sweep as a YAML file or flags give it."""

    scenarios: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    seeds: PositiveInt | list[NonNegativeInt] = 1
    policies: list[str | None] = Field(default_factory=_own_policies, min_length=1)
    set: dict[str, list[Value]] = Field(
        default_factory=dict, description="A scenario path and the values it takes."
    )
    sample: PositiveInt | None = Field(None, description="Run this many points of the grid.")
    sample_seed: int = 0

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


class Run(Frozen):
    """One run's inputs; its key is a digest of them."""

    scenario: str
    seed: int
    policy: str | None
    overrides: dict[str, Value]

    @property
    def key(self) -> str:
        canonical = orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()[:16]

    @property
    def assignments(self) -> list[str]:
        """The overrides as `path=value` for the scenario loader (values as YAML scalars)."""
        return [f"{path}={_scalar(v)}" for path, v in sorted(self.overrides.items())]


def _scalar(value: Value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def runs(spec: SweepSpec) -> list[Run]:
    """Every run of the grid (or the sample), in a fixed order."""
    paths = sorted(spec.set)
    grid = [
        Run(scenario=scenario, seed=seed, policy=policy, overrides=dict(zip(paths, values,
                                                                            strict=True)))
        for scenario, policy, values, seed in itertools.product(
            spec.scenarios, spec.policies, itertools.product(*(spec.set[p] for p in paths)),
            spec.seed_list,
        )
    ]  # fmt: skip
    if spec.sample is not None and spec.sample < len(grid):
        grid = random.Random(spec.sample_seed).sample(grid, spec.sample)
    return grid


def check_points(planned: list[Run]) -> None:
    """Load every point's scenario with its overrides once: a bad scenario or override fails
    now, not in a worker (ConfigError)."""
    from twin.sim import scenarios

    for scenario, assignments in {(r.scenario, tuple(r.assignments)) for r in planned}:
        scenarios.load(scenario, assignments)


def load_spec(path: Path) -> SweepSpec:
    """A sweep file; ConfigError names the file and what is wrong."""
    from twin.sim.scenarios import parse_text

    raw = parse_text(read_text(path), str(path), as_json=False, quote=True)
    return validated(raw, str(path))


def validated(raw: Any, where: str) -> SweepSpec:
    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError.first_of(exc, f"{where}: field ", "sweep") from None


def parse_set(flags: list[str]) -> dict[str, list[Value]]:
    """`--set PATH=V1,V2` flags -> {PATH: [V1, V2]} (values read as YAML scalars)."""
    out: dict[str, list[Value]] = {}
    for flag in flags:
        path, sep, values = flag.partition("=")
        if not sep or not path or not values:
            raise ConfigError(f"--set {flag!r}: expected PATH=VALUE[,VALUE...]")
        out[path] = [yaml.safe_load(v) for v in values.split(",")]
    return out
