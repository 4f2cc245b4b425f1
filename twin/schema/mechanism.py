"""A mechanism's name where input names one (a session request, a config): validated against
the mechanisms registered when it is read, and listed in its JSON Schema."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from twin.schema.vocabulary import MECHANISM_TRAITS, Mechanism


def _registered(name: str) -> str:
    if name not in MECHANISM_TRAITS:
        raise ValueError(f"unknown mechanism {name!r}; mechanisms: {', '.join(MECHANISM_TRAITS)}")
    return name


def _listed(schema: dict[str, Any]) -> None:
    schema["enum"] = list(MECHANISM_TRAITS)


RegisteredMechanism = Annotated[
    Mechanism, AfterValidator(_registered), Field(json_schema_extra=_listed)
]
