"""The source of `records.py`, rendered from the event models: one named tuple per event kind.

The event models (`events.py`) are the one definition of every event; the named tuples are
what the sim builds on its hot path and what readers read by field name. `python -m
twin.schema.record_source` rewrites `records.py`; a test fails when it has drifted.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Literal, get_origin

from twin.schema import vocabulary
from twin.schema.base import Event
from twin.schema.events import EVENT_DEFAULTS, EVENT_FIELDS, EVENT_MODELS

SHIPPED = Path(__file__).with_name("records.py")
SHADOWS = "  # type: ignore[assignment]  # a tuple method's name"

HEADER = '''"""Typed event records: one named tuple per event kind, in the order of the log's tuples
(kind, t_s, tenant, then the payload as `events.py` declares it).

Generated from the event models by `python -m twin.schema.record_source`; do not edit. A record
is still a tuple (cheap to build on the hot path, encoded as before); read it by field name.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from twin.schema.vocabulary import {vocabulary}
'''


def _annotations(model: type[Event]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for cls in reversed(model.__mro__):
        merged.update(getattr(cls, "__annotations__", {}))
    return merged


def _class_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def _record(model: type[Event]) -> tuple[str, str]:
    kind = str(model.model_fields["kind"].default)
    annotations = _annotations(model)
    defaults = EVENT_DEFAULTS[kind]
    lines = [f"class {_class_name(kind)}(NamedTuple):"]
    doc = (model.__doc__ or "").strip().splitlines()
    if doc and model.__doc__ != Event.__doc__:
        lines.append(f'    """{doc[0].strip()}{" ..." if len(doc) > 1 else ""}"""')
        lines.append("")
    lines += [f'    kind: Literal["{kind}"]', "    t_s: float", "    tenant: str | None"]
    for name in EVENT_FIELDS[kind]:
        annotation = re.sub(r"'([^']*)'", r'"\1"', str(annotations[name]))
        if annotation == "dict[str, Any]":
            annotation = "Any"  # the sim may hold the schema model the log writes as this JSON
        default = f" = {_literal(defaults[name])}" if name in defaults else ""
        shadows = SHADOWS if hasattr(tuple, name) else ""
        lines.append(f"    {name}: {annotation}{default}{shadows}")
    return kind, "\n".join(lines)


def _literal(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _vocabulary_type(value: object) -> bool:
    """A name the vocabulary gives a type: a closed `Literal`, or an alias (`Mechanism`)."""
    return get_origin(value) is Literal or isinstance(value, type)


def render() -> str:
    """The text of `records.py`."""
    records = [_record(m) for m in EVENT_MODELS]
    body = "\n\n\n".join(text for _, text in records)
    names = "\n".join(f'    "{kind}": {_class_name(kind)},' for kind, _ in records)
    union = "\n".join(f"    | {_class_name(kind)}" for kind, _ in records)
    used = sorted({word for word in re.findall(r"\b[A-Z]\w+\b", body)
                   if _vocabulary_type(getattr(vocabulary, word, None))})  # fmt: skip
    return (
        f"{HEADER.format(vocabulary=', '.join(used))}\n\n{body}\n\n\n"
        f"AnyRecord = (\n{union.replace('    | ', '    ', 1)}\n)\n\n"
        f"RECORDS: dict[str, type[AnyRecord]] = {{\n{names}\n}}\n"
        '"""The record type of each event kind."""\n'
    )


def main() -> int:
    SHIPPED.write_text(render())
    print(f"wrote {SHIPPED}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
