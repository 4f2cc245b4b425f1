"""FGD's arithmetic: how much a node's expected fragmentation grows if it takes a job (after
Weng et al., "Beware of Fragmentation", ATC '23), tabulated by the few things it depends on."""

from __future__ import annotations

import numpy as np

from twin.sim.nodes import WHOLE, PoolNodes, TaskClass


def fragmentation_growth(
    pn: PoolNodes, whole: int, share: int, mix: list[tuple[TaskClass, float]]
) -> np.ndarray:
    """Per node, how much its expected fragmentation (as `fragmentation_milli` measures it)
    would grow if it took the job: only the GPUs the job takes change, so the growth follows
    from their free milli alone. A share goes on the node's tightest GPU that fits."""
    return growth_at(pn, share, growth_table(pn.width, whole, share, mix))


def growth_table(
    width: int, whole: int, share: int, mix: list[tuple[TaskClass, float]]
) -> np.ndarray:
    """`share_growth_table` for a share of a GPU, else `whole_growth_table`."""
    if share:
        return share_growth_table(width, share, mix)
    return whole_growth_table(width, whole, mix)


def growth_at(pn: PoolNodes, share: int, table: np.ndarray) -> np.ndarray:
    """Each node's entry of a `growth_table` for a job asking `share` milli (0: whole GPUs)."""
    at: np.ndarray = table[tightest_fit(pn, share), pn.whole] if share else table[pn.whole]
    return at


def tightest_fit(pn: PoolNodes, share: int) -> np.ndarray:
    """Per node, the free milli of its tightest GPU that holds `share` (WHOLE + 1: none)."""
    rows = pn.free
    took: np.ndarray = np.where(rows >= share, rows, WHOLE + 1).min(axis=1)
    return took


def share_growth_table(width: int, share: int, mix: list[tuple[TaskClass, float]]) -> np.ndarray:
    """`fragmentation_growth` of a share of `share` milli on a node whose tightest GPU that
    fits has t free milli and which has k free whole GPUs, at [t, k] for t = 0..WHOLE + 1 and
    k = 0..width (nothing else about the node changes the growth)."""
    took = np.arange(WHOLE + 2)[:, None]
    free = np.arange(width + 1)[None, :]
    left = took - share
    whole_after = free - (took == WHOLE)
    growth = np.zeros((WHOLE + 2, width + 1))
    for cls, p in mix:
        if cls.share_milli:
            s = cls.share_milli
            usable_change = np.where(left >= s, left, 0) - np.where(took >= s, took, 0)
        else:
            usable_change = _whole_usable_change(free, whole_after, cls, width)
        growth += p * (-share - usable_change)
    return growth


def whole_growth_table(width: int, whole: int, mix: list[tuple[TaskClass, float]]) -> np.ndarray:
    """`fragmentation_growth` of a job of `whole` GPUs on a node with k free whole GPUs, for
    k = 0..width (its shares of a GPU are not touched, so nothing else matters)."""
    free = np.arange(width + 1)
    growth = np.zeros(width + 1)
    for cls, p in mix:
        if not cls.share_milli:  # whole free GPUs taken were usable by share classes: no change
            usable_change = _whole_usable_change(free, free - whole, cls, width)
            growth += p * (-WHOLE * whole - usable_change)
    return growth


def _whole_usable_change(
    before: np.ndarray, after: np.ndarray, cls: TaskClass, width: int
) -> np.ndarray:
    """The change in free milli-GPU a whole-GPU class can use, free whole GPUs going from
    `before` to `after` (a class wider than a node is a gang: any whole free GPU serves it)."""
    need = min(max(cls.whole_gpus, 1), width)
    kept = np.where(after >= need, after, 0) - np.where(before >= need, before, 0)
    return kept * WHOLE
