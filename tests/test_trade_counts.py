"""Every count of trades a user reads (twin play's table, agents.json, the report's round table)
agrees with the event log, under every mechanism: offers applied as trades, and call-market
fills, which are trades too (held GPUs changing hands at the clearing price)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from twin.cli.main import main
from twin.eventlog.rounds import RoundTable
from twin.schema.vocabulary import mechanism_names

AGENTS = "research=negotiator,inference=negotiator,batch=negotiator"


def _from_the_log(events: list[dict[str, Any]]) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Per tenant: applied trades it was party to, call-market fills, GPUs bought there."""
    parties = {e["offer_id"]: (e["tenant"], e["to_tenant"]) for e in events
               if e["kind"] == "offer_made"}  # fmt: skip
    trades, fills, bought = Counter[str](), Counter[str](), Counter[str]()
    for e in events:
        if e["kind"] == "trade_settled" and e["applied"]:
            trades.update(parties[e["offer_id"]])
        if e["kind"] == "market_cleared":
            for tenant, gpus in e["fills"].items():
                fills[tenant] += gpus != 0
                bought[tenant] += max(gpus, 0)
    return trades, fills, bought


@pytest.mark.parametrize("mechanism", mechanism_names())
def test_trade_counts_agree_with_the_log_under_every_mechanism(
    mechanism: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / mechanism
    assert main(["play", "--scenario", "market-scarce", "--agents", AGENTS, "--seed", "1",
                 "--mechanism", mechanism, "--out", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    trades, fills, bought = _from_the_log(events)
    agents = json.loads((out / "agents.json").read_text())["agents"]
    rows: list[dict[str, Any]] = []
    table = RoundTable(rows.append)
    for e in events:
        table.take(e)
    for tenant, report in agents.items():
        assert report["trades_applied"] == trades[tenant], tenant
        assert report["market_fills"] == fills[tenant], tenant
        assert report["market_gpus_in"] == bought[tenant], tenant
        mine = [r for r in rows if r["tenant"] == tenant]
        assert sum(r["trades"] for r in mine) == trades[tenant], tenant
        assert sum(r["market_fills"] for r in mine) == fills[tenant], tenant
    if mechanism == "call_market":  # the case that was counted as no trades at all
        assert sum(fills.values()) > 0
        assert "market fills" in printed
