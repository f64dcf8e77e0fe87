"""Compute models: how long a client's local steps take in virtual time.

A compute model gives, for one client in one round, a `StepClock`: `time(k)` is the virtual
seconds its first k local steps take, `fit(budget)` the most steps that fit in `budget`
seconds (the clocks: devices/clocks.py). Protocols with a fixed amount of work ask `time(E)`;
time-driven protocols (T-SFL intervals) ask `fit`. Random draws come from the client's own generator (passed in by the
caller, consumed in the client's round order), so results do not depend on the order in
which clients are simulated.

No model silently takes zero time: only `InstantCompute`, which a scenario must name
explicitly, does.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Sequence

import numpy as np

from .clocks import DrawClock, FixedClock, RateClock, StepClock  # noqa: F401  (StepClock: re-exported)
from .trace_files import read_step_trace  # noqa: F401  (re-exported)


@dataclass
class Work:
    """What one step costs: training FLOPs (the FLOP-based model) and samples (trace)."""

    flops_per_step: float = 0.0
    batch: int = 1


class ComputeModel(ABC):
    """`clock(client, round_, rng, now, work, draw)` gives a client's StepClock for one round
    (required: abstract). Random models draw from `rng` (a stream of that client and round),
    or take `draw`: this client's share of `round_draws`, the bulk draw for every client of
    its device group that works in the round (one stream per group and round: the same numbers
    whichever engine, process or vector, runs the round). `round_draws`, `step_times` and
    `duration` have defaults; `random`, `redraw` and `counts_iterations` are declared."""

    name = "?"
    random = False          # draws random numbers (then it is given a stream)
    #: declared capability: one step of this model's clock is one whole local iteration, whose
    #: count per period the model gives itself (T-SFL's `iterations`): `intervals` takes the
    #: clock's `fit` as tau directly instead of dividing SGD steps into epochs
    counts_iterations: ClassVar[bool] = False
    #: declared: when a random model draws its step times: 'round' (one per working client
    #: and round), 'step' (every step), 'client' (once per client for the run); None: it
    #: draws none of its own (deterministic models, or models that manage their draws)
    redraw: Optional[str] = None

    def round_draws(self, steps: Sequence[int], rng: np.random.Generator) -> Optional[list]:
        """Per working client (ascending id; `steps` its planned steps), its random clock
        parameters for the round, drawn in bulk from the group's round stream; None: this
        model draws nothing per round."""
        return None

    @abstractmethod
    def clock(self, client: int, round_: int, rng: np.random.Generator, now: float = 0.0,
              work: Optional[Work] = None, draw=None) -> StepClock:
        """Required. The client's StepClock for this round (`now`: when its steps start)."""

    def step_times(self, draws: list) -> Optional[np.ndarray]:
        """Where every client's clock this round is a FixedClock whose step time needs
        nothing but the round's draw: those step times, one per working client (`draws`:
        their shares of `round_draws`), for NumPy over a round; None: ask each clock."""
        return None

    def duration(self, client, round_, steps, rng, now=0.0, work=None) -> float:
        return self.clock(client, round_, rng, now, work).time(steps)

    def nominal_step_time(self, clients: np.ndarray, work: Optional[Work] = None) -> np.ndarray:
        """A-priori seconds per step of these clients (the model's mean; no draw is made):
        what a selector may know of a device before it has run (NaN: the model gives none)."""
        return np.full(len(clients), np.nan)


@dataclass
class ConstantCompute(ComputeModel):
    """Every step takes exactly `step_time` seconds."""

    step_time: float
    name: str = "constant"

    def __post_init__(self):
        if not (self.step_time > 0 and math.isfinite(self.step_time)):
            raise ValueError(f"step_time must be a positive finite number, got {self.step_time}")

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        return FixedClock(self.step_time)

    def step_times(self, draws):
        return np.full(len(draws), self.step_time)

    def nominal_step_time(self, clients, work=None):
        return np.full(len(clients), self.step_time)


