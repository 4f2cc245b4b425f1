"""The frame of the project's self-contained pages (a run's report, an arena's leaderboard):
inline styles, no script, nothing loaded."""

from __future__ import annotations

import html
import string
from importlib import resources


def page(heading: str, title: str, body: str, footer: str, width: str = "980px") -> str:
    """A self-contained page (inline styles, no script, nothing loaded) around `body`; `title`,
    `body` and `footer` are HTML already escaped."""
    template = string.Template(
        resources.files("twin.eventlog").joinpath("report.html").read_text(encoding="utf-8")
    )
    return template.substitute(heading=html.escape(heading), title=title, body=body,
                               footer=footer, width=width)  # fmt: skip
