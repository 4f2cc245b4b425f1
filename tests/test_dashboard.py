"""The gateway's live dashboard: pages that hold no data, an event stream and a report behind
the same tokens as the rest of the API, and a session page that follows a running session in a
real headless Chromium.

A real aiohttp server on loopback, real websocket agents, Debian's chromium.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from tests.browser import chromium, new_page
from tests.conftest import twin_command
from tests.test_gateway import ADMIN, MARKET, Client, MakeClient, new_session, serve
from twin_agents.client import AgentClient
from twin_agents.factory import make_policy

LIVE = {"scenario": "market", "clock": "realtime", "speed": 2400.0}  # 4 virtual h in 6 s


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def ended(client: Client, session: dict[str, Any]) -> None:
    url = f"/v1/sessions/{session['session_id']}"
    while (await (await client.get(url)).json())["ended"] is None:
        await asyncio.sleep(0.05)


# -- pages and access ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/sessions/anything"])
async def test_pages_hold_no_data_and_forbid_outside_content(
    aiohttp_client: MakeClient, path: str
) -> None:
    client = await serve(aiohttp_client)
    await new_session(client, scenario=MARKET)
    resp = await client.get(path, headers={"Authorization": ""})
    assert resp.status == 200
    assert resp.content_type == "text/html"
    policy = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    page = await resp.text()
    assert "market" not in page  # no session data without a token


@pytest.mark.parametrize(
    "name", ["../app.py", "..%2Fapp.py", "index.html", "dashboard.js.map", "%2e%2e/keys.py"]
)
async def test_only_the_dashboard_s_own_assets_are_served(
    aiohttp_client: MakeClient, name: str
) -> None:
    client = await serve(aiohttp_client)
    assert (await client.get(f"/static/{name}")).status == 404
    assert (await client.get("/static/dashboard.js")).status == 200


async def test_the_event_stream_and_report_need_a_token_that_reads_the_session(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=MARKET)
    sid = session["session_id"]
    for path in (f"/v1/sessions/{sid}/events?follow=1", f"/v1/sessions/{sid}/report"):
        for headers in (bearer("not-the-right-token-at-all"), {"Authorization": ""}):
            resp = await client.get(path, headers=headers)
            assert resp.status == 401, path
            assert (await resp.json())["code"] == "UNAUTHORIZED"


async def test_the_stream_sends_the_whole_log_and_ends_with_the_session(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=MARKET)
    sid = session["session_id"]
    reader = bearer(session["read_token"])
    resp = await client.get(f"/v1/sessions/{sid}/events?follow=1", headers=reader)
    assert resp.status == 200
    streamed = await resp.read()  # returns once the session has ended
    whole = await (await client.get(f"/v1/sessions/{sid}/events", headers=reader)).read()
    assert streamed == whole
    kinds = [orjson.loads(line)["kind"] for line in streamed.splitlines()]
    assert kinds[0] == "episode_started"
    assert kinds[-1] == "episode_ended"


async def test_streams_count_against_the_client_s_connection_limit(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, max_connections_per_client=2)
    session = await new_session(client, scenario=LIVE["scenario"], clock="realtime", speed=60.0)
    url = f"/v1/sessions/{session['session_id']}/events?follow=1"
    held = [await client.get(url) for _ in range(2)]
    refused = await client.get(url)
    assert refused.status == 503
    assert (await refused.json())["code"] == "CAPACITY_REACHED"
    for resp in held:
        resp.close()
    await asyncio.sleep(0.2)
    again = await client.get(url)
    assert again.status == 200
    again.close()


async def test_the_report_of_an_ended_session_is_drawn_once(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=MARKET)
    await ended(client, session)
    url = f"/v1/sessions/{session['session_id']}/report"
    first = await client.get(url, headers=bearer(session["read_token"]))
    assert first.status == 200
    assert first.content_type == "text/html"
    page = await first.read()
    assert b"<figure><svg" in page
    assert await (await client.get(url)).read() == page
    policy = first.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "script-src" not in policy  # the report runs no script
    assert first.headers["Server"] == "cluster-twin"  # no versions to look up exploits by


# -- in Chromium ------------------------------------------------------------------------------


async def test_the_dashboard_follows_a_live_session_in_chromium(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, agents=["research", "inference"], **LIVE)
    sid = session["session_id"]
    base = str(client.make_url("/")).rstrip("/")
    ws_url = base.replace("http://", "ws://") + "/v1/agents"
    tenants = ["research", "inference", "batch"]
    agents = [
        AgentClient(ws_url, sid, t, session["tokens"][t], make_policy("negotiator", tenants, t))
        for t in ("research", "inference")
    ]
    async with chromium() as (browser, watched):
        page = await new_page(browser, watched)
        await page.goto(f"{base}/#token={ADMIN}")
        await page.locator(f"#sessions a:text('{sid}')").click()
        await page.wait_for_url(f"{base}/sessions/{sid}")
        running = asyncio.gather(*(a.run() for a in agents))
        clocks = []
        while not running.done():
            if await page.text_content("#state") == "live":
                clocks.append(await page.text_content("#clock"))
            await asyncio.sleep(0.25)
        stats = running.result()
        await page.locator("#open-report").wait_for(state="visible", timeout=10_000)
        state = await page.text_content("#state")
        trades = await page.locator("#trades tbody tr").count()
        async with page.context.expect_page() as opened:
            await page.click("#open-report")
        report = await opened.value
        await report.wait_for_load_state()
        report_title = await report.title()
        figures = await report.locator("figure svg").count()
    seen = sorted(set(clocks))
    assert len(seen) >= 3, f"the page should move while the session runs: {seen}"
    assert state == "ended: horizon"
    assert trades == sum(s.trades_applied for s in stats) // 2 > 0  # each party counts a trade
    assert report_title == "cluster twin · market · seed 0"
    assert figures >= 4
    assert watched.problems == []
    app_origin = base + "/"
    outside = [u for u in watched.requests if not u.startswith((app_origin, "blob:" + base))]
    assert outside == [], "the dashboard asks nothing of anyone but the gateway"
    assert not any(ADMIN in u for u in watched.requests), "the token never travels in a URL"


# -- exports beside the gateway's logs --------------------------------------------------------


async def test_an_ended_session_s_log_is_exported_and_reported_beside_it(
    aiohttp_client: MakeClient, tmp_path: Path
) -> None:
    client = await serve(aiohttp_client, log_dir=str(tmp_path), export=["parquet", "perfetto"],
                         report=True)  # fmt: skip
    session = await new_session(client, scenario=MARKET)
    await ended(client, session)
    folder = tmp_path / session["session_id"]
    for _ in range(100):  # written off the event loop just after the session ends
        if (folder / "report.html").exists():
            break
        await asyncio.sleep(0.05)
    log = (tmp_path / f"{session['session_id']}.jsonl").read_bytes()
    arrived = sum(b'"kind":"job_arrived"' in line for line in log.splitlines())
    [(rows,)] = duckdb.sql(
        f"select count(*) from '{folder}/parquet/job_arrived.parquet'"
    ).fetchall()
    assert rows == arrived > 0
    assert (folder / "timeline.perfetto.json").stat().st_size > 0
    assert "<figure><svg" in (folder / "report.html").read_text()


def test_serve_refuses_exports_without_a_log_dir() -> None:
    result = twin_command("serve", "--export", "parquet")
    assert result.returncode == 2
    assert "give --log-dir" in result.stderr
