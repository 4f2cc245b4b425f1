"""A tenant of a cluster scenario as an environment for TRL's GRPOTrainer (`environment_factory`).

TRL builds one instance per rollout with no arguments, calls `reset(**row)` with the dataset
row's columns (`scenario`, `tenant`, `seed`), offers the public methods below to the model as
tools (their schemas come from the type hints and docstrings), and the reward function reads
`get_reward()`. Each acting tool ends the tenant's decision round; the other tenants follow
their own policies until it must decide again.
"""

from __future__ import annotations

from typing import Any

import orjson

from twin.errors import ActionError, SessionEndedError
from twin.rl.ego_env import play_round, to_turn
from twin.schema.actions import Placement, ProvisionAction, TenantObservation
from twin.sim import scenarios
from twin.sim.driver import Driver

MAX_GPUS_PER_CALL = 16
MAX_BID_USD = 1000.0


class ClusterTenantEnv:
    """One tenant's decisions in a cluster scenario, as tools for a language model."""

    def __init__(self) -> None:
        self._driver: Driver[TenantObservation, ProvisionAction] | None = None
        self._defaults: dict[str, Any] = {}
        self._pools: list[str] = []
        self.tenant = ""
        self.reward = 0.0

    def reset(self, scenario: str = "market", tenant: str | None = None, seed: int = 0,
              **columns: Any) -> str:  # fmt: skip
        """Start an episode; the tenant's first view, as JSON text for the prompt."""
        loaded = scenarios.load_cluster(scenario)
        self._driver = Driver(loaded, seed=int(seed))
        self._defaults = self._driver.default_policies()
        self._pools = [p.name for p in loaded.pools]
        self.tenant = tenant or self._driver.tenants[0]
        if self.tenant not in self._driver.tenants:
            raise ActionError(f"unknown tenant {self.tenant!r}; tenants: {self._driver.tenants}")
        self.reward = to_turn(self._driver, self.tenant, self._defaults)
        return self.view()

    def view(self) -> str:
        """
        Look at the cluster without acting: your queue, budget, GPUs per pool and prices.

        Returns:
            The tenant's current observation as JSON.
        """
        driver = self._need()
        if driver.ended is not None:
            return orjson.dumps({"ended": driver.ended, "reward": self.reward}).decode()
        return driver.observe(self.tenant).model_dump_json(exclude_defaults=True)

    def provision(self, pool: str, gpus: int) -> str:
        """
        Add GPUs to one pool (a negative number releases idle ones) and end your turn.

        Args:
            pool: The pool's name, as the observation lists it.
            gpus: GPUs to add (1 to 16) or release (-16 to -1).

        Returns:
            What happened, then your next observation, as JSON.
        """
        pools = self._pools
        if pool not in pools:
            return orjson.dumps({"error": f"unknown pool {pool!r}; pools: {pools}"}).decode()
        if not gpus or abs(gpus) > MAX_GPUS_PER_CALL:
            return orjson.dumps({"error": "gpus must be -16..-1 or 1..16"}).decode()
        return self._act(ProvisionAction(provision={pool: int(gpus)}))

    def place(self, job_id: str, pool: str) -> str:
        """
        Start one of your waiting jobs now on a pool, with its own plan as the kernel scored it
        (the observation's `head` lists waiting jobs and their plans' verdicts), and end your turn.

        Args:
            job_id: The waiting job's id, as the observation lists it.
            pool: The pool to run it on; its plan must be feasible there.

        Returns:
            What happened, then your next observation, as JSON.
        """
        if pool not in self._pools:
            return orjson.dumps({"error": f"unknown pool {pool!r}; pools: {self._pools}"}).decode()
        return self._act(ProvisionAction(placements=[Placement(job_id=job_id, pool=pool)]))

    def bid(self, pool: str, gpus: int, usd_per_gpu: float) -> str:
        """
        Ask for GPUs of a scarce pool with a sealed bid, and end your turn. Under the auction
        mechanism the highest bids get the GPUs and every winner pays, once per GPU won, the
        highest losing bid (on top of the pool's hourly price); other mechanisms ignore bids.

        Args:
            pool: The pool's name, as the observation lists it.
            gpus: GPUs to ask for (1 to 16).
            usd_per_gpu: The most you would pay per GPU won, in dollars (0 or more).

        Returns:
            What happened, then your next observation, as JSON.
        """
        if pool not in self._pools:
            return orjson.dumps({"error": f"unknown pool {pool!r}; pools: {self._pools}"}).decode()
        if not 1 <= gpus <= MAX_GPUS_PER_CALL:
            return orjson.dumps({"error": "gpus must be 1..16"}).decode()
        if not 0 <= usd_per_gpu <= MAX_BID_USD:
            return orjson.dumps({"error": f"usd_per_gpu must be 0..{MAX_BID_USD:g}"}).decode()
        action = ProvisionAction(provision={pool: int(gpus)},
                                 bids_usd_per_gpu={pool: float(usd_per_gpu)})  # fmt: skip
        return self._act(action)

    def wait(self) -> str:
        """
        Change nothing this turn.

        Returns:
            Your next observation, as JSON.
        """
        return self._act(ProvisionAction())

    def get_reward(self) -> float:
        """The tenant's money reward so far in this episode (what the reward function reads)."""
        return self.reward

    # -- internals ------------------------------------------------------------------------

    def _need(self) -> Driver[TenantObservation, ProvisionAction]:
        if self._driver is None:
            raise SessionEndedError("no episode: reset first")
        return self._driver

    def _act(self, action: ProvisionAction) -> str:
        driver = self._need()
        if driver.ended is not None:
            return self.view()
        self.reward += play_round(driver, {self.tenant: action}, self._defaults, self.tenant)
        self.reward += to_turn(driver, self.tenant, self._defaults)
        return self.view()
