"""`twin arena`: agent line-ups over seeds as real gateway sessions, ranked with bootstrap
confidence intervals against a paired baseline, and merged across runs.

The leaderboard is checked against what it summarises: each session's own summary (kept with
`--keep-logs`) and a bootstrap computed independently, by SciPy.
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.stats

from tests.browser import chromium, new_page
from tests.conftest import twin_command
from twin.arena.page import FIGURES, MIRROR, NEGOTIATION, OUTCOME, shared

AGENTS = ["negotiator", "fair_share", "stepper"]
TENANTS = ["research", "inference", "batch"]
SEEDS = 8


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("arena") / "market"
    result = twin_command("arena", "--scenario", "market", "--agents", ",".join(AGENTS),
                          "--seeds", str(SEEDS), "--out", str(out), "--keep-logs",
                          "--workers", "2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return out


def board(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(out / "leaderboard.parquet").to_pylist()
    return rows


def outcomes(out: Path) -> list[dict[str, Any]]:
    """The leaderboard but for answer times (wall-clock, so never twice the same)."""
    return [{k: v for k, v in r.items() if not k.startswith("answer_ms")} for r in board(out)]


def summaries(out: Path) -> dict[str, dict[str, Any]]:
    """Each session's own summary, as its gateway session wrote it."""
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "logs").glob("*/summary.json")}


def test_every_agent_plays_every_tenant_on_every_seed_against_one_baseline(arena: Path) -> None:
    con = duckdb.connect()
    sessions = str(arena / "sessions.parquet")
    plays = con.execute(f"SELECT agent, tenant, count(DISTINCT seed), count(*) FROM "
                        f"'{sessions}' WHERE kind = 'session' AND trading "
                        "GROUP BY ALL").fetchall()  # fmt: skip
    assert sorted((a, t) for a, t, _, _ in plays) == sorted((a, t) for a in AGENTS for t in TENANTS)
    assert {(seeds, n) for _, _, seeds, n in plays} == {(SEEDS, SEEDS)}
    baselines = con.execute(f"SELECT count(DISTINCT key), count(DISTINCT seed) FROM '{sessions}' "
                        "WHERE kind = 'baseline-session'").fetchone()  # fmt: skip
    assert baselines == (SEEDS, SEEDS), "one baseline per seed, paired with every rotation"
    untraded = con.execute(f"SELECT count(DISTINCT key) FROM '{sessions}' WHERE kind = 'session' "
                           "AND NOT trading").fetchone()  # fmt: skip
    assert untraded == (SEEDS * len(AGENTS),), "each rotation (a negotiator in each) again"
    assert len(summaries(arena)) == SEEDS * (2 * len(AGENTS) + 1)


def test_the_leaderboard_s_returns_are_the_sessions_summaries(arena: Path) -> None:
    told = summaries(arena)
    runs = {p.stem: json.loads(p.read_text()) for p in (arena / "runs").glob("*.json")}
    returns: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    gains: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    base = {r["seed"]: told[k] for k, r in runs.items() if r["kind"] == "baseline-session"}
    for key, run in runs.items():
        if run["kind"] != "session" or not run["trading"]:
            continue
        mine = {t["name"]: t["reward_usd"] for t in told[key]["tenants"]}
        theirs = {t["name"]: t["reward_usd"] for t in base[run["seed"]]["tenants"]}
        for t in run["tenants"]:
            returns[(t["agent"], t["tenant"])][run["seed"]] = mine[t["tenant"]]
            gains[(t["agent"], t["tenant"])][run["seed"]] = mine[t["tenant"]] - theirs[t["tenant"]]
    rows = board(arena)
    assert len(rows) == len(AGENTS) * (1 + len(TENANTS))
    for row in rows:
        if row["role"] == "all":
            per_seed = [statistics.fmean(returns[(row["agent"], t)][s] for t in TENANTS)
                        for s in range(SEEDS)]  # fmt: skip
        else:
            per_seed = [returns[(row["agent"], row["role"])][s] for s in range(SEEDS)]
        assert row["return_usd"] == pytest.approx(statistics.fmean(per_seed), rel=1e-12)
        if row["role"] != "all":
            by_seed = gains[(row["agent"], row["role"])]
            assert row["gain_usd"] == pytest.approx(statistics.fmean(by_seed.values()), rel=1e-12)


