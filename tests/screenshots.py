"""The README's screenshots, made as a user would see the pages: `python -m tests.screenshots DIR`
writes DIR/report.png (the report of a played session) and DIR/dashboard.png (the dashboard
half-way through a live session of negotiating agents), with Debian's chromium."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

from aiohttp import web

from tests.browser import chromium, new_page
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import CONFIG, REGISTRY
from twin_agents.client import AgentClient
from twin_agents.factory import make_policy

TENANTS = ["research", "inference", "batch"]


async def report_shot(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "twin", "play", "--agents",
             "research=negotiator,inference=negotiator,batch=fair_share", "--out", tmp,
             "--report"],
            check=True, capture_output=True,
        )  # fmt: skip
        async with chromium() as (browser, watched):
            page = await new_page(browser, watched)
            await page.goto((Path(tmp) / "report.html").as_uri())
            await page.screenshot(path=str(target), full_page=True)


async def dashboard_shot(target: Path) -> None:
    app = create_app(GatewayConfig())
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    session = app[REGISTRY].create(
        SessionRequest(scenario="market", clock="realtime", speed=1200.0,
                       agents=["research", "inference"])
    )  # fmt: skip
    agents = [
        AgentClient(f"ws://{host}:{port}/v1/agents", session.id, t, session.tokens[t],
                    make_policy("negotiator", TENANTS, t))
        for t in ("research", "inference")
    ]  # fmt: skip
    async with chromium() as (browser, watched):
        page = await new_page(browser, watched)
        await page.goto(f"{base}/sessions/{session.id}#token={app[CONFIG].admin_token}")
        running = asyncio.gather(*(a.run() for a in agents))
        while session.driver.now_s < 3.2 * 3600:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)
        await page.screenshot(path=str(target), full_page=True)
        await running
    await runner.cleanup()


async def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    await report_shot(folder / "report.png")
    await dashboard_shot(folder / "dashboard.png")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")))
