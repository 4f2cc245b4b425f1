"""The built-in scenarios shipped with the twin (`builtin/*.yaml`): their names, and a listing
read without validating them, which is fast enough for `twin scenarios`. Loading and
validating a scenario is `twin.sim.scenarios`."""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable

import yaml

BUILTIN: Traversable = resources.files("twin.sim") / "builtin"


def builtin_names() -> list[str]:
    """Names of the scenarios shipped with the twin."""
    return sorted(
        p.name.removesuffix(".yaml") for p in BUILTIN.iterdir() if p.name.endswith(".yaml")
    )


def listing() -> list[tuple[str, str, str]]:
    """(name, kind, description) of each built-in scenario, as its file states them."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = []
    for name in builtin_names():
        raw = yaml.load((BUILTIN / f"{name}.yaml").read_text(), Loader=loader)
        out.append(
            (name, str(raw.get("kind", "cluster")), " ".join(str(raw["description"]).split()))
        )
    return out