@dataclass
class InstantCompute(ComputeModel):
    """Local steps take no virtual time (asked for explicitly: `model: instant`)."""

    name: str = "instant"

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        return FixedClock(0.0)

    def step_times(self, draws):
        return np.zeros(len(draws))

    def nominal_step_time(self, clients, work=None):
        return np.zeros(len(clients))


@dataclass
class RandomStepTime(ComputeModel):
    """A step-time distribution with a redraw policy:
    'step'   every step's time is an independent draw (per-step jitter);
    'round'  one step time per client per round (the device's speed this round);
    'client' one step time per client, drawn at its first use, fixed for the whole run."""

    redraw: str = "round"
    _fixed: dict = field(default_factory=dict, repr=False)
    random = True

    @abstractmethod
    def draw(self, rng: np.random.Generator, size=None):
        """Required. One step time (size None) or an array of `size` step times from `rng`."""

    def mean(self) -> float:
        """The distribution's mean step time (a-priori estimate)."""
        return math.nan

    def nominal_step_time(self, clients, work=None):
        return np.full(len(clients), self.mean())

    def round_draws(self, steps, rng):
        if self.redraw == "round":               # one step time per working client
            return [float(v) for v in np.atleast_1d(self.draw(rng, len(steps)))]
        if self.redraw == "step":                # every planned step's time, in one draw
            vals = np.atleast_1d(self.draw(rng, int(sum(steps)))) if sum(steps) else np.zeros(0)
            return np.split(vals, np.cumsum(steps)[:-1]) if len(steps) else []
        return None                              # 'client': fixed per client, from its own stream

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        if self.redraw == "step":
            if draw is None:
                return DrawClock(lambda n: self.draw(rng, n))
            return DrawClock.from_draws(draw, lambda n: self.draw(rng, n))
        if self.redraw == "client":
            if client not in self._fixed:
                self._fixed[client] = float(self.draw(rng))
            return FixedClock(self._fixed[client])
        return FixedClock(float(self.draw(rng)) if draw is None else float(draw))

    def step_times(self, draws):
        if self.redraw != "round" or any(d is None for d in draws):
            return None
        return np.array(draws, dtype=np.float64)


@dataclass
class LognormalCompute(RandomStepTime):
    """Step time ~ LogNormal with E[step] = mean_step_time: mu = ln(mean) - sigma^2/2."""

    mean_step_time: float = 1.0
    sigma: float = 0.5
    name: str = "lognormal"

    def draw(self, rng, size=None):
        return rng.lognormal(math.log(self.mean_step_time) - 0.5 * self.sigma ** 2, self.sigma, size)

    def mean(self):
        return self.mean_step_time


@dataclass
class NormalCompute(RandomStepTime):
    """Step time ~ Normal(mean, std) truncated below at `floor` (> 0) by redrawing."""

    mean_step_time: float = 1.0
    std: float = 0.1
    floor: float = 1e-3
    name: str = "normal"

    def draw(self, rng, size=None):
        n = 1 if size is None else size
        out = rng.normal(self.mean_step_time, self.std, n)
        bad = out < self.floor
        tries = 0
        while bad.any():
            out[bad] = rng.normal(self.mean_step_time, self.std, int(bad.sum()))
            bad = out < self.floor
            tries += 1
            if tries > 1000:
                out[bad] = self.floor
                break
        return out[0] if size is None else out

    def mean(self):
        return self.mean_step_time          # the untruncated mean (the floor rarely binds)


@dataclass
class UniformCompute(RandomStepTime):
    """Step time ~ Uniform(low, high), low > 0."""

    low: float = 0.5
    high: float = 1.5
    name: str = "uniform"

    def draw(self, rng, size=None):
        return rng.uniform(self.low, self.high, size)

    def mean(self):
        return 0.5 * (self.low + self.high)


@dataclass
class ExponentialCompute(RandomStepTime):
    """Step time ~ Exponential with the given mean."""

    mean_step_time: float = 1.0
    name: str = "exponential"

    def draw(self, rng, size=None):
        return rng.exponential(self.mean_step_time, size)

    def mean(self):
        return self.mean_step_time


