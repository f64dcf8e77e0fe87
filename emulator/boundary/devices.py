"""A device model's numbers, checked where they cross into the engine (docs/write-your-own.md,
"Device models"): a compute model's step clock (`clock` returns a StepClock whose `time(k)`
is a number of seconds, not NaN and not negative: inf means "never", whose `fit` is a step
count >= 0 and whose `min_step` is seconds), a link's transfer seconds (one per client, not
NaN, not negative), an availability model's online mask (booleans, one per client asked) and
its times (`online_until`, `next_online`: not NaN, not before now). A violation is a
`ContractError` naming the model (its registered name, class and file) and the method; the
world adds the round and the virtual time it happened at."""
from __future__ import annotations

import math

import numpy as np

from devices.clocks import StepClock

from ..errors import ContractError
from .component import describe

SECONDS = "a number of seconds, not NaN and not negative (inf: never)"


def broken(kind: str, model, method: str, what: str, round_=None) -> ContractError:
    return ContractError(what, describe(kind, model), method, round_)


def seconds(x, kind: str, model, method: str, round_=None) -> float:
    """One duration: a real number, not NaN, >= 0."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)) \
            or math.isnan(x) or x < 0:
        raise broken(kind, model, method, f"gave {x!r}; it returns {SECONDS}", round_)
    return x


def seconds_array(x, n: int, kind: str, model, method: str) -> np.ndarray:
    """Durations of n clients: a float array of n values, none NaN or negative."""
    a = np.asarray(x)
    if a.shape != (n,) or a.dtype.kind not in "iuf" or np.isnan(a).any() or (a < 0).any():
        bad = a.ravel()[:5].tolist() if a.dtype.kind in "iufb" else type(x).__name__
        raise broken(kind, model, method, f"gave {bad} (shape {a.shape}) for {n} clients; it returns one "
                                          f"value per client, each {SECONDS}")
    return a


def mask(x, n: int, model, round_) -> np.ndarray:
    """An availability model's online mask of n clients: n booleans."""
    a = np.asarray(x)
    if a.shape != (n,) or a.dtype != np.bool_:
        raise broken("availability model", model, "online_mask", f"gave {a.dtype} values of shape {a.shape} for "
                     f"{n} clients; online_mask returns one boolean per client asked", round_)
    return a


def moment(x, now: float, model, method: str) -> float:
    """A time the availability model names (online_until, next_online): not NaN, >= now."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or math.isnan(x) or x < now:
        raise broken("availability model", model, method, f"gave {x!r} at virtual time {now:.6g} s; {method} "
                     "returns a virtual time, not NaN and not before now (inf: never)")
    return x


class CheckedClock(StepClock):
    """A compute model's step clock whose every answer is checked."""

    __slots__ = ("clock", "model", "round")

    def __init__(self, clock, model, round_):
        if not isinstance(clock, StepClock):
            raise broken("compute model", model, "clock", f"returned {type(clock).__name__}; clock returns a "
                                                          "StepClock (emulator.api)", round_)
        self.clock, self.model, self.round = clock, model, round_

    def time(self, k):
        return seconds(self.clock.time(k), "compute model", self.model, "StepClock.time", self.round)

    def fit(self, budget, limit=10**7):
        n = self.clock.fit(budget, limit)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise broken("compute model", self.model, "StepClock.fit", f"gave {n!r}; fit returns a number of "
                                                                       "steps (an integer >= 0)", self.round)
        return n

    def min_step(self, k):
        return seconds(self.clock.min_step(k), "compute model", self.model, "StepClock.min_step", self.round)
