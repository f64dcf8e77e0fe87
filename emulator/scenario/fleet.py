"""Scenario-side description of the fleet: the parameter models of every device model
(compute, availability, network link; selection in selection_params.py), the fleet-wide network settings, and the
factories that build the plain `devices` objects. `devices` itself knows nothing of
scenarios; factories get a `GroupContext` (the group's client ids, the scenario's folder,
label histograms) where a model needs one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
from pydantic import Field, field_validator, model_validator

from devices import compute as cm
from devices import limits as L
from devices import network as nw
from devices.trace_files import read_links, read_step_trace

from . import availability_params  # noqa: F401  (registers the availability models)
from . import selection_params  # noqa: F401  (registers the selection models)
from .quantities import FiniteParams, MaybeSeconds, bandwidth, seconds, table, trace_file
from ..registry import Params, extension_point, register

extension_point("compute", cm.ComputeModel)          # a registered class extends it (devices/compute.py)
extension_point("network", nw.LinkModel)             # ... and this one (devices/network.py)

Redraw = Literal["step", "round", "client"]
REDRAW_DOC = "draw per step, once per client per round, or once per client for the whole run"


@dataclass
class GroupContext:
    members: np.ndarray = None          # client ids of the group
    labels: Optional[np.ndarray] = None  # (members, classes) label histograms of task 0
    base_dir: Optional[str] = None


# ============================================================================ compute
class ConstantParams(FiniteParams):
    step_time: float = seconds(description="virtual seconds per local step")


register("compute", "constant", ConstantParams, "every step takes step_time seconds",
         lambda p, ctx=None: cm.ConstantCompute(p.step_time))


class InstantParams(FiniteParams):
    pass


register("compute", "instant", InstantParams, "local steps take no virtual time (explicit zero)",
         lambda p, ctx=None: cm.InstantCompute())


class LognormalParams(FiniteParams):
    mean_step_time: float = seconds(description="mean seconds per step")
    sigma: float = Field(gt=0, le=L.MAX_SIGMA, description="log-space standard deviation")
    redraw: Redraw = Field("round", description=REDRAW_DOC)


register("compute", "lognormal", LognormalParams, "step time ~ LogNormal with the given mean",
         lambda p, ctx=None: cm.LognormalCompute(redraw=p.redraw, mean_step_time=p.mean_step_time, sigma=p.sigma))


class NormalParams(FiniteParams):
    mean_step_time: float = seconds(description="mean seconds per step")
    std: float = Field(gt=0, le=L.MAX_SECONDS, description="standard deviation")
    floor: float = seconds(1e-3, description="draws below this are redrawn (positive floor)")
    redraw: Redraw = Field("round", description=REDRAW_DOC)


register("compute", "normal", NormalParams, "step time ~ Normal(mean, std) truncated at a positive floor",
         lambda p, ctx=None: cm.NormalCompute(redraw=p.redraw, mean_step_time=p.mean_step_time, std=p.std, floor=p.floor))


class UniformParams(FiniteParams):
    low: float = seconds(description="shortest step time")
    high: float = seconds(description="longest step time")
    redraw: Redraw = Field("round", description=REDRAW_DOC)

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


register("compute", "uniform", UniformParams, "step time ~ Uniform(low, high)",
         lambda p, ctx=None: cm.UniformCompute(redraw=p.redraw, low=p.low, high=p.high))


class ExponentialParams(FiniteParams):
    mean_step_time: float = seconds(description="mean seconds per step")
    redraw: Redraw = Field("round", description=REDRAW_DOC)


register("compute", "exponential", ExponentialParams, "step time ~ Exponential(mean)",
         lambda p, ctx=None: cm.ExponentialCompute(redraw=p.redraw, mean_step_time=p.mean_step_time))


class IterationsParams(FiniteParams):
    fixed: Optional[int] = Field(None, ge=0, le=10**9, description="iterations per period (T-SFL Cases 1, 2)")
    mean: Optional[float] = Field(None, ge=-1e9, le=1e9, description="or floor(N(mean, std)) redrawn every round (T-SFL Case 3)")
    std: float = Field(0.0, ge=0, le=1e9, description="standard deviation of the draw")
    period: float = seconds(1.0, description="seconds the iterations take (the T-SFL interval length)")

    @model_validator(mode="after")
    def _one(self):
        if (self.fixed is None) == (self.mean is None):
            raise ValueError("give exactly one of fixed or mean")
        return self


register("compute", "iterations", IterationsParams,
         "iterations per period given directly (T-SFL): each takes period/tau seconds",
         lambda p, ctx=None: cm.IterationsCompute(period=p.period, fixed=p.fixed, mean=p.mean, std=p.std))


class FlopsParams(FiniteParams):
    profile: Optional[Literal[tuple(cm.DEVICE_PROFILES)]] = Field(
        None, description="named device: " + ", ".join(f"{k} ({v:g} GFLOP/s)" for k, v in cm.DEVICE_PROFILES.items()))
    gflops: Optional[float] = Field(None, ge=1e-6, le=1e9, description="or an effective GFLOP/s of your own")

    @model_validator(mode="after")
    def _one(self):
        if (self.profile is None) == (self.gflops is None):
            raise ValueError("give exactly one of profile or gflops")
        return self


register("compute", "flops", FlopsParams,
         "step time = 6 x model MACs x batch / device FLOP rate (illustrative profiles)",
         lambda p, ctx=None: cm.FlopsCompute(gflops=p.gflops or cm.DEVICE_PROFILES[p.profile]))


class ComputeTraceParams(FiniteParams):
    path: str = Field(description="CSV: client, start, and step_time | sample_time | speed (each row within "
                                  "devices/limits.py's ranges)")

    _f = field_validator("path")(trace_file(read_step_trace))


def _compute_trace(p, ctx):
    return cm.TraceCompute(trace=table(read_step_trace, p.path), members=list(ctx.members))


register("compute", "trace", ComputeTraceParams, "replay per-client step times or speeds over time from a CSV",
         _compute_trace)


# ============================================================================ network links
class LatencyParams(FiniteParams):
    """Per-message latency of a link: fixed part plus a random jitter (devices.network.jitter_draw)."""
    latency: MaybeSeconds = seconds(zero=True, description="one-way latency per message, seconds")
    jitter: MaybeSeconds = seconds(0.0, zero=True, description="mean extra latency per message, seconds")
    jitter_dist: Literal["exponential", "uniform", "lognormal"] = Field(
        "exponential", description="jitter distribution: Exponential(mean), Uniform(0, 2 mean), LogNormal with that mean")
    jitter_sigma: float = Field(1.0, gt=0, le=L.MAX_SIGMA, description="log-space spread of lognormal jitter")


class LinkParams(LatencyParams):
    up_mbps: float = bandwidth(description="uplink bandwidth, Mbit/s")
    down_mbps: float = bandwidth(description="downlink bandwidth, Mbit/s")
    spread: float = Field(0.0, ge=0, le=L.MAX_SIGMA, description="per-client bandwidth factor ~ LogNormal(-s^2/2, s), mean 1")


register("network", "link", LinkParams,
         "a client's own link: time = latency + bytes*8/(mbps*1e6) (the default `model`)",
         lambda p, ctx=None: nw.Link(p.latency, p.up_mbps, p.down_mbps, p.jitter, p.spread,
                                     p.jitter_dist, p.jitter_sigma))
register("network", "instant", InstantParams, "transfers take no virtual time (explicit zero)",
         lambda p, ctx=None: nw.InstantLink())


class LinkTraceParams(LatencyParams):
    path: str = Field(description="CSV: client, up_mbps, down_mbps (e.g. from `flemu traces import-fedscale`)")
    _f = field_validator("path")(trace_file(read_links))


def _link_trace(p, ctx):
    return nw.TraceLink(table(read_links, p.path), list(ctx.members), p.latency, p.jitter,
                        p.jitter_dist, p.jitter_sigma)


register("network", "link_trace", LinkTraceParams, "per-client bandwidths from a links CSV", _link_trace)


# ============================================================================ group extras and fleet-wide network
class EnergyParams(FiniteParams):
    """Power draw of a device group; energy per client per round goes to clients.csv `energy_j`."""
    compute_watts: float = Field(ge=0, le=1e6, description="watts while computing")
    transmit_watts: float = Field(ge=0, le=1e6, description="watts while sending or receiving")
    idle_watts: float = Field(0.0, ge=0, le=1e6, description="watts while online and idle")


class ServerLinkParams(FiniteParams):
    """The server's access link, shared by every client's transfers (max-min fair)."""
    up_mbps: float = bandwidth(description="capacity towards the server (client uploads), Mbit/s")
    down_mbps: float = bandwidth(description="capacity from the server (downloads), Mbit/s")
    latency: MaybeSeconds = seconds(0.0, zero=True, description="added latency, seconds")


class TopologyLink(FiniteParams):
    a: str = Field(description="node")
    b: str = Field(description="node")
    mbps: float = bandwidth(description="capacity in each direction, Mbit/s")
    latency: MaybeSeconds = seconds(0.0, zero=True, description="seconds")


class TopologyParams(FiniteParams):
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
        graph = nw.build_topology(self.nodes, [l.model_dump() for l in self.links])
        import networkx as nx
        cut = sorted(n for n in {*self.attach.values()} if not nx.has_path(graph, n, self.server))
        if cut:
            raise ValueError(f"node(s) {cut} have no path of links to the server's node {self.server!r}: "
                             "their clients could never reach the server")
        return self


class CompressionParams(FiniteParams):
    up: float = Field(1.0, gt=0, le=1, description="uplink bytes are scaled by this ratio")
    down: float = Field(1.0, gt=0, le=1, description="downlink bytes are scaled by this ratio")
