"""Step clocks: one client's local steps in one round, in virtual time. `time(k)` is the
seconds its first k steps take, `fit(budget)` the most steps that fit in `budget` seconds,
`min_step(k)` a lower bound on each of the first k steps' times. Compute models
(devices/compute.py) hand them out: a fixed step time, independent draws per step, or a
piecewise-constant rate (trace replay).
"""
from __future__ import annotations

import bisect
import math
from abc import ABC, abstractmethod
from typing import Callable, Sequence

import numpy as np

FIT_EPS = 1e-9   # relative float guard of fit() (T-SFL spec section 2.3)


# ----------------------------------------------------------------------------- clocks
class StepClock(ABC):
    """One client's local steps in one round. All three methods are required (abstract)."""

    @abstractmethod
    def time(self, k: int) -> float:
        """Virtual seconds taken by the first k steps."""

    @abstractmethod
    def fit(self, budget: float, limit: int = 10**7) -> int:
        """max{k <= limit : time(k) <= budget * (1 + 1e-9)}."""

    @abstractmethod
    def min_step(self, k: int) -> float:
        """A lower bound on each of the first k steps' times, from what this clock realised
        (so k x min_step(k) <= time(k): the post-run invariant "steps fit in the compute time")."""


class FixedClock(StepClock):
    """Every step takes `step` seconds (inf: not even one step)."""

    def __init__(self, step: float):
        self.step = step

    def time(self, k):
        if k <= 0:
            return 0.0
        return k * self.step

    def fit(self, budget, limit=10**7):
        if budget < 0:
            return 0
        if self.step == 0:
            return limit
        if math.isinf(self.step):
            return 0
        k = int(math.floor(budget * (1 + FIT_EPS) / self.step))
        # exact check against time(): floor of a quotient can be off by one ulp
        while k > 0 and self.time(k) > budget * (1 + FIT_EPS):
            k -= 1
        while self.time(k + 1) <= budget * (1 + FIT_EPS) and k < limit:
            k += 1
        return min(k, limit)

    def min_step(self, k):
        return self.step


class DrawClock(StepClock):
    """Each step's time is an independent draw, made lazily in step order."""

    def __init__(self, draw: Callable[[int], np.ndarray]):
        self._draw = draw
        self._cum = [0.0]

    @classmethod
    def from_draws(cls, first: Sequence[float], more: Callable[[int], np.ndarray]) -> "DrawClock":
        """The first steps' times given (this round's bulk draw); any further steps drawn."""
        c = cls(more)
        for v in first:
            c._cum.append(c._cum[-1] + float(v))
        return c

    def _extend(self, k):
        while len(self._cum) <= k:
            need = max(k + 1 - len(self._cum), 16)
            for v in self._draw(need):
                self._cum.append(self._cum[-1] + float(v))

    def time(self, k):
        if k <= 0:
            return 0.0
        self._extend(k)
        return self._cum[k]

    def fit(self, budget, limit=10**7):
        b = budget * (1 + FIT_EPS)
        k = 0
        while k < limit:
            self._extend(k + 1)
            if self._cum[k + 1] > b:
                break
            k += 1
        return k

    def min_step(self, k):
        if k <= 0:
            return 0.0
        self._extend(k)
        return float(np.min(np.diff(self._cum[:k + 1])))


class RateClock(StepClock):
    """Steps proceed at a piecewise-constant step time that changes at given times
    (trace replay): time(k) integrates the work through the pieces, starting at `now`."""

    def __init__(self, now: float, starts: Sequence[float], step_times: Sequence[float]):
        self.now, self.starts, self.steps = now, list(starts), list(step_times)

    def _piece(self, t):
        return max(0, bisect.bisect_right(self.starts, t) - 1)

    def time(self, k):
        if k <= 0:
            return 0.0
        t, left = self.now, float(k)
        i = self._piece(t)
        while True:
            st = self.steps[i]
            end = self.starts[i + 1] if i + 1 < len(self.starts) else math.inf
            cap = (end - t) / st if st > 0 else math.inf
            if left <= cap:
                return t + left * st - self.now
            left -= cap
            t = end
            i += 1

    def fit(self, budget, limit=10**7):
        t, done = self.now, 0.0
        stop = self.now + budget * (1 + FIT_EPS)
        i = self._piece(t)
        while t < stop:
            st = self.steps[i]
            end = min(self.starts[i + 1] if i + 1 < len(self.starts) else math.inf, stop)
            done += (end - t) / st if st > 0 else math.inf
            t = end
            i += 1
        return int(min(limit, math.floor(done + 1e-9)))

    def min_step(self, k):
        return min(self.steps[self._piece(self.now):])
