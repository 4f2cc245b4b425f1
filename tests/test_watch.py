"""`twin watch`: the twin following a running cluster through the files a cron job writes (the
captures of a real Slurm 22.05 shipped in traces/samples/slurm-22.05, written into a folder
one by one as a cron job would), re-forecasting at each change, scoring each forecast when its
job starts, and serving its page (in Debian's headless Chromium) and JSON on loopback. The
watch of a live Slurm is in tests/test_slurm_real.py."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.browser import chromium, new_page
from tests.conftest import twin_command
from twin.watch.server import serve
from twin.watch.sources import KubernetesCommands, SlurmFiles
from twin.watch.watch import FORECASTS_FILE, SCORE_FILE, Settings, Watcher

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "traces" / "samples" / "slurm-22.05"
CAPTURES = ["itp-cluster10-0004", "itp-cluster10-0007"]  # one driven run, 24 s apart
QUICK = Settings(samples=20, horizon_s=3600.0, step_s=600.0)


def cron_writes(folder: Path, capture: str) -> None:
    """As a cron job writes squeue --json and sinfo --json: the files replaced, dated when
    they were taken."""
    folder.mkdir(exist_ok=True)
    taken = float((SHIPPED / capture / "taken.txt").read_text())
    for name in ("squeue.json", "sinfo.json"):
        shutil.copyfile(SHIPPED / capture / name, folder / name)
        os.utime(folder / name, (taken, taken))


def test_each_change_is_forecast_once_and_recorded(tmp_path: Path) -> None:
    cron, out = tmp_path / "cron", tmp_path / "out"
    cron_writes(cron, CAPTURES[0])
    shutil.copyfile(SHIPPED / "config.txt", cron / "config.txt")
    watcher = Watcher(SlurmFiles(cron), QUICK, out)
    assert watcher.poll()
    assert not watcher.poll()  # nothing changed: not forecast again
    cron_writes(cron, CAPTURES[1])
    assert watcher.poll()
    assert watcher.captures == 2
    assert sorted(p.name for p in out.iterdir()) == ["0000", "0001", "config.txt",
                                                     FORECASTS_FILE, SCORE_FILE]  # fmt: skip
    lines = (out / FORECASTS_FILE).read_text().splitlines()
    assert [json.loads(line)["capture"] for line in lines] == ["0000", "0001"]
    view = watcher.view
    assert view["waiting"] == len(view["jobs"]) > 0
    assert all(j["estimate_s"] is not None for j in view["jobs"])  # Slurm's own, beside ours
    assert view["at_s"] is not None
    assert view["taken_s"] == float((SHIPPED / CAPTURES[1] / "taken.txt").read_text())


def test_a_watch_kept_where_an_earlier_one_was_records_after_its_captures(
    tmp_path: Path,
) -> None:
    cron, out = tmp_path / "cron", tmp_path / "out"
    cron_writes(cron, CAPTURES[0])
    assert Watcher(SlurmFiles(cron), QUICK, out).poll()
    first = (out / "0000" / "squeue.json").read_bytes()
    cron_writes(cron, CAPTURES[1])
    assert Watcher(SlurmFiles(cron), QUICK, out).poll()
    assert (out / "0000" / "squeue.json").read_bytes() == first  # kept, not written over
    assert (out / "0001" / "squeue.json").read_bytes() == (cron / "squeue.json").read_bytes()
    assert len((out / FORECASTS_FILE).read_text().splitlines()) == 2


def test_forecasts_are_scored_when_a_later_capture_shows_their_jobs_started(
    tmp_path: Path,
) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    watcher = Watcher(SlurmFiles(cron), QUICK)
    watcher.poll()
    waiting = {j["job_id"] for j in watcher.view["jobs"]}
    assert watcher.view["score"]["pairs"] == 0
    cron_writes(cron, CAPTURES[1])
    watcher.poll()
    started_since = waiting - {j["job_id"] for j in watcher.view["jobs"]}
    assert started_since
    assert watcher.view["score"]["pairs"] == len(started_since)
    assert watcher.view["open_pairs"] == len(watcher.view["jobs"]) + len(waiting & {
        j["job_id"] for j in watcher.view["jobs"]})  # fmt: skip
    watcher.close()


def test_a_recorded_watch_played_again_gives_the_same_forecasts_and_score(
    tmp_path: Path,
) -> None:
    cron, out = tmp_path / "cron", tmp_path / "out"
    cron.mkdir()
    watcher = Watcher(SlurmFiles(cron), QUICK, out)
    for capture in CAPTURES:
        cron_writes(cron, capture)
        watcher.poll()
    again = twin_command("watch", "--replay", str(out), "--samples", "20", "--horizon-h", "1",
                         "--json")  # fmt: skip
    assert again.returncode == 0, again.stderr
    view = json.loads(again.stdout)["view"]
    assert view["score"] == watcher.view["score"]
    assert view["jobs"] == watcher.view["jobs"]


def test_a_capture_that_fails_is_said_and_the_watch_goes_on(tmp_path: Path) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    watcher = Watcher(SlurmFiles(cron), QUICK)
    (cron / "sinfo.json").unlink()
    assert not watcher.poll()
    assert watcher.view["errors"] == [f"--slurm-dir: no sinfo.json in {cron}"]
    (cron / "squeue.json").write_text('{"jobs": [{"job_id": 1}]')  # cut short mid-write
    shutil.copyfile(SHIPPED / CAPTURES[0] / "sinfo.json", cron / "sinfo.json")
    assert not watcher.poll()
    assert watcher.view["errors"][-1].startswith("capture 0000: ")
    assert "squeue.json" in watcher.view["errors"][-1]
    cron_writes(cron, CAPTURES[0])
    assert watcher.poll()
    assert watcher.captures == 1
    watcher.close()


def test_a_what_if_is_forecast_beside_each_forecast(tmp_path: Path) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    plain = Watcher(SlurmFiles(cron), QUICK)
    plain.poll()
    more = Watcher(SlurmFiles(cron), Settings(samples=20, horizon_s=3600.0, step_s=600.0,
                                              what_if=("pools.h100.nodes=+2",)))  # fmt: skip
    more.poll()
    assert [j["start_p50_s"] for j in more.view["jobs"]] == [
        j["start_p50_s"] for j in plain.view["jobs"]]  # fmt: skip
    earlier = [j["what_if_p50_s"] <= j["start_p50_s"] for j in more.view["jobs"]]  # type: ignore[operator]
    assert all(earlier)
    assert sum(j["what_if_p50_s"] < j["start_p50_s"] for j in more.view["jobs"]) > 0  # type: ignore[operator]
    refused = twin_command("watch", "--slurm-dir", str(cron), "--set", "pools.a100.nodes=+1",
                           "--polls", "1", "--port", "0")  # fmt: skip
    assert refused.returncode == 2
    assert "no pool 'a100'" in refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout


def test_kubectl_is_run_at_each_poll(tmp_path: Path) -> None:
    """No Kubernetes can run here: a stand-in `kubectl` prints the shipped export (pods and
    nodes from one cluster) for `get pods` and `get nodes`, as kubectl would."""
    export = json.loads((ROOT / "traces" / "samples" / "kubernetes_pods_nodes.json").read_text())
    for kind in ("Pod", "Node"):
        part = {**export, "items": [i for i in export["items"] if i["kind"] == kind]}
        (tmp_path / f"{kind.lower()}s.json").write_text(json.dumps(part))
    stand_in = tmp_path / "kubectl"
    stand_in.write_text(f'#!/bin/sh\ncat "{tmp_path}/$2.json"\n')
    stand_in.chmod(0o755)
    watcher = Watcher(KubernetesCommands(kubectl=(str(stand_in),)), QUICK)
    assert watcher.poll()
    assert watcher.view["running"] > 0
    assert watcher.view["waiting"] == len(watcher.view["jobs"])
    stand_in.write_text("#!/bin/sh\necho 'error: You must be logged in' >&2\nexit 1\n")
    assert not watcher.poll()
    assert "exited 1: error: You must be logged in" in watcher.view["errors"][-1]
    watcher.close()


def test_serving_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    refused = twin_command("watch", "--slurm-dir", str(cron), "--host", "0.0.0.0")
    assert refused.returncode == 2
    assert "needs --token-file" in refused.stderr
    (tmp_path / "short").write_text("abc\n")
    short = twin_command("watch", "--slurm-dir", str(cron), "--token-file",
                         str(tmp_path / "short"))  # fmt: skip
    assert short.returncode == 2
    assert "under 16 characters" in short.stderr
    for bad in (["--slurm", "--slurm-dir", str(cron)], []):
        both = twin_command("watch", *bad)
        assert both.returncode == 2
        assert "give one cluster" in both.stderr


async def _served(watcher: Watcher, token: str | None) -> tuple[asyncio.Task[None], str,
                                                                asyncio.Event]:  # fmt: skip
    said: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(serve(watcher, host="127.0.0.1", port=0, interval_s=0.5,
                                     token=token, say=said.append, stop=stop))  # fmt: skip
    while not said or watcher.captures == 0:
        await asyncio.sleep(0.05)
    return task, said[0].split("serving ")[1].split(" ")[0], stop


async def test_the_page_and_json_need_the_token_and_change_nothing(tmp_path: Path) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    token = "t" * 32
    task, url, stop = await _served(Watcher(SlurmFiles(cron), QUICK), token)
    async with aiohttp.ClientSession() as http:
        for path in ("", "watch.json", "watch.css"):
            async with http.get(url + path) as r:
                assert r.status == 401
                assert (await r.json())["code"] == "UNAUTHORIZED"
        bearer = {"Authorization": f"Bearer {token}"}
        async with http.get(url + "watch.json", headers=bearer) as r:
            assert r.status == 200
            assert (await r.json())["waiting"] > 0
        async with http.get(url + f"?token={token}") as r:
            assert r.status == 200
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
            page = await r.text()
        for link in re.findall(r'(?:href)="/([^"]+)"', page):  # its own links carry the token
            async with http.get(url + html.unescape(link)) as r:
                assert r.status == 200, link
        for method, path in (("POST", ""), ("DELETE", "watch.json"), ("GET", "nothing")):
            async with http.request(method, url + path, headers=bearer) as r:
                assert r.status == 404
                assert (await r.json())["code"] == "NOT_FOUND"
    stop.set()
    await task


async def test_the_page_shows_each_waiting_job_the_fan_chart_and_the_score_in_chromium(
    tmp_path: Path,
) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    watcher = Watcher(SlurmFiles(cron), Settings(samples=20, horizon_s=3600.0, step_s=600.0,
                                                 what_if=("pools.h100.nodes=+1",)))  # fmt: skip
    task, url, stop = await _served(watcher, None)
    cron_writes(cron, CAPTURES[1])
    while watcher.captures < 2:
        await asyncio.sleep(0.05)
    async with chromium() as (browser, watched):
        page = await new_page(browser, watched)
        await page.goto(url)
        rows = await page.locator("#jobs tr.job").count()
        assert rows == len(watcher.view["jobs"]) > 0
        first = await page.locator("#jobs tr.job").first.inner_text()
        assert watcher.view["jobs"][0]["job_id"] in first
        assert await page.locator("#fan polygon.band").count() == 1
        assert await page.locator("#fan polyline.median").count() == 1
        caption = await page.locator("#score caption").inner_text()
        assert f"{watcher.view['score']['pairs']} pairs" in caption
        assert "with pools.h100.nodes=+1" in await page.locator("#jobs").inner_text()
        assert watched.problems == []
        assert all(r.startswith(url) for r in watched.requests)
    stop.set()
    await task
    watcher.close()


def test_ctrl_c_stops_a_watch_with_its_score(tmp_path: Path) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    proc = subprocess.Popen([sys.executable, "-m", "twin", "watch", "--slurm-dir", str(cron),
                             "--port", "0", "--interval-s", "0.5", "--samples", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("twin watch: serving http://127.0.0.1:")
    assert proc.stdout.readline().startswith("capture 1: ")
    proc.send_signal(2)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "1 captures, 0 forecasts scored" in out


def test_a_port_already_taken_is_refused_in_one_line(tmp_path: Path) -> None:
    cron = tmp_path / "cron"
    cron_writes(cron, CAPTURES[0])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = twin_command("watch", "--slurm-dir", str(cron), "--port", str(port))
    assert result.returncode == 2
    assert f"--port {port}: cannot serve there" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--slurm-dir", "--kubernetes-dir", "--replay"])
def test_a_folder_that_is_not_there_is_refused_in_one_line(tmp_path: Path, flag: str) -> None:
    result = twin_command("watch", flag, str(tmp_path / "nowhere"), "--polls", "1")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