@dataclass
class IterationsCompute(ComputeModel):
    """The number of local iterations a client completes per `period` seconds is given
    directly (T-SFL Cases 1-3): `fixed` iterations, or floor(N(mean, std)) redrawn every
    round (clipped at 0). Each iteration then takes period / tau seconds (inf when tau = 0),
    so exactly tau iterations fit in one period (T-SFL spec section 2.3)."""

    period: float = 1.0
    fixed: Optional[int] = None
    mean: Optional[float] = None
    std: float = 0.0
    name: str = "iterations"
    _last: dict = field(default_factory=dict, repr=False)
    counts_iterations = True

    def iterations(self, client, round_, rng) -> int:
        """tau of this client in this round (one draw per client per round, cached)."""
        key = (client, round_)
        if key not in self._last:
            if self.fixed is not None:
                tau = int(self.fixed)
            else:
                tau = max(0, int(math.floor(rng.normal(self.mean, self.std))))
            if len(self._last) > 100_000:   # only the current round is ever asked again
                self._last.clear()
            self._last[key] = tau
        return self._last[key]

    @property
    def random(self):
        return self.fixed is None

    def round_draws(self, steps, rng):
        if self.fixed is not None:
            return None
        return [max(0, int(math.floor(v))) for v in rng.normal(self.mean, self.std, len(steps))]

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        tau = self.iterations(client, round_, rng) if draw is None else int(draw)
        return FixedClock(self.period / tau if tau > 0 else math.inf)

    def nominal_step_time(self, clients, work=None):
        tau = self.fixed if self.fixed is not None else self.mean
        return np.full(len(clients), self.period / tau if tau > 0 else math.inf)


@dataclass
class FlopsCompute(ComputeModel):
    """Step time = training FLOPs of one step / the device's effective FLOP rate.
    A training step ~ 3 forward passes; a forward pass ~ 2 x MACs per sample
    (workloads spec section 3), so flops_per_step = 6 x MACs x batch (computed by the caller)."""

    gflops: float = 1.0           # effective GFLOP/s of the device
    name: str = "flops"

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        if work is None or work.flops_per_step <= 0:
            raise ValueError("the flops compute model needs the model's FLOPs per step")
        return FixedClock(work.flops_per_step / (self.gflops * 1e9))

    def nominal_step_time(self, clients, work=None):
        if work is None or work.flops_per_step <= 0:
            return np.full(len(clients), np.nan)
        return np.full(len(clients), work.flops_per_step / (self.gflops * 1e9))


#: Illustrative effective training throughputs (GFLOP/s actually sustained on small CNNs,
#: well below peak). They are orders of magnitude, not measurements of specific devices.
DEVICE_PROFILES = {
    "low_end_phone": 2.0,
    "high_end_phone": 20.0,
    "laptop_cpu": 50.0,
    "edge_gpu": 300.0,
    "datacenter_gpu": 10_000.0,
}


@dataclass
class TraceCompute(ComputeModel):
    """Replays per-client step times (or speeds) over virtual time from a CSV
    (see `read_step_trace`). Client k of the group uses the trace's k-th client (sorted
    ids, wrapping); before a client's first `start` its first value applies."""

    trace: dict = field(default_factory=dict)
    members: Sequence[int] = ()
    name: str = "trace"

    def __post_init__(self):
        ids = sorted(self.trace, key=lambda s: (len(s), s))
        self._map = {c: ids[i % len(ids)] for i, c in enumerate(self.members)} if ids else {}

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        starts, kind, vals = self.trace[self._map[client]]
        if kind == "speed":
            steps = [1.0 / v for v in vals]
        elif kind == "sample_time":
            steps = [v * (work.batch if work else 1) for v in vals]
        else:
            steps = list(vals)
        starts = [min(starts[0], now)] + list(starts[1:])
        return RateClock(now, starts, steps)

    def nominal_step_time(self, clients, work=None):
        """Each client's first traced step time (its value before the trace moves on)."""
        out = np.full(len(clients), np.nan)
        for i, c in enumerate(np.asarray(clients).tolist()):
            _, kind, vals = self.trace[self._map[c]]
            v = float(vals[0])
            out[i] = 1.0 / v if kind == "speed" else v * (work.batch if work else 1) if kind == "sample_time" else v
        return out
