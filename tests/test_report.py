"""`report.html`: one offline page per run with the figures a user looks at, checked as text and
in a real headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser import chromium, new_page
from tests.conftest import twin_command

KINDS = ("run", "replay", "session")
SECTIONS = {
    "run": ["GPUs held and busy per pool", "Queued jobs per tenant", "Spend per tenant",
            "Job completion time and queueing delay", "Tenants"],
    "replay": ["Replay: simulated against observed", "KS distance"],
    "session": ["Negotiation, round by round", "difference reward"],
}  # fmt: skip


def page_of(run: Path) -> str:
    return (run / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", KINDS)
def test_the_report_is_one_self_contained_file(runs: dict[str, Path], kind: str) -> None:
    page = page_of(runs[kind])
    assert "<script" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "nothing loads from outside"
    assert "default-src 'none'" in page  # and the browser is told so
    assert page.count("<figure><svg") >= 4
    for title in SECTIONS["run"]:
        assert title in page


@pytest.mark.parametrize("kind", ["replay", "session"])
def test_the_report_has_the_run_kind_s_own_section(runs: dict[str, Path], kind: str) -> None:
    page = page_of(runs[kind])
    for title in SECTIONS[kind]:
        assert title in page
    other = "session" if kind == "replay" else "replay"
    assert SECTIONS[other][0] not in page


def test_the_replay_report_states_the_ks_distance_of_replay_json(runs: dict[str, Path]) -> None:
    import json

    ks = json.loads((runs["replay"] / "replay.json").read_text())["queueing_delay"]["ks_distance"]
    assert f"KS distance {ks:.3f}" in page_of(runs["replay"])


def test_the_same_log_draws_the_same_report(runs: dict[str, Path], tmp_path: Path) -> None:
    result = twin_command("report", str(runs["session"]), "--out", str(tmp_path / "again.html"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "again.html").read_bytes() == (runs["session"] / "report.html").read_bytes()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_report_opens_offline_in_chromium(runs: dict[str, Path], kind: str) -> None:
    url = (runs[kind] / "report.html").as_uri()
    async with chromium() as (browser, watched):
        page = await new_page(browser, watched)
        await page.goto(url)
        figures = await page.locator("figure svg").count()
        widths = await page.locator("figure svg").evaluate_all(
            "nodes => nodes.map(n => n.getBoundingClientRect().width)"
        )
        shot = runs[kind] / "report.png"
        await page.screenshot(path=str(shot), full_page=True)
    assert watched.problems == []
    assert watched.requests == [url], "the page asks for nothing but itself"
    assert figures >= 4
    assert all(w > 300 for w in widths), "every figure is drawn at a readable size"
    assert shot.stat().st_size > 10_000
