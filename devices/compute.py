"""Compute models: how many virtual seconds a client's local steps take.

A compute model answers `duration(client, round, steps)`: the virtual seconds `steps`
local SGD steps take on that client in that round. Draws come from a per-client
`numpy.random.Generator` passed in by the caller, consumed in the client's own round
order, so the result does not depend on the order in which clients are simulated.

No model silently returns 0: only `InstantCompute`, which a scenario must name
explicitly, takes no time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


class ComputeModel:
    """Base class. Subclasses implement `duration`."""

    name: str = "?"
    #: 'step' (every step drawn), 'round' (one speed per client per round),
    #: 'client' (one speed per client for the whole run) - only for random models.
    redraw: str = "round"

    def duration(self, client: int, round_: int, steps: int, rng: np.random.Generator) -> float:
        raise NotImplementedError

    def min_step_time(self) -> float:
        """A lower bound on one step's time (used by the post-run invariant check)."""
        return 0.0


@dataclass
class ConstantCompute(ComputeModel):
    """Every step takes exactly `step_time` virtual seconds."""

    step_time: float
    name: str = "constant"

    def __post_init__(self):
        if not (self.step_time > 0 and math.isfinite(self.step_time)):
            raise ValueError(f"step_time must be a positive finite number, got {self.step_time}")

    def duration(self, client, round_, steps, rng):
        return steps * self.step_time

    def min_step_time(self):
        return self.step_time


@dataclass
class InstantCompute(ComputeModel):
    """Local steps take no virtual time (must be asked for explicitly: `model: instant`)."""

    name: str = "instant"

    def duration(self, client, round_, steps, rng):
        return 0.0


@dataclass
class _RandomStepTime(ComputeModel):
    """A step-time distribution with a redraw policy.

    redraw = 'step':   every step's time is an independent draw (sum of `steps` draws);
    redraw = 'round':  one step time per client per round, all steps of the round take it;
    redraw = 'client': one step time per client, drawn at its first use, fixed for the run.
    """

    redraw: str = "round"
    _fixed: dict = field(default_factory=dict, repr=False)

    def _draw(self, rng: np.random.Generator, size=None):
        raise NotImplementedError

    def duration(self, client, round_, steps, rng):
        if steps <= 0:
            return 0.0
        if self.redraw == "step":
            return float(np.sum(self._draw(rng, steps)))
        if self.redraw == "client":
            if client not in self._fixed:
                self._fixed[client] = float(self._draw(rng))
            return steps * self._fixed[client]
        return steps * float(self._draw(rng))


@dataclass
class LognormalCompute(_RandomStepTime):
    """Step time ~ LogNormal with the given *mean* (seconds) and log-space sigma.

    mu is chosen so that E[step time] = mean_step_time: mu = ln(mean) - sigma^2 / 2.
    """

    mean_step_time: float = 1.0
    sigma: float = 0.5
    name: str = "lognormal"

    def _draw(self, rng, size=None):
        mu = math.log(self.mean_step_time) - 0.5 * self.sigma**2
        return rng.lognormal(mu, self.sigma, size)
