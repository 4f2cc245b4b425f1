"""Typed columns for the event tables, derived from the event models.

Every table starts with `t_s`, `session` and `tenant`, then the kind's own fields in schema
order. Numbers, strings and flags keep their types; a list of strings stays a list where the
format can hold one (Parquet) and a mapping (an action, a trade bundle, a scenario) is JSON text.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from functools import cache
from operator import itemgetter
from typing import Any, Literal, Union, get_args, get_origin

import orjson
import pyarrow as pa
from pydantic import BaseModel

from twin.schema.events import EVENT_FIELDS, EVENT_MODELS

COMMON: tuple[tuple[str, pa.DataType], ...] = (
    ("t_s", pa.float64()),
    ("session", pa.string()),
    ("tenant", pa.string()),
)


JSON = {b"json": b"1"}  # field metadata: the values are stored as JSON text


def _arrow(annotation: Any, *, nested: bool) -> pa.Field | pa.DataType:
    """The Arrow type of one field (None in a union only makes it nullable); a mapping, or a
    list where `nested` is off, is JSON text."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return _arrow(members[0], nested=nested) if len(members) == 1 else pa.string()
    if origin is Literal:
        return pa.string()
    if origin is list and nested:
        return pa.list_(_arrow(get_args(annotation)[0], nested=nested))
    simple = {float: pa.float64(), int: pa.int64(), str: pa.string(), bool: pa.bool_()}
    return simple.get(annotation, pa.field("", pa.string(), metadata=JSON))


def field(name: str, annotation: Any, *, nested: bool = True) -> pa.Field:
    """The column for a field named `name` of type `annotation`."""
    typed = _arrow(annotation, nested=nested)
    if isinstance(typed, pa.Field):
        return typed.with_name(name)
    return pa.field(name, typed)


def _model(kind: str) -> type[BaseModel]:
    return next(m for m in EVENT_MODELS if m.model_fields["kind"].default == kind)


@cache
def required_fields(kind: str) -> tuple[str, ...]:
    """The payload fields every record of `kind` must carry (the others have defaults)."""
    fields = _model(kind).model_fields
    return tuple(name for name in EVENT_FIELDS[kind] if fields[name].is_required())


@cache
def event_schema(kind: str, *, nested: bool = True) -> pa.Schema:
    """The table schema of one event kind (`nested=False`: lists as JSON text, for CSV)."""
    model = _model(kind)
    fields = [pa.field(name, kind_type) for name, kind_type in COMMON]
    fields += [
        field(n, model.model_fields[n].annotation, nested=nested) for n in EVENT_FIELDS[kind]
    ]
    return pa.schema(fields)


def _jsonable(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot serialise {type(value).__name__} in an event table")


def json_text(value: object) -> str | None:
    """A mapping or list as compact JSON text (None stays None)."""
    return None if value is None else orjson.dumps(value, default=_jsonable).decode()


class Columns:
    """Rows (mappings from column name to value) gathered until taken as a record batch."""

    __slots__ = ("_getter", "rows", "schema")

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows: list[Mapping[str, Any]] = []
        self._getter = itemgetter(*schema.names)

    def take(self) -> pa.RecordBatch:
        """The rows so far as a record batch; the rows start empty again. Every row has every
        column (events as `parse_events` yields them)."""
        rows, self.rows = self.rows, []
        columns = zip(*map(self._getter, rows), strict=True) if rows else [()] * len(self.schema)
        arrays = []
        for f, values in zip(self.schema, columns, strict=True):
            column = tuple(map(json_text, values)) if f.metadata == JSON else values
            arrays.append(pa.array(column, type=f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