def test_the_difference_reward_is_the_log_s_credit_in_gpus(arena: Path) -> None:
    """One unit everywhere: the sessions table's difference reward is the sum of the kernel's
    credits (`round_credited.difference_reward`, useful GPUs) in the session's kept log."""
    checked = 0
    for path in (arena / "runs").glob("*.json"):
        log = arena / "logs" / path.stem / "events.jsonl"
        if not log.is_file():  # the bound's row: no session was played
            continue
        events = [json.loads(line) for line in log.read_text().splitlines()]
        for t in json.loads(path.read_text())["tenants"]:
            if "difference_reward_gpus" in t:
                credited = sum(
                    e["difference_reward"]
                    for e in events
                    if e["kind"] == "round_credited" and e["tenant"] == t["tenant"]
                )
                assert t["difference_reward_gpus"] == pytest.approx(credited, rel=1e-9, abs=1e-9)
                checked += 1
    assert checked > 0


def test_the_intervals_are_a_percentile_bootstrap_over_seeds(arena: Path) -> None:
    sessions = pq.read_table(arena / "sessions.parquet").to_pylist()
    for row in board(arena):
        cells = [c for c in sessions if c["agent"] == row["agent"] and c["trading"]
                 and (row["role"] == "all" or c["tenant"] == row["role"])]  # fmt: skip
        for field in ("return_usd", "gain_usd"):
            per_seed = np.array([statistics.fmean(c[field] for c in cells if c["seed"] == s)
                                 for s in range(SEEDS)])  # fmt: skip
            ci = scipy.stats.bootstrap((per_seed,), np.mean, n_resamples=9_999,
                                       method="percentile", rng=np.random.default_rng(0),
                                       confidence_level=0.95).confidence_interval  # fmt: skip
            low, high = row[field.replace("_usd", "_lo_usd")], row[field.replace("_usd", "_hi_usd")]
            assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-9)
            assert low <= row[field] <= high


def test_the_ranking_is_by_gain_and_welfare_is_per_session(arena: Path) -> None:
    rows = [r for r in board(arena) if r["role"] == "all"]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert [r["gain_usd"] for r in rows] == sorted((r["gain_usd"] for r in rows), reverse=True)
    sessions = pq.read_table(arena / "sessions.parquet").to_pylist()
    for c in sessions:
        assert 1 / len(TENANTS) - 1e-12 <= c["jain_delay"] <= 1 + 1e-12
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in sessions:
        by_key[c["key"]].append(c)
    for cells in by_key.values():
        if cells[0]["kind"] != "session":
            continue
        gains = [c["gain_usd"] for c in cells]
        dominates = all(g >= -1e-9 for g in gains) and any(g > 1e-9 for g in gains)
        assert {c["pareto_dominates"] for c in cells} == {dominates}
        assert cells[0]["welfare_gain_usd"] == pytest.approx(sum(gains))


def test_the_manifest_says_what_ran(arena: Path) -> None:
    manifest = json.loads((arena / "arena.json").read_text())
    assert manifest["seeds"] == list(range(SEEDS))
    assert [a["name"] for a in manifest["agents"]] == AGENTS
    (scenario,) = manifest["scenarios"]
    assert scenario["name"] == "market"
    assert len(scenario["sha256"]) == 64
    assert scenario["own_policies"] == ["autoscale"] * 3
    assert manifest["bootstrap"]["resamples"] == 9_999
    assert manifest["twin_versions"]


async def test_the_page_opens_in_chromium_with_no_console_errors(arena: Path) -> None:
    url = (arena / "leaderboard.html").as_uri()
    async with chromium() as (browser, watched):
        page = await new_page(browser, watched)
        await page.goto(url)
        figures = await page.locator("figure svg").count()
        text = await page.locator("body").inner_text()
    assert watched.problems == []
    assert watched.requests == [url], "the page asks for nothing but itself"
    ranked = [r for r in board(arena) if r["role"] == "all"]
    zero = [t for t, f, _ in FIGURES if all(not r[f] for r in ranked)]
    assert figures == len(FIGURES) - len(zero), "a figure per measure, no empty axes"
    if zero:
        assert f"zero for every agent: {'; '.join(zero)}" in text
    for agent in AGENTS:
        assert agent in text
    assert "autoscale" in text, "the page says what the baseline played"
    glossary = text[text.index("What the measures mean") : text.index("What ran")]
    for head, _, _ in (*OUTCOME, *MIRROR, *NEGOTIATION):
        if head not in ("#", "agent", "role"):
            assert head.split()[0] in glossary, f"the glossary does not say what {head} is"


