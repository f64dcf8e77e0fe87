"""Scenario-side description of the fleet: the parameter models of every device model
(compute, availability, network link, selection), the fleet-wide network settings, and the
factories that build the plain `devices` objects. `devices` itself knows nothing of
scenarios; factories get a `GroupContext` (the group's client ids, the scenario's folder,
label histograms) where a model needs one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from devices import availability as av
from devices import compute as cm
from devices import network as nw
from devices import selection as sel

from .registry import Params, register

Redraw = Literal["step", "round", "client"]
REDRAW_DOC = "draw per step, once per client per round, or once per client for the whole run"


@dataclass
class GroupContext:
    members: np.ndarray = None          # client ids of the group
    labels: Optional[np.ndarray] = None  # (members, classes) label histograms of task 0
    base_dir: Optional[str] = None


def _file(v: str, info: ValidationInfo) -> str:
    from .workloads.datasets import _resolve_file
    return _resolve_file(v, info)


def _wrap_value_error(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except (ValueError, OSError) as e:
        raise ValueError(str(e)) from None


# ============================================================================ compute
class ConstantParams(Params):
    step_time: float = Field(gt=0, description="virtual seconds per local step")


register("compute", "constant", ConstantParams, "every step takes step_time seconds",
         lambda p, ctx=None: cm.ConstantCompute(p.step_time))


class InstantParams(Params):
    pass


register("compute", "instant", InstantParams, "local steps take no virtual time (explicit zero)",
         lambda p, ctx=None: cm.InstantCompute())


class LognormalParams(Params):
    mean_step_time: float = Field(gt=0, description="mean seconds per step")
    sigma: float = Field(gt=0, description="log-space standard deviation")
    redraw: Redraw = Field("round", description=REDRAW_DOC)


register("compute", "lognormal", LognormalParams, "step time ~ LogNormal with the given mean",
         lambda p, ctx=None: cm.LognormalCompute(redraw=p.redraw, mean_step_time=p.mean_step_time, sigma=p.sigma))


class NormalParams(Params):
    mean_step_time: float = Field(gt=0, description="mean seconds per step")
    std: float = Field(gt=0, description="standard deviation")
    floor: float = Field(1e-3, gt=0, description="draws below this are redrawn (positive floor)")
    redraw: Redraw = Field("round", description=REDRAW_DOC)


register("compute", "normal", NormalParams, "step time ~ Normal(mean, std) truncated at a positive floor",
         lambda p, ctx=None: cm.NormalCompute(redraw=p.redraw, mean_step_time=p.mean_step_time, std=p.std, floor=p.floor))


class UniformParams(Params):
    low: float = Field(gt=0, description="shortest step time")
    high: float = Field(gt=0, description="longest step time")
    redraw: Redraw = Field("round", description=REDRAW_DOC)

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


register("compute", "uniform", UniformParams, "step time ~ Uniform(low, high)",
         lambda p, ctx=None: cm.UniformCompute(redraw=p.redraw, low=p.low, high=p.high))


class ExponentialParams(Params):
    mean_step_time: float = Field(gt=0, description="mean seconds per step")
    redraw: Redraw = Field("round", description=REDRAW_DOC)


register("compute", "exponential", ExponentialParams, "step time ~ Exponential(mean)",
         lambda p, ctx=None: cm.ExponentialCompute(redraw=p.redraw, mean_step_time=p.mean_step_time))


class IterationsParams(Params):
    fixed: Optional[int] = Field(None, ge=0, description="iterations per period (T-SFL Cases 1, 2)")
    mean: Optional[float] = Field(None, description="or floor(N(mean, std)) redrawn every round (T-SFL Case 3)")
    std: float = Field(0.0, ge=0, description="standard deviation of the draw")
    period: float = Field(1.0, gt=0, description="seconds the iterations take (the T-SFL interval length)")

    @model_validator(mode="after")
    def _one(self):
        if (self.fixed is None) == (self.mean is None):
            raise ValueError("give exactly one of fixed or mean")
        return self


register("compute", "iterations", IterationsParams,
         "iterations per period given directly (T-SFL): each takes period/tau seconds",
         lambda p, ctx=None: cm.IterationsCompute(period=p.period, fixed=p.fixed, mean=p.mean, std=p.std))


class FlopsParams(Params):
    profile: Optional[Literal[tuple(cm.DEVICE_PROFILES)]] = Field(
        None, description="named device: " + ", ".join(f"{k} ({v:g} GFLOP/s)" for k, v in cm.DEVICE_PROFILES.items()))
    gflops: Optional[float] = Field(None, gt=0, description="or an effective GFLOP/s of your own")

    @model_validator(mode="after")
    def _one(self):
        if (self.profile is None) == (self.gflops is None):
            raise ValueError("give exactly one of profile or gflops")
        return self


register("compute", "flops", FlopsParams,
         "step time = 6 x model MACs x batch / device FLOP rate (illustrative profiles)",
         lambda p, ctx=None: cm.FlopsCompute(gflops=p.gflops or cm.DEVICE_PROFILES[p.profile]))


class ComputeTraceParams(Params):
    path: str = Field(description="CSV: client, start, and step_time | sample_time | speed")

    _f = field_validator("path")(_file)


def _compute_trace(p, ctx):
    return cm.TraceCompute(trace=_wrap_value_error(cm.read_step_trace, p.path), members=list(ctx.members))


register("compute", "trace", ComputeTraceParams, "replay per-client step times or speeds over time from a CSV",
         _compute_trace)


# ============================================================================ network links
class LatencyParams(Params):
    """Per-message latency of a link: fixed part plus a random jitter (devices.network.jitter_draw)."""
    latency: float = Field(ge=0, description="one-way latency per message, seconds")
    jitter: float = Field(0.0, ge=0, description="mean extra latency per message, seconds")
    jitter_dist: Literal["exponential", "uniform", "lognormal"] = Field(
        "exponential", description="jitter distribution: Exponential(mean), Uniform(0, 2 mean), LogNormal with that mean")
    jitter_sigma: float = Field(1.0, gt=0, description="log-space spread of lognormal jitter")


class LinkParams(LatencyParams):
    up_mbps: float = Field(gt=0, description="uplink bandwidth, Mbit/s")
    down_mbps: float = Field(gt=0, description="downlink bandwidth, Mbit/s")
    spread: float = Field(0.0, ge=0, description="per-client bandwidth factor ~ LogNormal(-s^2/2, s), mean 1")


register("network", "link", LinkParams,
         "a client's own link: time = latency + bytes*8/(mbps*1e6) (the default `model`)",
         lambda p, ctx=None: nw.Link(p.latency, p.up_mbps, p.down_mbps, p.jitter, p.spread,
                                     p.jitter_dist, p.jitter_sigma))
register("network", "instant", InstantParams, "transfers take no virtual time (explicit zero)",
         lambda p, ctx=None: nw.InstantLink())


class LinkTraceParams(LatencyParams):
    path: str = Field(description="CSV: client, up_mbps, down_mbps (e.g. from `flemu traces import-fedscale`)")
    _f = field_validator("path")(_file)


def _link_trace(p, ctx):
    from devices.traces import read_links
    return nw.TraceLink(_wrap_value_error(read_links, p.path), list(ctx.members), p.latency, p.jitter,
                        p.jitter_dist, p.jitter_sigma)


register("network", "link_trace", LinkTraceParams, "per-client bandwidths from a links CSV", _link_trace)


# ============================================================================ availability
class AlwaysParams(Params):
    pass


register("availability", "always", AlwaysParams, "always online", lambda p, ctx=None: av.AlwaysOnline())

Prob = Union[float, list, dict, Literal["labels"]]


def _check_prob(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not 0 <= v <= 1:
            raise ValueError("a probability must be in [0, 1]")
    elif isinstance(v, list):
        if not all(isinstance(x, (int, float)) and 0 <= x <= 1 for x in v):
            raise ValueError("every probability must be a number in [0, 1]")
    elif isinstance(v, dict):
        if len(v) != 1 or next(iter(v)) not in ("uniform", "beta") or len(next(iter(v.values()))) != 2:
            raise ValueError("a distribution is {uniform: [lo, hi]} or {beta: [a, b]}")
    elif v != "labels":
        raise ValueError("give a number, a list, {uniform: [lo, hi]}, {beta: [a, b]} or 'labels'")
    return v


class BernoulliParams(Params):
    p: Any = Field(description="probability online per round: number, list per client, {uniform: [lo, hi]}, "
                               "{beta: [a, b]}, or 'labels' (FedSUM P2)")
    _p = field_validator("p")(classmethod(lambda cls, v: _check_prob(v)))


register("availability", "bernoulli", BernoulliParams, "online each round independently with probability p_i",
         lambda p, ctx=None: av.BernoulliAvailability(p=p.p))


class SineParams(Params):
    p: Any = Field(0.5, description="base probability p_i (as bernoulli.p)")
    amplitude: float = Field(0.3, ge=0, le=1, description="gamma_s")
    period: float = Field(20.0, gt=0, description="period in rounds")
    phase: float = Field(0.0, description="phase in radians")
    _p = field_validator("p")(classmethod(lambda cls, v: _check_prob(v)))


register("availability", "sine", SineParams,
         "p_i(t) = p_i (a sin(2 pi t/P + phase) + 1 - a) per round (FedSUM P3)",
         lambda p, ctx=None: av.SineAvailability(p=p.p, amplitude=p.amplitude, period=p.period, phase=p.phase))


class MarkovParams(Params):
    p_on_off: float = Field(gt=0, le=1, description="P(online -> offline) per round")
    p_off_on: float = Field(gt=0, le=1, description="P(offline -> online) per round")


register("availability", "markov", MarkovParams,
         "two-state on/off chain per client, one step per round, stationary start",
         lambda p, ctx=None: av.MarkovAvailability(p_on_off=p.p_on_off, p_off_on=p.p_off_on))


class RoundTraceParams(Params):
    path: str = Field(description="CSV: round, client, available (e.g. a run's clients.csv)")
    repeat: bool = Field(True, description="wrap around after the trace's last round")
    _f = field_validator("path")(_file)


def _round_trace(p, ctx=None):
    table, last = _wrap_value_error(av.RoundTraceAvailability.read, p.path)
    return av.RoundTraceAvailability(table=table, last_round=last, repeat=p.repeat)


register("availability", "round_trace", RoundTraceParams, "replay per-round availability from a CSV", _round_trace)


class MarkovTimeParams(Params):
    mean_on: float = Field(gt=0, description="mean online period, seconds (exponential)")
    mean_off: float = Field(gt=0, description="mean offline period, seconds (exponential)")


register("availability", "markov_time", MarkovTimeParams,
         "continuous time: exponential on/off periods, stationary start; going offline interrupts work",
         lambda p, ctx=None: av.MarkovTimeAvailability(mean_on=p.mean_on, mean_off=p.mean_off))


class DiurnalParams(Params):
    mean: float = Field(0.5, ge=0, le=1, description="mean probability of being online")
    amplitude: float = Field(0.4, ge=0, le=1, description="sine amplitude of the probability")
    period: float = Field(86400.0, gt=0, description="seconds per cycle (a day)")
    phase: float = Field(0.0, description="phase in radians")
    slot: float = Field(900.0, gt=0, description="seconds per on/off decision")
    spread: float = Field(0.0, ge=0, le=1, description="per-client random shift of the cycle, as a share of the period")


register("availability", "diurnal", DiurnalParams,
         "continuous time: online per slot with a sine-modulated probability over a day",
         lambda p, ctx=None: av.DiurnalAvailability(mean=p.mean, amplitude=p.amplitude, period=p.period,
                                                    phase=p.phase, slot=p.slot, spread=p.spread))


class TraceParams(Params):
    path: str = Field(description="CSV: client, start, end [, period] online intervals (seconds)")
    repeat: bool = Field(True, description="repeat each client's trace with its period")
    _f = field_validator("path")(_file)


register("availability", "trace", TraceParams, "continuous time: replay online intervals from a CSV",
         lambda p, ctx=None: av.TraceAvailability(trace=_wrap_value_error(av.read_interval_trace, p.path),
                                                  repeat=p.repeat))


# ============================================================================ selection
class _KOrFraction(Params):
    k: Optional[int] = Field(None, ge=1, description="clients per round")
    fraction: Optional[float] = Field(None, gt=0, le=1, description="or a fraction of all clients (k = ceil(fraction*N))")

    @model_validator(mode="after")
    def _one(self):
        if (self.k is None) == (self.fraction is None):
            raise ValueError("give exactly one of k or fraction")
        return self


class UniformSelectParams(_KOrFraction):
    pass


register("selection", "uniform", UniformSelectParams, "k available clients uniformly without replacement",
         lambda p, ctx=None: sel.UniformSelection(k=p.k, fraction=p.fraction))


class AllSelectParams(Params):
    pass


register("selection", "all", AllSelectParams, "every available client", lambda p, ctx=None: sel.AllSelection())


class CyclicParams(_KOrFraction):
    pass


register("selection", "cyclic", CyclicParams, "fixed order, the next block of k clients each round (wrapping)",
         lambda p, ctx=None: sel.CyclicSelection(k=p.k, fraction=p.fraction))
register("selection", "reshuffled_cyclic", CyclicParams,
         "a new random order every epoch of ceil(N/k) rounds, one block per round",
         lambda p, ctx=None: sel.ReshuffledCyclicSelection(k=p.k, fraction=p.fraction))


class BiasedParams(Params):
    p: Optional[Union[float, list]] = Field(None, description="probability per client (one number or a list of N)")
    start: Optional[float] = Field(None, ge=0, le=1, description="or a staircase: p_i = max(floor, start - step*floor(i/every))")
    step: float = Field(0.0, ge=0, description="staircase step")
    every: int = Field(1, ge=1, description="clients per stair")
    floor: float = Field(0.0, ge=0, le=1, description="smallest probability")

    @model_validator(mode="after")
    def _one(self):
        if (self.p is None) == (self.start is None):
            raise ValueError("give exactly one of p or start (staircase)")
        return self


register("selection", "biased", BiasedParams,
         "each available client independently with its own probability (FedSUM App. H.8 staircase)",
         lambda p, ctx=None: sel.BiasedSelection(p=p.p, start=p.start, step=p.step, every=p.every, floor=p.floor))


class SequenceParams(Params):
    sets: list[list[int]] = Field(min_length=1, description="client ids selected in round 1, 2, ... (0-based ids; [] = nobody)")
    repeat: bool = Field(True, description="start over after the last set (else nobody is selected)")

    @field_validator("sets")
    @classmethod
    def _ids(cls, v):
        if any(c < 0 for s in v for c in s):
            raise ValueError("client ids are >= 0")
        return v


register("selection", "sequence", SequenceParams, "a given sequence of client sets, one per round (replay, hand checks)",
         lambda p, ctx=None: sel.SequenceSelection(sets=p.sets, repeat=p.repeat))


# ============================================================================ group extras and fleet-wide network
class EnergyParams(Params):
    """Power draw of a device group; energy per client per round goes to clients.csv `energy_j`."""
    compute_watts: float = Field(ge=0, description="watts while computing")
    transmit_watts: float = Field(ge=0, description="watts while sending or receiving")
    idle_watts: float = Field(0.0, ge=0, description="watts while online and idle")


class ServerLinkParams(Params):
    """The server's access link, shared by every client's transfers (max-min fair)."""
    up_mbps: float = Field(gt=0, description="capacity towards the server (client uploads), Mbit/s")
    down_mbps: float = Field(gt=0, description="capacity from the server (downloads), Mbit/s")
    latency: float = Field(0.0, ge=0, description="added latency, seconds")


class TopologyLink(Params):
    a: str = Field(description="node")
    b: str = Field(description="node")
    mbps: float = Field(gt=0, description="capacity in each direction, Mbit/s")
    latency: float = Field(0.0, ge=0, description="seconds")


class TopologyParams(Params):
    """A network between clients' access nodes and the server (networkx); transfers follow the
    lowest-latency path and share every link max-min fairly."""
    nodes: list[str] = Field(min_length=1, description="node names")
    links: list[TopologyLink] = Field(description="links {a, b, mbps, latency}")
    server: str = Field(description="the node the server sits at")
    attach: dict[str, str] = Field(default_factory=dict, description="group name -> access node (default: the server's node)")

    @model_validator(mode="after")
    def _known(self):
        names = set(self.nodes)
        bad = [n for n in [self.server, *self.attach.values(), *(x for l in self.links for x in (l.a, l.b))]
               if n not in names]
        if bad:
            raise ValueError(f"unknown node(s) {sorted(set(bad))}; nodes are {self.nodes}")
        return self


class CompressionParams(Params):
    up: float = Field(1.0, gt=0, le=1, description="uplink bytes are scaled by this ratio")
    down: float = Field(1.0, gt=0, le=1, description="downlink bytes are scaled by this ratio")
