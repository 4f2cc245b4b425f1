"""A Gymnasium environment over the job-level (cluster) scenarios: one tenant is the ego agent,
every other tenant an opponent played in process (its scenario policy, or a built-in agent such
as `negotiator` that makes and answers offers). A step is one decision round of the ego tenant:
the rounds in between (other tenants deciding) run on their own. (`parallel_env` has every
tenant as an agent, for PettingZoo.)

Observation (a dict): the tenant's numbers `t_s`, `budget_left_usd`, `spent_usd`,
`queue_length`, `queued_gpus`, `running_jobs`; per pool `[ready, busy, pending, down, free]`
GPUs; `queue`, the head of its queue, and `offers`, the offers made to it this round (see
`whole_action`); `terms`, the scenario's terms as the tenant knows them, fixed for the episode
(per pool its price, provisioning delay quantiles, billing and capacity; its own value, SLA
cost and budget: `learnable.terms`), so one policy can tell a scenario's members apart. With
`flat=True` (what standard RL libraries take) the same numbers as one
float64 vector in that order, and the action as one `MultiDiscrete`.
Action: the whole action of `whole_action` (provision, place, bid, offer, answer).
Reward: the tenant's money reward for the round (value earned and traded, minus spend and SLA
penalties), the final settlement included; SLA penalties told as they accrue (`sla="accrued"`,
the default) or as the summary books them (`sla="booked"`). Either way an episode's rewards sum
to the summary's return for the tenant.

Made to be learned (`learnable`): `normalised=True` scales the observation to about one;
`info["action_mask"]` (and `action_masks()`) says which choices of the flat action can act;
`split="train"` or `"held_out"` draws episode seeds from that split of `twin.rl.seeds` (an
exact one: `reset(options={"episode_seed": s})`). An episode always settles: with `max_steps`,
the step that reaches it plays the rest out by the tenant's own policy and tells its reward
(truncated), and `finish()` does the same for a caller who stops early.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from twin.rl import learnable
from twin.rl.opponents import opponents
from twin.rl.seeds import Split, seed_split
from twin.rl.table import Table
from twin.rl.whole_action import WholeAction
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism
from twin.sim import scenarios
from twin.sim.driver import Driver
from twin_agents.registry import trades

BOUND = 1e12  # finite stand-in for "unbounded" budgets
HEAD = 6  # flat fields before the per-pool ones
PER_POOL = 5
HEAD_NAMES = ("t_s", "budget_left_usd", "spent_usd", "queue_length", "queued_gpus",
              "running_jobs")  # fmt: skip


def load_scenario(scenario: str | ClusterScenario) -> ClusterScenario:
    return scenarios.load_cluster(scenario) if isinstance(scenario, str) else scenario


def whole_action(scenario: ClusterScenario, max_delta: int) -> WholeAction:
    return WholeAction(tuple(t.name for t in scenario.tenants),
                       tuple(p.name for p in scenario.pools), max_delta)  # fmt: skip


def state_space(scenario: ClusterScenario, bound: float = BOUND) -> spaces.Box:
    """The tenant's numbers as one vector (`Driver.observe_flat`)."""
    n = HEAD + PER_POOL * len(scenario.pools)
    return spaces.Box(low=-bound, high=bound, shape=(n,), dtype=np.float64)


def terms_space(scenario: ClusterScenario, bound: float = BOUND) -> spaces.Box:
    """The scenario's terms as the tenant knows them (`learnable.terms`)."""
    n = learnable.TERMS_PER_POOL * len(scenario.pools) + learnable.TENANT_TERMS
    return spaces.Box(low=-bound, high=bound, shape=(n,), dtype=np.float64)


def dict_space(scenario: ClusterScenario, whole: WholeAction, bound: float = BOUND) -> spaces.Dict:
    one = spaces.Box(low=-bound, high=bound, shape=(1,), dtype=np.float64)
    pool = spaces.Box(low=-bound, high=bound, shape=(PER_POOL,), dtype=np.float64)
    pools = spaces.Dict({p.name: pool for p in scenario.pools})
    return spaces.Dict({**dict.fromkeys(HEAD_NAMES, one), "pools": pools,
                        "queue": whole.queue_space(bound),
                        "offers": whole.offers_space(bound),
                        "terms": terms_space(scenario, bound)})  # fmt: skip


def flat_space(scenario: ClusterScenario, whole: WholeAction, bound: float = BOUND) -> spaces.Box:
    parts = (state_space(scenario), whole.queue_space(), whole.offers_space(),
             terms_space(scenario))  # fmt: skip
    n = sum(int(np.prod(part.shape)) for part in parts)
    return spaces.Box(low=-bound, high=bound, shape=(n,), dtype=np.float64)


def structured(scenario: ClusterScenario, vector: np.ndarray) -> dict[str, Any]:
    """The state vector as the numbers of `dict_space`."""
    out: dict[str, Any] = {name: vector[i : i + 1] for i, name in enumerate(HEAD_NAMES)}
    out["pools"] = {
        p.name: vector[HEAD + PER_POOL * k : HEAD + PER_POOL * (k + 1)]
        for k, p in enumerate(scenario.pools)
    }
    return out


def flat(driver: Driver[TenantObservation, ProvisionAction], tenant: str) -> np.ndarray:
    return np.clip(np.array(driver.observe_flat(tenant), dtype=np.float64), -BOUND, BOUND)


