"""What if openb's tenants could burst to a cloud pool, or negotiate? One table, means over seeds.

Plays the built-in `openb-tenants` (the whole openb trace on its calibrated nodes, tenants by
QoS class, beside a cloud pool of 32 A100s) three ways, each over the same seeds, through the
twin's Python API (`twin.api`):

- no cloud, no trades: every tenant passive (`api.run(..., policy="static")`), the replay;
- a cloud pool: every tenant autoscales into it (`policy="autoscale"`), no trades;
- negotiators: every tenant a built-in negotiator over the gateway (`api.play`), bursting to
  the cloud and trading idle cloud GPUs for money.

Per tenant: queueing delay p50/p99 of the jobs that started, cost and reward (value of finished
work, less cost and SLA penalties, plus trade money). Usage: `python examples/openb_what_if.py
[--seeds 5] [--horizon-h H]`; prints a Markdown table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pandas as pd

from twin import api
from twin.api import Result
from twin.schema.scenario import Scenario

TENANTS = ("ls", "be", "burstable", "other")
Way = Callable[[Scenario, int], Result]
WAYS: dict[str, Way] = {
    "no cloud, no trades": lambda s, seed: api.run(s, seed=seed, policy="static"),
    "cloud pool (autoscale)": lambda s, seed: api.run(s, seed=seed, policy="autoscale"),
    "negotiators": lambda s, seed: api.play(s, dict.fromkeys(TENANTS, "negotiator"), seed=seed),
}


def figures(result: Result) -> pd.DataFrame:
    """Per tenant of one run: delay p50 and p99 (s) of the jobs that started, cost and reward."""
    started = result.table("job_started")
    delays = started.groupby("tenant")["wait_s"].quantile([0.5, 0.99]).unstack()
    delays.columns = ["p50_s", "p99_s"]
    money = result.tenants().set_index("name")[["cost_usd", "reward_usd"]]
    return delays.join(money, how="outer").reindex(list(TENANTS)).fillna(0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--horizon-h", type=float, help="play only this many hours of the trace")
    args = parser.parse_args()
    overrides = {} if args.horizon_h is None else {"horizon_s": args.horizon_h * 3600}
    scenario = api.scenario("openb-tenants", overrides)
    print("| tenants play | tenant | delay p50 | delay p99 | cost $ | reward $ |")
    print("|---|---|---:|---:|---:|---:|")
    for name, way in WAYS.items():
        runs = [figures(way(scenario, seed)) for seed in range(args.seeds)]
        mean = pd.concat(runs).groupby(level=0).mean()
        for tenant in TENANTS:
            row = mean.loc[tenant]
            print(f"| {name} | {tenant} | {row.p50_s:,.0f} s | {row.p99_s:,.0f} s | "
                  f"{row.cost_usd:,.0f} | {row.reward_usd:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
