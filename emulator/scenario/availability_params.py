"""Scenario-side parameter models of the availability models (devices/availability.py):
probabilities checked as probabilities, durations and trace files within devices/limits.py's
ranges, so that no group is silently never online."""
from __future__ import annotations

import math
from typing import Any

from pydantic import Field, field_validator, model_validator

from devices import availability as av
from devices.trace_files import read_interval_trace, read_round_trace

from .quantities import FiniteParams, seconds, table, trace_file
from ..registry import extension_point, register

extension_point("availability", av.Availability)     # a registered class extends it (devices/availability.py)

PROB_FORMS = "a number, a list (one per client of the group), {uniform: [lo, hi]}, {beta: [a, b]} or 'labels'"


class AlwaysParams(FiniteParams):
    pass


register("availability", "always", AlwaysParams, "always online", lambda p, ctx=None: av.AlwaysOnline())


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _unit(x) -> bool:
    return _is_number(x) and math.isfinite(x) and 0 <= x <= 1


def _check_dist(v: dict):
    (kind, args), = v.items()
    if kind not in ("uniform", "beta") or not isinstance(args, list) or len(args) != 2:
        raise ValueError(f"a distribution is {{uniform: [lo, hi]}} or {{beta: [a, b]}}; got {v!r}"[:200])
    lo, hi = args
    if kind == "uniform" and not (_unit(lo) and _unit(hi) and lo <= hi):
        raise ValueError(f"{{uniform: [lo, hi]}} needs finite 0 <= lo <= hi <= 1; got [{lo!r}, {hi!r}]")
    if kind == "beta" and not all(_is_number(x) and math.isfinite(x) and 0 < x <= 1e6 for x in args):
        bad = "a" if not (_is_number(lo) and math.isfinite(lo) and 0 < lo <= 1e6) else "b"
        raise ValueError(f"{{beta: [a, b]}} needs finite a > 0 and b > 0 (at most 1e6); got {bad} = "
                         f"{args[0 if bad == 'a' else 1]!r}")


def _check_prob(v):
    """A probability spec: every number finite in [0, 1], a distribution with valid parameters."""
    if _is_number(v):
        if not _unit(v):
            raise ValueError(f"a probability is a finite number in [0, 1]; got {v!r}")
    elif isinstance(v, list):
        bad = next((i for i, x in enumerate(v) if not _unit(x)), None)
        if bad is not None:
            raise ValueError(f"every probability is a finite number in [0, 1]; item [{bad}] is {v[bad]!r}")
    elif isinstance(v, dict) and len(v) == 1:
        _check_dist(v)
    elif v != "labels":
        raise ValueError(f"give {PROB_FORMS}")
    return v


class BernoulliParams(FiniteParams):
    p: Any = Field(description="probability online per round: number, list per client, {uniform: [lo, hi]}, "
                               "{beta: [a, b]}, or 'labels' (FedSUM P2)")
    _p = field_validator("p")(classmethod(lambda cls, v: _check_prob(v)))


register("availability", "bernoulli", BernoulliParams, "online each round independently with probability p_i",
         lambda p, ctx=None: av.BernoulliAvailability(p=p.p))


class SineParams(FiniteParams):
    p: Any = Field(0.5, description="base probability p_i (as bernoulli.p)")
    amplitude: float = Field(0.3, ge=0, le=1, description="gamma_s")
    period: float = Field(20.0, ge=1e-6, le=1e9, description="period in rounds")
    phase: float = Field(0.0, ge=-1e6, le=1e6, description="phase in radians")
    _p = field_validator("p")(classmethod(lambda cls, v: _check_prob(v)))


register("availability", "sine", SineParams,
         "p_i(t) = p_i (a sin(2 pi t/P + phase) + 1 - a) per round (FedSUM P3)",
         lambda p, ctx=None: av.SineAvailability(p=p.p, amplitude=p.amplitude, period=p.period, phase=p.phase))


class MarkovParams(FiniteParams):
    p_on_off: float = Field(gt=0, le=1, description="P(online -> offline) per round")
    p_off_on: float = Field(gt=0, le=1, description="P(offline -> online) per round")


register("availability", "markov", MarkovParams,
         "two-state on/off chain per client, one step per round, stationary start",
         lambda p, ctx=None: av.MarkovAvailability(p_on_off=p.p_on_off, p_off_on=p.p_off_on))


class RoundTraceParams(FiniteParams):
    path: str = Field(description="CSV: round, client, available (e.g. a run's clients.csv)")
    repeat: bool = Field(True, description="wrap around after the trace's last round")
    _f = field_validator("path")(trace_file(read_round_trace))


def _round_trace(p, ctx=None):
    tab, last = table(read_round_trace, p.path)
    return av.RoundTraceAvailability(table=tab, last_round=last, repeat=p.repeat)


register("availability", "round_trace", RoundTraceParams, "replay per-round availability from a CSV", _round_trace)


class MarkovTimeParams(FiniteParams):
    mean_on: float = seconds(description="mean online period, seconds (exponential)")
    mean_off: float = seconds(description="mean offline period, seconds (exponential)")


register("availability", "markov_time", MarkovTimeParams,
         "continuous time: exponential on/off periods, stationary start; going offline interrupts work",
         lambda p, ctx=None: av.MarkovTimeAvailability(mean_on=p.mean_on, mean_off=p.mean_off))


class DiurnalParams(FiniteParams):
    mean: float = Field(0.5, ge=0, le=1, description="mean probability of being online")
    amplitude: float = Field(0.4, ge=0, le=1, description="sine amplitude of the probability")
    period: float = seconds(86400.0, description="seconds per cycle (a day)")
    phase: float = Field(0.0, ge=-1e6, le=1e6, description="phase in radians")
    slot: float = seconds(900.0, description="seconds per on/off decision")
    spread: float = Field(0.0, ge=0, le=1, description="per-client random shift of the cycle, as a share of the period")

    @model_validator(mode="after")
    def _ever_online(self):
        if self.mean + self.amplitude <= 0:
            raise ValueError("mean + amplitude is 0: the group would never be online (the probability "
                             "of being online is at most mean + amplitude)")
        return self


register("availability", "diurnal", DiurnalParams,
         "continuous time: online per slot with a sine-modulated probability over a day",
         lambda p, ctx=None: av.DiurnalAvailability(mean=p.mean, amplitude=p.amplitude, period=p.period,
                                                    phase=p.phase, slot=p.slot, spread=p.spread))


class TraceParams(FiniteParams):
    path: str = Field(description="CSV: client, start, end [, period] online intervals (seconds)")
    repeat: bool = Field(True, description="repeat each client's trace with its period")
    _f = field_validator("path")(trace_file(read_interval_trace))


register("availability", "trace", TraceParams, "continuous time: replay online intervals from a CSV",
         lambda p, ctx=None: av.TraceAvailability(trace=table(read_interval_trace, p.path), repeat=p.repeat))
