"""Job-level environments vectorised over processes, several to a process.

`gymnasium.make_vec("twin/Market-v0", num_envs=16)` (or `vectorization_mode=
"vector_entry_point"`, with `workers=` to choose the processes; `Cluster-v0` alike) steps
`num_envs` environments on `workers` processes (all cores by default), each process stepping its
share in turn. Gymnasium's `"async"` mode puts one environment in each process and waits, every
step, for the slowest: a job-level step varies several-fold (a round may run many jobs, an
episode's end resets), so the expected slowest of N is far above the mean, and every environment
pays a round trip to its process and a shared-memory write of its dict observation. Here a
process steps its environments back to back, so a batch waits for the slowest *sum* of steps
(whose spread shrinks with the number summed) and a round trip serves them all.

The batch is Gymnasium's: observations, rewards, terminations, truncations and infos batched as
`AsyncVectorEnv` batches them, and an environment that ended resets on the next step (the
`NEXT_STEP` autoreset: its action is ignored, its reward 0). Seeds: `reset(seed=s)` seeds
environment i with s + i.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from twin.errors import ConfigError
from twin.rl.cluster_env import ClusterEnv

Step = tuple[Any, float, bool, bool, dict[str, Any]]


def _slice(batch: Any, lo: int, hi: int) -> Any:
    """Rows lo..hi of a batch (a dict or tuple of arrays, nested, or an array)."""
    if isinstance(batch, dict):
        return {k: _slice(v, lo, hi) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_slice(v, lo, hi) for v in batch)
    return batch[lo:hi]


def _join(parts: list[Any]) -> Any:
    """Batches stacked in order (the inverse of `_slice`)."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: _join([p[k] for p in parts]) for k in first}
    if isinstance(first, tuple):
        return tuple(_join([p[i] for p in parts]) for i in range(len(first)))
    return first if len(parts) == 1 else np.concatenate(parts)


def _serve(conn: Connection, kwargs: dict[str, Any], count: int) -> None:
    """A worker: `count` environments made from `kwargs`, stepped as the parent asks; it
    splits its slice of the actions and batches its observations itself (in parallel with the
    other workers, not in the parent)."""
    envs: list[ClusterEnv] = []

    def batched(observations: list[Any]) -> Any:
        space = envs[0].observation_space
        out: Any = create_empty_array(space, count)
        return concatenate(space, observations, out)

    try:
        envs.extend(ClusterEnv(**kwargs) for _ in range(count))
        actions_space = batch_space(envs[0].action_space, count)
        while True:
            command, payload = conn.recv()
            if command == "step":
                actions, resets = payload
                out: list[Step] = []
                for env, action, reset in zip(envs, iterate(actions_space, actions), resets,
                                              strict=True):  # fmt: skip
                    if reset:
                        obs, info = env.reset()
                        out.append((obs, 0.0, False, False, info))
                    else:
                        out.append(env.step(action))
                rest = [(r, te, tr, info) for _, r, te, tr, info in out]
                conn.send(("ok", (batched([o[0] for o in out]), rest)))
            elif command == "reset":
                seeds, options = payload
                done = [env.reset(seed=s, options=options)
                        for env, s in zip(envs, seeds, strict=True)]  # fmt: skip
                conn.send(("ok", (batched([d[0] for d in done]), [d[1] for d in done])))
            else:
                conn.send(("ok", None))
                return
    except (EOFError, KeyboardInterrupt):
        return
    except Exception:
        conn.send(("error", traceback.format_exc()))
    finally:
        for env in envs:
            env.close()


class ProcessVectorEnv(VectorEnv[Any, Any, Any]):
    """`num_envs` `ClusterEnv`s (made with `kwargs`) on `workers` processes."""

    def __init__(self, num_envs: int, workers: int | None = None, **kwargs: Any) -> None:
        if num_envs < 1:
            raise ConfigError(f"num_envs must be at least 1, got {num_envs}")
        workers = min(workers or os.cpu_count() or 1, num_envs)
        if workers < 1:
            raise ConfigError(f"workers must be at least 1, got {workers}")
        kwargs.pop("max_episode_steps", None)  # Gymnasium's; an episode ends by itself
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        probe = ClusterEnv(**kwargs)  # the spaces, and a bad argument refused here
        self.single_observation_space = probe.observation_space
        self.single_action_space = probe.action_space
        probe.close()
        self.num_envs = num_envs
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        base, extra = divmod(num_envs, workers)
        self.shares = [base + (w < extra) for w in range(workers)]
        context: Any = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for share in self.shares:
            parent, child = context.Pipe()
            proc = context.Process(target=_serve, args=(child, kwargs, share), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._autoreset = np.zeros(num_envs, dtype=bool)
        self._broken: str | None = None  # why the workers can no longer be asked
        self.closed = False

    def _ask(self, command: str, payloads: Sequence[Any]) -> tuple[Any, list[Any]]:
        """Send each worker its payload, then gather their answers: the observations joined
        into one batch, the rest per environment (in order)."""
        if self._broken is not None:
            raise RuntimeError(f"this vector env is broken ({self._broken}); make a new one")
        try:
            for conn, payload in zip(self._conns, payloads, strict=True):
                conn.send((command, payload))
            answers = [conn.recv() for conn in self._conns]  # every one read: none left stale
        except (OSError, EOFError):
            self._broken = "a worker exited"
            raise RuntimeError("a vector environment's worker exited (killed, or out of "
                               "memory?)") from None  # fmt: skip
        for status, value in answers:
            if status != "ok":
                self._broken = "a worker failed"
                raise RuntimeError(f"a vector environment's worker failed:\n{value}")
        rest = [each for _, value in answers for each in value[1]]
        return _join([value[0] for _, value in answers]), rest

    def _split(self, items: Sequence[Any]) -> list[Any]:
        """`items` (a list, or a batch of actions) cut into the workers' shares."""
        out, at = [], 0
        for share in self.shares:
            out.append(_slice(items, at, at + share))
            at += share
        return out

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"{len(seeds)} seeds for {self.num_envs} environments")
        observations, each = self._ask("reset", [(s, options) for s in self._split(seeds)])
        self._autoreset[:] = False
        infos: dict[str, Any] = {}
        for i, info in enumerate(each):
            infos = self._add_info(infos, info, i)
        return observations, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        resets = self._autoreset.tolist()
        payloads = list(zip(self._split(actions), self._split(resets), strict=True))
        observations, each = self._ask("step", payloads)
        rewards = np.array([a[0] for a in each], dtype=np.float64)
        terminated = np.array([a[1] for a in each], dtype=bool)
        truncated = np.array([a[2] for a in each], dtype=bool)
        infos: dict[str, Any] = {}
        for i, answer in enumerate(each):
            infos = self._add_info(infos, answer[3], i)
        self._autoreset = terminated | truncated
        return observations, rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        for conn in self._conns:
            try:
                conn.send(("close", None))
                conn.recv()
            except (OSError, EOFError):
                pass
            conn.close()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