class ClusterEnv(gym.Env[Any, Any]):
    """One tenant of a cluster scenario as a Gymnasium env; the others as opponents."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's API)

    def __init__(self, scenario: str | ClusterScenario = "default", tenant: str | None = None,
                 *, max_delta: int = 4, flat: bool = False, opponents: str = "scenario",
                 mechanism: Mechanism = DEFAULT_MECHANISM, normalised: bool = False,
                 sla: Literal["accrued", "booked"] = "accrued", split: Split | None = None,
                 max_steps: int | None = None) -> None:  # fmt: skip
        self.scenario = load_scenario(scenario)
        names = [t.name for t in self.scenario.tenants]
        self.tenant = tenant or names[0]
        if self.tenant not in names:
            raise ValueError(f"unknown tenant {self.tenant!r}; tenants: {names}")
        if sla not in ("accrued", "booked"):
            raise ValueError(f"sla must be 'accrued' or 'booked', not {sla!r}")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.max_delta, self.flat = max_delta, flat
        self.opponents, self.mechanism = opponents, mechanism
        self.normalised, self.sla, self.split, self.max_steps = normalised, sla, split, max_steps
        self.trading = opponents != "scenario" and trades(opponents)
        self.whole = whole_action(self.scenario, max_delta)
        self.action_space: spaces.Space[Any] = (
            self.whole.flat_action_space() if flat else self.whole.action_space()
        )
        bound = learnable.NORMALISED_BOUND if normalised else BOUND
        self.observation_space: spaces.Space[Any] = (
            flat_space(self.scenario, self.whole, bound) if flat
            else dict_space(self.scenario, self.whole, bound)
        )  # fmt: skip
        self._table: Table | None = None
        self._accrual: learnable.SlaAccrual | None = None
        self._steps = 0
        self._mask = np.ones(0, dtype=bool)
        self._lens = learnable.Lens(self.scenario, self.whole, self.tenant, trading=self.trading,
                                    mechanism=mechanism, normalised=normalised)  # fmt: skip
        self._terms = learnable.terms(self.scenario, self.tenant, normalised=normalised)

    @property
    def driver(self) -> Driver[TenantObservation, ProvisionAction]:
        return self.table.driver

    @property
    def table(self) -> Table:
        if self._table is None:
            raise RuntimeError("call reset() first")
        return self._table

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        super().reset(seed=seed)
        chosen = (options or {}).get("episode_seed")
        if chosen is not None:
            episode_seed = int(chosen)
        elif self.split is not None:
            (episode_seed,) = seed_split(self.scenario.name).draw(self.split, self.np_random)
        else:
            episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        driver: Driver[TenantObservation, ProvisionAction] = Driver(
            self.scenario, seed=episode_seed
        )
        others = opponents(self.opponents, driver.tenants, self.tenant,
                           driver.default_policies(), episode_seed)  # fmt: skip
        self._table = Table(driver, self.tenant, others, self.mechanism)
        self._accrual = learnable.SlaAccrual(driver, self.tenant) if self.sla == "accrued" else None
        self._steps = 0
        reward = self._tell(self._table.to_turn())
        obs = self._obs()
        return obs, {"seed": episode_seed, "reward_before": reward, "action_mask": self._mask}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        table = self.table
        driver = table.driver
        parts = self.whole.unflatten(self.whole.flatten(action))
        view = driver.observe(self.tenant) if np.any(parts["place"]) else None
        decided = self.whole.decide(self.tenant, parts, view, table.offers_to_ego,
                                    f"{self.tenant}-{driver.round + 1}")  # fmt: skip
        offers = [decided.offer] if decided.offer is not None else []
        booked = table.play(decided.action, offers, decided.answers)
        trades = [t.status for t in table.last.trades] if table.last else []
        self._steps += 1
        info: dict[str, Any] = {"trades": trades}
        cut = self.max_steps is not None and self._steps >= self.max_steps
        if cut and driver.ended is None:
            booked += table.play_out()
            info["finished_by"] = self.own_policy
        reward = self._tell(booked)
        ended = driver.ended
        obs = self._obs()
        info["action_mask"] = self._mask
        return (obs, reward, ended is not None and ended != "horizon" and not cut,
                ended == "horizon" or cut, info)  # fmt: skip

    @property
    def own_policy(self) -> str:
        """The tenant's own policy: what finishes an episode cut short."""
        return self.table.own.name

    def finish(self) -> float:
        """Play the rest of the episode by the tenant's own policy and settle it: the reward
        that would be told for it (0 if the episode is over). Stopping early never pays."""
        if self.table.driver.ended is not None:
            return 0.0
        reward = self._tell(self.table.play_out())
        self._obs()
        return reward

    def action_masks(self) -> np.ndarray:
        """Per choice of the flat action, whether it can act now (sb3-contrib's MaskablePPO
        calls this)."""
        return self._mask

    def _tell(self, booked: float) -> float:
        return booked if self._accrual is None else self._accrual.tell(booked)

    def _obs(self) -> np.ndarray | dict[str, np.ndarray]:
        table = self.table
        state = flat(table.driver, self.tenant)
        waiting = state[HEAD_NAMES.index("queue_length")] > 0 and table.driver.ended is None
        queue = (self.whole.queue_block(table.driver.observe(self.tenant)) if waiting
                 else np.zeros(self.whole.queue_shape))  # fmt: skip
        offers = self.whole.offers_block(table.offers_to_ego)
        (state, queue, offers), self._mask = self._lens(state, queue, offers)
        if self.flat:
            return np.concatenate([state, queue.ravel(), offers.ravel(), self._terms])
        return {**structured(self.scenario, state), "queue": queue, "offers": offers,
                "terms": self._terms.copy()}  # fmt: skip
