"""A real headless Chromium (Debian's `chromium`, driven by Playwright) that records every
console message, page error and request of the pages it opens."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from playwright.async_api import Browser, Page, async_playwright

# As the browser runs here: no sandbox as root, and none of the background traffic to Google's
# services that a closed network refuses.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path is not None, "the tests need Debian's chromium (make test installs it)"
    return path


@dataclass
class Watched:
    """What the pages of a browser said and asked for."""

    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> Page:
        page.on("console", lambda m: self.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))
        return page

    @property
    def problems(self) -> list[str]:
        """Page errors and console errors or warnings."""
        noisy = [f"{kind}: {text}" for kind, text in self.console if kind in {"error", "warning"}]
        return self.errors + noisy


@asynccontextmanager
async def chromium() -> AsyncIterator[tuple[Browser, Watched]]:
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path(), args=ARGS)
        watched = Watched()
        try:
            yield browser, watched
        finally:
            await browser.close()


async def new_page(browser: Browser, watched: Watched) -> Page:
    page = await browser.new_page(viewport={"width": 1100, "height": 900})
    page.context.on("page", watched.watch)  # pages it opens (a report in a new tab)
    return watched.watch(page)
