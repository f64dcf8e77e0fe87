"""Weighted sampling without replacement by successive draws (docs/algorithms/selection.md
section 0), and where its uniforms come from.

WSWOR(items, w, m): m times, normalise the weights of the items not yet taken, draw
u ~ U[0, 1) and take the first item whose cumulative normalised weight is strictly greater
than u (Eq. 0.1). The same law as numpy's `choice(replace=False, p=...)`. Items of weight 0
are never taken; when at most m items have a positive weight, all of those are taken (in
position order, with no draw).

Done without renormalising m times (10^5 items, m in the hundreds: one cumulative sum):
with C the cumulative sum of the original weights and R(j) the weight already taken at
positions <= j, the pick is the first j with C(j) - R(j) > u (W - taken), found by
iterating j <- first index with C(j) > u (W - taken) + R(j) to its fixed point (R only grows
with j, so every iterate is a lower bound of the answer).
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np


class Uniforms:
    """U[0, 1) draws: from `rng` (the run's selection stream), or an injected sequence (tests,
    hand-checked cases); an injected sequence that runs out is an error."""

    def __init__(self, rng: Optional[np.random.Generator] = None, values: Optional[Iterable[float]] = None):
        self.rng = rng
        self._it = None if values is None else iter(list(values))

    def __call__(self) -> float:
        if self._it is not None:
            try:
                return float(next(self._it))
            except StopIteration:
                raise RuntimeError("the injected uniforms ran out") from None
        return float(self.rng.random())


def wswor(weights, m: int, draw: Uniforms) -> np.ndarray:
    """Positions (into `weights`) of m successive weighted draws without replacement, in draw
    order (Eq. 0.1)."""
    w = np.asarray(weights, dtype=np.float64)
    positive = int(np.count_nonzero(w > 0))
    if m >= positive:                       # every item with a weight is taken: no draw needed
        return np.flatnonzero(w > 0).astype(np.int64)
    C = np.cumsum(np.where(w > 0, w, 0.0))
    total = float(C[-1])
    taken_at: list = []          # positions taken, ascending
    taken_w: list = []           # their weights, same order
    out = np.empty(m, dtype=np.int64)
    last = int(np.flatnonzero(w > 0)[-1])
    for i in range(m):
        removed = float(np.sum(taken_w)) if taken_w else 0.0
        target = draw() * (total - removed)
        j = int(np.searchsorted(C, target, side="right"))
        while True:
            r = _taken_upto(taken_at, taken_w, j)
            j2 = int(np.searchsorted(C, target + r, side="right"))
            if j2 == j:
                break
            j = j2
        while j < len(w) and (w[j] <= 0 or j in taken_at):     # float rounding only
            j += 1
        if j >= len(w):
            j = _last_free(w, taken_at, last)
        out[i] = j
        k = int(np.searchsorted(taken_at, j))
        taken_at.insert(k, j)
        taken_w.insert(k, float(w[j]))
    return out


def _taken_upto(taken_at: list, taken_w: list, j: int) -> float:
    k = int(np.searchsorted(taken_at, j, side="right"))
    return float(np.sum(taken_w[:k])) if k else 0.0


def _last_free(w: np.ndarray, taken_at: list, last: int) -> int:
    j = last
    while j >= 0 and (w[j] <= 0 or j in taken_at):
        j -= 1
    return j
