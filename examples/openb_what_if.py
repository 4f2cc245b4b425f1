"""What if openb's tenants could burst to a cloud pool, or negotiate? One table, means over seeds.

Plays the built-in `openb-tenants` (the whole openb trace on its calibrated nodes, tenants by
QoS class, beside a cloud pool of 32 A100s) three ways, each over the same seeds:

- no cloud, no trades: every tenant passive (`twin run --policy static`), which is the replay;
- a cloud pool: every tenant autoscales into it (`twin run --policy autoscale`), no trades;
- negotiators: every tenant a built-in negotiator over the gateway (`twin play`), bursting to
  the cloud and trading idle cloud GPUs for money.

Per tenant: queueing delay p50/p99 of the jobs that started, cost and reward (value of finished
work, less cost and SLA penalties, plus trade money). Usage: `python examples/openb_what_if.py
[--seeds 5] [--out runs/what-if]`; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TENANTS = ("ls", "be", "burstable", "other")
WAYS = {
    "no cloud, no trades": ["run", "--policy", "static"],
    "cloud pool (autoscale)": ["run", "--policy", "autoscale"],
    "negotiators": ["play", "--agents", ",".join(f"{t}=negotiator" for t in TENANTS)],
}


def play(way: list[str], seed: int, out: Path) -> None:
    cmd = [sys.executable, "-m", "twin", way[0], "--scenario", "openb-tenants", *way[1:],
           "--seed", str(seed), "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)


def figures(out: Path) -> dict[str, dict[str, float]]:
    """Per tenant: delay p50 and p99 (s), cost ($) and reward ($) of one run."""
    waits: dict[str, list[float]] = {t: [] for t in TENANTS}
    with (out / "events.jsonl").open() as f:
        for line in f:
            if '"job_started"' in line:
                e = json.loads(line)
                waits[e["tenant"]].append(e["wait_s"])
    summary = {t["name"]: t for t in json.loads((out / "summary.json").read_text())["tenants"]}
    rows = {}
    for tenant in TENANTS:
        w = sorted(waits[tenant]) or [0.0]
        s = summary.get(tenant, {})
        rows[tenant] = {
            "p50_s": w[len(w) // 2],
            "p99_s": w[min(int(len(w) * 0.99), len(w) - 1)],
            "cost_usd": s.get("cost_usd", 0.0),
            "reward_usd": s.get("reward_usd", 0.0),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", default="runs/what-if")
    args = parser.parse_args()
    print("| tenants play | tenant | delay p50 | delay p99 | cost $ | reward $ |")
    print("|---|---|---:|---:|---:|---:|")
    for name, way in WAYS.items():
        runs = []
        for seed in range(args.seeds):
            out = Path(args.out) / f"{way[0]}-{way[2].split('=')[0][:9]}-s{seed}"
            play(way, seed, out)
            runs.append(figures(out))
        for tenant in TENANTS:
            mean = {k: statistics.fmean(r[tenant][k] for r in runs) for k in runs[0][tenant]}
            print(f"| {name} | {tenant} | {mean['p50_s']:,.0f} s | {mean['p99_s']:,.0f} s | "
                  f"{mean['cost_usd']:,.0f} | {mean['reward_usd']:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
