"""What a tenant is told is what it gets: every round's reward plus the final settlement (what
accrued after its last round: the books closed, SLA penalties on jobs still waiting) is its
return in the summary, to the cent, whatever the scenario, seed, mechanism or policies; in
process, over the gateway's websockets and in `twin play`'s report."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import twin_command
from tests.rounds import commit
from twin.eventlog.log import EventLog, from_dict
from twin.eventlog.metrics import Metrics
from twin.schema.vocabulary import AGENTS_FILE, EVENTS_FILE, SUMMARY_FILE, mechanism_names
from twin.sim import scenarios
from twin.sim.driver import Driver

NEGOTIABLE = ("default", "market")  # the built-in scenarios whose tenants hear rewards


def told_and_returns(
    name: str, seed: int, mechanism: str, policy: str | None
) -> tuple[dict[str, float], dict[str, float], dict[str, float], Driver[Any, Any]]:
    """Play a scenario round by round; per tenant the rewards its rounds and its settlement
    told it (from the log), the return the settlement named, and the summary's return."""
    log = EventLog("returns", keep=True)
    driver: Driver[Any, Any] = Driver(scenarios.load(name), seed=seed, log=log)
    defaults = driver.default_policies(policy)
    while driver.advance() is not None:
        commit(driver, {}, defaults, mechanism=mechanism)
    told: dict[str, float] = defaultdict(float)
    settled: dict[str, float] = {}
    metrics = Metrics()
    records = list(driver.log.dicts())
    metrics.consume([from_dict(r) for r in records])
    for r in records:
        if r["kind"] in ("round_credited", "episode_settled"):
            told[r["tenant"]] += r["reward_usd"]
        if r["kind"] == "episode_settled":
            settled[r["tenant"]] = r["total_reward_usd"]
    summary = {t.name: t.reward_usd for t in metrics.summary().tenants}
    return dict(told), settled, summary, driver


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(NEGOTIABLE),
    seed=st.integers(0, 10_000),
    mechanism=st.sampled_from(mechanism_names()),
    policy=st.sampled_from([None, "autoscale", "static"]),
)
def test_rounds_and_settlement_add_up_to_the_summary_s_return(
    name: str, seed: int, mechanism: str, policy: str | None
) -> None:
    told, settled, summary, driver = told_and_returns(name, seed, mechanism, policy)
    assert set(settled) == set(summary) == set(driver.tenants)
    for tenant, total in summary.items():
        assert round(told[tenant], 2) == round(total, 2), tenant
        assert round(settled[tenant], 2) == round(total, 2), tenant
        final, whole = driver.settlement(tenant)
        assert round(whole, 2) == round(total, 2)
        assert driver.settle_reward(tenant) == final  # the same figure however often asked


def test_penalties_that_land_at_the_end_are_told_in_the_settlement() -> None:
    *_, driver = told_and_returns("market", 0, "proportional", None)
    records = list(driver.log.dicts())
    settlements = [r for r in records if r["kind"] == "episode_settled"]
    assert records[-1]["kind"] == "episode_ended"
    assert [r["kind"] for r in records[-len(settlements) - 1 : -1]] == ["episode_settled"] * 3
    assert any(r["sla_usd"] > 0 for r in settlements)  # jobs still waiting at the horizon
    for r in settlements:
        parts = r["value_usd"] + r["traded_usd"] - r["spent_usd"] - r["sla_usd"]
        assert abs(parts - r["reward_usd"]) < 1e-9


def test_twin_play_reports_the_return_each_agent_heard_beside_the_summary_s(
    tmp_path: Path,
) -> None:
    result = twin_command("play", "--scenario", "market", "--mechanism", "auction", "--agents",
                          "research=negotiator,inference=negotiator,batch=fair_share",
                          "--out", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    agents = json.loads((tmp_path / AGENTS_FILE).read_text())["agents"]
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    returns = {t["name"]: t["reward_usd"] for t in summary["tenants"]}
    events = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    finals = {e["tenant"]: e["reward_usd"] for e in events if e["kind"] == "episode_settled"}
    for tenant, report in agents.items():
        assert report["end_reason"] == "horizon"
        assert round(report["reward_heard_usd"], 2) == round(returns[tenant], 2), tenant
        assert report["reward_usd"] == returns[tenant]
        assert report["final_reward"] == finals[tenant]  # the session_ended message's figure
