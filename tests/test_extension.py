"""Extending the twin touches one module and one registry line per part: a toy scenario kind,
placement policy and exporter, each in its own module of a package made here, run through the
twin's own entry points (the "where to make a change" table in docs/layout.md)."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import simpy

from tests.conftest import tiny
from twin.eventlog import formats, kind_summaries
from twin.eventlog.export import export
from twin.eventlog.log import EventLog
from twin.gateway.config import SessionRequest
from twin.rl.opponents import opponents
from twin.rl.table import Table
from twin.schema.actions import ProvisionAction
from twin.schema.vocabulary import MECHANISM_TRAITS, MechanismTraits
from twin.sim import kinds, placement_policies, scenarios
from twin.sim.driver import Driver
from twin.sim.market import mechanisms
from twin.sim.market.mechanisms import Requests, Share
from twin.sim.runner import run_episode

TOY_KIND = '''
"""A toy scenario kind: one tenant asks for jobs each tick; each runs a minute."""
from typing import Any, Literal

from twin.schema import records
from twin.schema.base import Frozen
from twin.sim import kinds


class ToyScenario(Frozen):
    kind: Literal["toy"] = "toy"
    name: str = "toy"
    ticks: int = 3


class ToyAction(Frozen):
    jobs: int = 1


class ToyView(Frozen):
    t_s: float


class Ask:
    name = "ask"

    def decide(self, view: ToyView) -> ToyAction:
        return ToyAction(jobs=2)


class ToyModel:
    tenant_names = ["toy"]

    def __init__(self, world: Any, cfg: ToyScenario, sources: Any) -> None:
        self.env, self.cfg, self.emit = world.env, cfg, world.log.append
        self.pending: dict[int, list[str]] = {}
        self.ended: Any = None
        self.jobs = 0
        self.env.process(self._ticks())

    def _ticks(self) -> Any:
        for _ in range(self.cfg.ticks):
            yield self.env.timeout(60.0)
            self.pending[0] = ["tick"]
        yield self.env.timeout(120.0)
        self.end("drained")

    def score_round(self, tenants: list[int]) -> None:
        pass

    def observe(self, tenant: int, reasons: list[str]) -> ToyView:
        return ToyView(t_s=self.env.now)

    def observe_flat(self, tenant: int) -> tuple[float, ...]:
        return (self.env.now,)

    def commit(self, inputs: Any) -> dict[str, Any]:
        from twin.sim.model import TenantOutcome

        for _, action in inputs.actions:
            for _ in range(action.jobs):
                self.jobs += 1
                job, now = f"j{self.jobs}", self.env.now
                self.emit(records.JobArrived("job_arrived", now, "toy", job, 1.0, 60.0, 0.0, None))
                self.emit(records.JobStarted("job_started", now, "toy", job, "gpu", 1.0, 60.0, 0.0))
                self.env.timeout(60.0).callbacks.append(
                    lambda _, job=job: self.emit(records.JobFinished(
                        "job_finished", self.env.now, "toy", job, "gpu", 1.0, 60.0)))
        return {"toy": TenantOutcome()}

    def settle_reward(self, tenant: int) -> float:
        return 0.0

    def end(self, reason: Any) -> None:
        if self.ended is None:
            self.ended = reason
            self.emit(records.EpisodeEnded("episode_ended", self.env.now, None, reason))

    def figures(self) -> dict[str, float | int | str]:
        return {}


class ToySummary:
    """What the toy adds to a summary: its ticks as steps."""

    def __init__(self, tenants: Any, jobs: Any) -> None:
        self.ticks = 0

    def started(self, config: dict[str, Any]) -> None:
        pass

    def _on_decision_made(self, rec: records.DecisionMade) -> None:
        self.ticks += 1

    def amend(self, summary: Any) -> Any:
        return summary.model_copy(update={"steps": self.ticks})


TOY = kinds.Kind("toy", lambda world, cfg, sources: ToyModel(world, cfg, sources), ToyAction,
                 ToyView, {"ask": lambda seed: Ask()}, lambda s: {"toy": "ask"},
                 negotiable=False, horizon_s=lambda s: s.ticks * 60.0,
                 figures={"steps": lambda s: float(s.steps or 0)})
kinds.register(TOY, ToySummary)  # the registry line
'''

TOY_POLICY = '''
"""A toy placement policy: the highest-numbered node that fits."""
from twin.sim import placement_policies


def last_fit(pn, ok, whole, share, tables):
    return int(len(ok) - 1 - ok[::-1].argmax())


placement_policies.POLICIES["last_fit"] = placement_policies.PlacementPolicy(last_fit)  # the line
'''

TOY_EXPORTER = '''
"""A toy exporter: how many events of each kind, as JSON."""
import json
from collections import Counter

from twin.eventlog import formats


class Counts:
    derived_tables = False

    def __init__(self, path):
        self.path, self.counts = path, Counter()

    def take(self, event):
        self.counts[event["kind"]] += 1

    def add(self, table, row):
        raise AssertionError

    def abandon(self):
        pass

    def close(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.counts))
        return [self.path]


formats.EXPORTERS["counts"] = formats.Exporter(  # the registry line
    "events per kind (JSON)", lambda target: target / "counts.json",
    lambda target: Counts(target / "counts.json"))
'''


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[str]:
    """The toy package, importable; every registry as it was afterwards."""
    package = tmp_path / "toy_ext"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kind.py").write_text(TOY_KIND)
    (package / "policy.py").write_text(TOY_POLICY)
    (package / "exporter.py").write_text(TOY_EXPORTER)
    saved = [(r, dict(r)) for r in (kinds.KINDS, kind_summaries.SUMMARIES,
                                    placement_policies.POLICIES, formats.EXPORTERS)]  # fmt: skip
    sys.path.insert(0, str(tmp_path))
    try:
        yield "toy_ext"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("toy_ext")]:
            del sys.modules[name]
        for registry, before in saved:
            registry.clear()
            registry.update(before)


def test_a_toy_scenario_kind_runs_through_the_runner_with_its_summary(toy: str) -> None:
    module = importlib.import_module(f"{toy}.kind")
    scenario = module.ToyScenario()
    summary, driver = run_episode(scenario, seed=0)  # type: ignore[arg-type]
    assert driver.ended == "drained"
    assert summary.jobs.arrived == summary.jobs.finished == 6
    assert summary.steps == 3  # the toy's own part of the summary
    assert kinds.kind_of(scenario).horizon_s(scenario) == 180.0  # type: ignore[arg-type]


def test_a_toy_placement_policy_places_through_the_node_placement(toy: str) -> None:
    importlib.import_module(f"{toy}.policy")
    from twin.sim.jobs import Job
    from twin.sim.node_placement import NodePlacement
    from twin.sim.pools import Holding, Pool

    scenario = tiny(
        pools=[{"name": "gpu", "gpu_type": "a100", "max_gpus": 16, "price_usd_per_gpu_h": 1.0}],
        nodes={"groups": [{"pool": "gpu", "count": 2, "gpus": 8}]},
    )
    assert scenario.nodes is not None
    nodes = scenario.nodes.model_copy(update={"placement": "last_fit"})
    holding = Holding(0, Pool(0, scenario.pools[0], lambda: 0.0, lambda: 0.0), 0.0, ready=16)
    placement = NodePlacement([[holding]], nodes, simpy.Environment())
    job = Job("a", 0, 1.0, 1000, 0, 0, None, 0, 0, 0, 0, 1, 0)
    assert placement.fit(job) is holding
    assert job.claim.nodes == (1,)  # first_fit would take node 0
    assert placement.report()["placement"] == "last_fit"


def test_a_toy_exporter_writes_through_export_and_the_format_list(toy: str, tmp_path: Path) -> None:
    importlib.import_module(f"{toy}.exporter")
    run_episode(tiny(), seed=0, out_dir=tmp_path / "run")
    written = export(tmp_path / "run", formats.parse_formats("counts,perfetto"))
    counts = json.loads((tmp_path / "run" / "counts.json").read_text())
    assert counts["episode_started"] == 1
    assert tmp_path / "run" / "counts.json" in written
    assert "counts:" in formats.formats_help()


def lowest_winning_bid(r: Requests, free: int) -> Share:
    """A toy priced mechanism: highest bids served first, each winner pays the lowest bid that
    still won."""
    order = sorted(r.wants, key=lambda t: (-r.bids[t], r.order[t]))
    grants, left = dict.fromkeys(r.wants, 0), free
    for t in order:
        grants[t] = min(r.wants[t], left)
        left -= grants[t]
    return grants, min((r.bids[t] for t in order if grants[t]), default=0.0)


@pytest.fixture
def priced_mechanism() -> Iterator[str]:
    """A new priced mechanism, registered for the test only."""
    name = "lowest_winning_bid"
    traits = MechanismTraits(priced=True, takes_bids=True)
    mechanisms.register(name, mechanisms.Rule(lowest_winning_bid, traits))
    try:
        yield name
    finally:
        del mechanisms.MECHANISM[name], MECHANISM_TRAITS[name]


def test_a_new_priced_mechanism_gets_bids_from_the_built_in_agents(priced_mechanism: str) -> None:
    assert (
        SessionRequest(scenario="market", mechanism=priced_mechanism).mechanism == priced_mechanism
    )
    made = []
    for kind in ("stepper", "greedy", "negotiator"):
        log = EventLog("priced", keep=True)
        driver: Driver[Any, ProvisionAction] = Driver(scenarios.load("market"), seed=0, log=log)
        ego = driver.tenants[0]
        table = Table(driver, ego, opponents(kind, driver.tenants, ego, {}, seed=0),
                      priced_mechanism)  # fmt: skip
        table.to_turn()
        for _ in range(10):
            table.play(ProvisionAction())
        made += [r for r in log.dicts() if r["tenant"] != ego]
    decided = [r for r in made if r["kind"] == "decision_made"]
    bids = {r["policy"] for r in decided if r["action"].get("bids_usd_per_gpu")}
    assert bids == {"stepper", "greedy", "negotiator"}
    committed = [r for r in made if r["kind"] == "round_committed"]
    assert {r["mechanism"] for r in committed} == {priced_mechanism}


async def test_a_new_priced_mechanism_gets_bids_from_the_llm_agent(
    priced_mechanism: str, aiohttp_server: Any
) -> None:
    from tests.test_agents import llm, request

    policy, _ = await llm(aiohttp_server, "valid")
    turn = await policy.decide(request(mechanism=priced_mechanism))
    await policy.close()
    assert turn.bids_usd_per_gpu