def test_a_stopped_arena_resumes_where_it_stopped(tmp_path: Path) -> None:
    out = tmp_path / "resume"
    argv = ("arena", "--agents", "negotiator,stepper", "--seeds", "2", "--out", str(out))
    assert twin_command(*argv).returncode == 0
    first = outcomes(out)
    runs = sorted((out / "runs").glob("*.json"))
    # Per seed: its bound, its baseline, two rotations, each again with trading off.
    assert len(runs) == 2 * 6
    runs[0].unlink()
    again = twin_command(*argv)
    assert again.returncode == 0, again.stderr
    assert "(1 now, 11 done before)" in " ".join(again.stdout.split())
    assert outcomes(out) == first
    more = twin_command("arena", "--agents", "negotiator,stepper", "--seeds", "3",
                        "--out", str(out))  # fmt: skip
    assert more.returncode == 0, more.stderr
    assert "(6 now, 12 done before)" in " ".join(more.stdout.split())
    other = twin_command("arena", "--agents", "greedy,stepper", "--seeds", "2", "--out", str(out))
    assert other.returncode != 0
    assert "holds another arena (its agents differ)" in other.stderr
    assert "Traceback" not in other.stderr
    runs[1].write_text("{not json")
    broken = twin_command(*argv)
    assert broken.returncode != 0
    assert f"{runs[1]}: unexpected character" in broken.stderr
    assert "delete it to play that session again" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_two_arenas_on_the_same_seeds_merge_into_one_leaderboard(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert twin_command("arena", "--agents", "negotiator,stepper", "--seeds", "2",
                        "--out", str(a)).returncode == 0  # fmt: skip
    assert twin_command("arena", "--agents", "fair_share,greedy", "--seeds", "2",
                        "--out", str(b)).returncode == 0  # fmt: skip
    merged = twin_command("arena", "merge", str(a), str(b), "--out", str(tmp_path / "ab"))
    assert merged.returncode == 0, merged.stderr
    rows = board(tmp_path / "ab")
    ranked = {r["agent"]: r for r in rows if r["role"] == "all"}
    assert set(ranked) == {"negotiator", "stepper", "fair_share", "greedy"}
    assert sorted(r["rank"] for r in ranked.values()) == [1, 2, 3, 4]
    for name, source in (("negotiator", a), ("greedy", b)):
        alone = next(r for r in board(source) if r["agent"] == name and r["role"] == "all")
        assert ranked[name]["return_usd"] == alone["return_usd"]
    # Different seeds: refused, saying so.
    assert twin_command("arena", "--agents", "greedy,random", "--seeds", "3",
                        "--out", str(c)).returncode == 0  # fmt: skip
    refused = twin_command("arena", "merge", str(a), str(c), "--out", str(tmp_path / "ac"))
    assert refused.returncode != 0
    assert "cannot merge: the seeds differ" in refused.stderr
    assert "Traceback" not in refused.stderr
    # A baseline that does not agree (another twin played it): refused.
    baseline = next((b / "runs").glob("*.s0.baseline.json"))
    row = json.loads(baseline.read_text())
    row["tenants"][0]["return_usd"] += 1.0
    baseline.write_text(json.dumps(row))
    refused = twin_command("arena", "merge", str(a), str(b), "--out", str(tmp_path / "ab2"))
    assert "cannot merge: the baselines of market seed 0 differ" in refused.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--agents", "negotiator,wizard"], "--agents: unknown agent 'wizard'"),
        (["--agents", "negotiator,negotiator"], "--agents: name each agent once"),
        (["--agents", "negotiator", "--seeds", "3-1"], "--seeds: '3-1' names no seeds"),
        (["--agents", "negotiator", "--seeds", "x"], "--seeds: 'x' is not N, A-B or a list"),
        (["--agents", "negotiator", "--llm", "smol"], "--llm: 'smol' is not NAME=BASE_URL"),
        (["--agents", "negotiator", "--scenario", "nowhere"], "nowhere"),
        (["--agents", "smol", "--llm", "smol=ftp://x,m"], "is not an http(s) URL"),
        (["--agents", "negotiator"], "twin arena needs --agents and --out"),
    ],
)
def test_bad_arguments_are_named_without_a_traceback(argv: list[str], message: str,
                                                     tmp_path: Path) -> None:  # fmt: skip
    out = ["--out", str(tmp_path / "x")] if "needs" not in message else []
    result = twin_command("arena", *argv, *out)
    assert result.returncode != 0
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_a_prompt_file_must_name_only_what_a_prompt_may(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You are {tenant}; your budget is {budget}.")
    smol = f"smol=http://127.0.0.1:9/v1,m,{prompt}"
    result = twin_command("arena", "--agents", "smol", "--llm", smol, "--out", str(tmp_path / "x"))
    assert result.returncode != 0
    assert "it names {budget}; a prompt may name only {tenant} and {others}" in result.stderr
    shutil.rmtree(tmp_path / "x", ignore_errors=True)


def test_jain_s_index_is_one_for_equal_delays_and_one_over_n_for_one_who_waits() -> None:
    from twin.arena.sessions import jain

    assert jain([5.0, 5.0, 5.0]) == 1.0
    assert jain([9.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain([0.0, 0.0]) == 1.0
    assert jain([]) is None


def test_a_local_ray_plays_the_same_arena_as_the_local_pool(tmp_path: Path) -> None:
    argv = ("arena", "--agents", "negotiator,greedy", "--seeds", "2", "--workers", "2")
    pool = twin_command(*argv, "--out", str(tmp_path / "pool"))
    ray = twin_command(*argv, "--engine", "ray", "--out", str(tmp_path / "ray"))
    assert pool.returncode == 0, pool.stderr
    assert ray.returncode == 0, ray.stderr
    assert "12 sessions (12 now, 0 done before)" in " ".join(ray.stdout.split())
    assert outcomes(tmp_path / "ray") == outcomes(tmp_path / "pool")


def test_an_arena_spans_a_synthetic_and_a_real_trace_scenario(tmp_path: Path) -> None:
    from twin.sim import scenarios

    day = scenarios.as_cluster(scenarios.load("openb-tenants", [
        "trace.start_h=3552", "trace.end_h=3576"])).model_dump(mode="json")  # fmt: skip
    day["horizon_s"] = 4 * day["decisions"]["interval_s"] + 1
    for where in ("here", "there"):
        (tmp_path / where).mkdir()
        (tmp_path / where / "openb-day.json").write_text(json.dumps(day))
    out = tmp_path / "both"
    both = f"market,{tmp_path / 'here' / 'openb-day.json'}"
    result = twin_command("arena", "--scenario", both, "--agents", "negotiator,greedy",
                          "--seeds", "1", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    ranked = {(r["scenario"], r["agent"]) for r in board(out) if r["role"] == "all"}
    assert ranked == {(s, a) for s in ("market", "openb-tenants") for a in ("negotiator", "greedy")}
    roles = {r["role"] for r in board(out) if r["scenario"] == "openb-tenants"}
    assert roles == {"all", "ls", "be", "burstable", "other"}
    from twin.arena.lineup import scenario_entry

    here = scenario_entry(str(tmp_path / "here" / "openb-day.json"))
    there = scenario_entry(str(tmp_path / "there" / "openb-day.json"))
    assert here.sha256 == there.sha256, "a scenario hashes by its content, not where it lies"
    manifest = json.loads((out / "arena.json").read_text())
    assert here.sha256 in {s["sha256"] for s in manifest["scenarios"]}


def test_an_llm_agent_whose_endpoint_is_down_falls_back_at_once(tmp_path: Path) -> None:
    # Port 9 (discard) refuses the connection: every ask falls back, and no round waits.
    out = tmp_path / "down"
    down = "down=http://127.0.0.1:9/v1,m"
    result = twin_command("arena", "--agents", "down,negotiator", "--llm", down, "--seeds", "1",
                          "--no-preflight",
                          "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = [r for r in board(out) if r["agent"] == "down" and r["role"] == "all"]
    assert row["valid_first_share"] == 0.0
    assert row["fallbacks"] > 0
    walls = [c["wall_s"] for c in pq.read_table(out / "sessions.parquet").to_pylist()]
    assert max(walls) < 10, "a dead endpoint is found dead once, not waited on every round"


@pytest.fixture(scope="module")
def regimes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mirror and cross play on `market-scarce`, the built-in with gains from trade."""
    out = tmp_path_factory.mktemp("regimes") / "scarce"
    result = twin_command("arena", "--scenario", "market-scarce", "--agents",
                          "negotiator,fair_share", "--regime", "mirror,cross", "--seeds", "8",
                          "--out", str(out), "--workers", "2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "mirror (every tenant one agent)" in result.stdout
    return out


def test_mirror_play_by_the_negotiator_gains_over_the_baseline_and_from_trade(
    regimes: Path,
) -> None:
    mirror = {r["agent"]: r for r in pq.read_table(regimes / "mirror.parquet").to_pylist()}
    negotiator, fair_share = mirror["negotiator"], mirror["fair_share"]
    assert negotiator["seeds"] == 8
    assert negotiator["welfare_gain_lo_usd"] > 0, "the 95% interval is above zero"
    assert negotiator["trade_welfare_gain_usd"] > 0
    assert negotiator["pareto_share"] > 0
    assert 0 < negotiator["score"] <= 1
    assert negotiator["distance_usd"] > 0, "no agent reaches the bound"
    assert negotiator["trades"]
    assert not fair_share["trades"], "an agent that cannot trade is marked"
    assert fair_share["trade_welfare_gain_usd"] == 0.0
    shares = json.loads(negotiator["surplus_shares"])
    assert set(shares) == {"research", "inference", "batch"}


def test_the_score_is_the_welfare_gain_over_the_room_to_the_bound(regimes: Path) -> None:
    from twin.bound.run import bound_seed
    from twin.sim import scenarios

    cells = pq.read_table(regimes / "sessions.parquet").to_pylist()
    mirrored = [c for c in cells if c["kind"] == "session" and c["trading"] and c["seed"] == 0
                and c["regimes"] == "mirror" and c["agent"] == "negotiator"]  # fmt: skip
    base = next(c for c in cells if c["kind"] == "baseline-session" and c["seed"] == 0)
    bound = bound_seed(scenarios.as_cluster(scenarios.load("market-scarce")), 0).bound_usd
    cell = mirrored[0]
    assert cell["bound_usd"] == pytest.approx(bound, rel=1e-9)
    room = bound - base["total_return_usd"]
    assert cell["score"] == pytest.approx(cell["welfare_gain_usd"] / room)
    assert cell["distance_usd"] == pytest.approx(bound - cell["total_return_usd"])
    assert cell["total_return_usd"] <= bound


def test_cross_play_fills_the_matrix_and_counts_offers_made_to_non_traders(regimes: Path) -> None:
    crossed = pq.read_table(regimes / "cross.parquet").to_pylist()
    assert {(r["agent"], r["against"]) for r in crossed} == {
        ("negotiator", "fair_share"), ("fair_share", "negotiator")}  # fmt: skip
    assert all(r["seeds"] == 8 and r["gain_lo_usd"] <= r["gain_usd"] <= r["gain_hi_usd"]
               for r in crossed)  # fmt: skip
    cells = pq.read_table(regimes / "sessions.parquet").to_pylist()
    lone = [c for c in cells if c["regimes"] == "cross" and c["agent"] == "negotiator"
            and c["trading"]]  # fmt: skip
    assert sum(c["offers_to_nontraders"] for c in lone) > 0


async def test_the_mirror_and_cross_tables_open_in_chromium(regimes: Path) -> None:
    url = (regimes / "leaderboard.html").as_uri()
    async with chromium() as (browser, watched):
        page = await new_page(browser, watched)
        await page.goto(url)
        text = await page.locator("body").inner_text()
    assert watched.problems == []
    assert "mirror, every tenant one agent" in text
    assert "cross-play" in text
    assert "score" in text


def test_mechanisms_are_compared_in_one_run(tmp_path: Path) -> None:
    out = tmp_path / "mechanisms"
    result = twin_command("arena", "--scenario", "market-scarce", "--agents", "negotiator",
                          "--regime", "mirror", "--mechanism", "proportional,auction",
                          "--seeds", "2", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    mirror = pq.read_table(out / "mirror.parquet").to_pylist()
    assert {r["mechanism"] for r in mirror} == {"proportional", "auction"}
    assert "market-scarce (auction)" in result.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--regime", "spiral"], "--regime: unknown 'spiral'; allowed: rotation, mirror, cross"),
        (["--mechanism", "haggle"], "--mechanism: unknown 'haggle'; allowed: proportional"),
        (["--regime", "cross"], "--regime cross needs at least two agents"),
    ],
)
def test_an_unknown_regime_or_mechanism_is_one_line(argv: list[str], message: str,
                                                     tmp_path: Path) -> None:  # fmt: skip
    result = twin_command("arena", "--agents", "negotiator", *argv, "--out", str(tmp_path / "x"))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_planner_oracle_plays_the_bound_s_holdings_over_the_gateway(tmp_path: Path) -> None:
    out = tmp_path / "planner"
    result = twin_command("arena", "--scenario", "market-scarce", "--agents", "planner",
                          "--regime", "mirror", "--seeds", "2", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    (planner,) = pq.read_table(out / "mirror.parquet").to_pylist()
    assert not planner["trades"], "the oracle never trades"
    assert planner["score"] > 0
    assert planner["distance_usd"] > 0, "even the planner does not reach the bound"
    cells = pq.read_table(out / "sessions.parquet").to_pylist()
    assert {c["agent"] for c in cells if c["kind"] == "session"} == {"planner"}
    assert not [c for c in cells if c["kind"] == "session" and not c["trading"]]


def test_a_log_hears_from_the_arena_every_so_often_even_while_no_session_finishes() -> None:
    """The documented line every 10 s (here every 0.1 s): a long session (an LLM's, say) is no
    reason for the log to fall silent."""
    import time

    from twin.arena.run import Ticker

    said: list[str] = []
    with Ticker(said.append, total=4, every_s=0.1) as tick:
        tick(0, 2)  # the first line
        time.sleep(0.45)  # nothing finishes meanwhile
    assert said[0].startswith("arena: 0 of 4 sessions done, 2 running")
    assert 3 <= len(said) <= 6, said
    assert all(line.startswith("arena: 0 of 4 sessions done, 2 running") for line in said)


def test_a_session_wide_measure_alike_on_every_row_is_shown_once() -> None:
    rows = [{"agent": "a", "welfare_usd": 10.0, "pareto_share": 0.5, "gain_usd": 1.0},
            {"agent": "b", "welfare_usd": 12.0, "pareto_share": 0.5, "gain_usd": 2.0}]  # fmt: skip
    columns = (("welfare $", "welfare_usd", 0), ("Pareto", "pareto_share", 2),
               ("gain $", "gain_usd", 0))  # fmt: skip
    assert shared(rows, columns) == {"Pareto": "0.50"}  # welfare differs; a gain is the agent's


def test_the_page_is_the_same_bytes_drawn_twice(arena: Path) -> None:
    from twin.arena import board as boards
    from twin.arena import store
    from twin.arena.page import render

    rows = list(store.rows(arena))
    manifest = store.read_manifest(arena)
    assert manifest is not None
    ranked, mirrored, crossed = boards.leaderboard(rows), boards.mirror(rows), boards.cross(rows)
    alone = render(ranked, manifest, mirrored, crossed)
    assert render(ranked, manifest, mirrored, crossed) == alone
    assert alone.count("<svg") >= 2


def test_a_ranking_chart_puts_each_dot_at_its_value_between_its_whiskers() -> None:
    import xml.etree.ElementTree as ET

    from twin.arena.chart import nice_ticks, ranking_svg

    svg = ranking_svg("gain <$>", ["a&b", "c"], [10.0, -4.0], [(2.0, 30.0), (-9.0, 1.0)])
    root = ET.fromstring(svg)  # well-formed: the names and the title are escaped
    ns = "{http://www.w3.org/2000/svg}"
    dots = [float(c.get("cx", "nan")) for c in root.iter(f"{ns}circle")]
    assert dots[0] > dots[1], "the larger value sits further right"
    whiskers = [line for line in root.iter(f"{ns}line") if line.get("y1") == line.get("y2")
                and line.get("stroke") != "#333"]  # fmt: skip
    for dot, line in zip(dots, whiskers, strict=True):
        assert float(line.get("x1", "nan")) < dot < float(line.get("x2", "nan"))
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert texts[0] == "gain <$>"
    assert "a&b" in texts
    assert nice_ticks(-9.0, 30.0) == [-10.0, 0.0, 10.0, 20.0, 30.0]
    bars = ET.fromstring(ranking_svg("trades", ["a", "b"], [3.0, 1.0]))
    widths = [float(r.get("width", "nan")) for r in bars.iter(f"{ns}rect")]
    assert widths[0] == pytest.approx(3 * widths[1], rel=0.02), "bars from zero, to scale"


def test_the_closing_line_names_every_file_written_and_no_table_is_written_empty(
    tmp_path: Path,
) -> None:
    """A mirror-only arena ranks no rotation: no empty leaderboard.parquet, and its last line
    names the page and each table it did write."""
    out = tmp_path / "mirror"
    result = twin_command("arena", "--scenario", "market-scarce", "--agents", "negotiator",
                          "--regime", "mirror", "--seeds", "1", "--out", str(out),
                          "--workers", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last == f"wrote {out / 'leaderboard.html'}, sessions.parquet and mirror.parquet"
    assert not (out / "leaderboard.parquet").exists()
    assert {p.name for p in out.glob("*.parquet")} == {"sessions.parquet", "mirror.parquet"}
