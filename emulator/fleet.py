"""Scenario-side description of the fleet: the parameter models of every device model
(compute, availability, network link, selection) and the factories that build the plain
`devices` objects from them. `devices` itself knows nothing of scenarios."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from devices import availability as av
from devices import compute as cm
from devices import network as nw
from devices import selection as sel

from .registry import Params, register

Redraw = Literal["step", "round", "client"]


# ----------------------------------------------------------------------------- compute
class ConstantParams(Params):
    step_time: float = Field(gt=0, description="virtual seconds per local step")


register("compute", "constant", ConstantParams, "every step takes step_time seconds",
         lambda p: cm.ConstantCompute(p.step_time))


class InstantParams(Params):
    pass


register("compute", "instant", InstantParams, "local steps take no virtual time (explicit zero)",
         lambda p: cm.InstantCompute())


class LognormalParams(Params):
    mean_step_time: float = Field(gt=0, description="mean seconds per step")
    sigma: float = Field(gt=0, description="log-space standard deviation")
    redraw: Redraw = Field("round", description="draw per step, once per client per round, or once per client")


register("compute", "lognormal", LognormalParams, "step time ~ LogNormal with the given mean",
         lambda p: cm.LognormalCompute(redraw=p.redraw, mean_step_time=p.mean_step_time, sigma=p.sigma))


# ----------------------------------------------------------------------------- network
class LinkParams(Params):
    latency: float = Field(ge=0, description="one-way latency per message, seconds")
    up_mbps: float = Field(gt=0, description="uplink bandwidth, Mbit/s")
    down_mbps: float = Field(gt=0, description="downlink bandwidth, Mbit/s")


register("network", "link", LinkParams,
         "a dedicated link: time = latency + bytes*8/(mbps*1e6) (the default `model`)",
         lambda p: nw.Link(p.latency, p.up_mbps, p.down_mbps))
register("network", "instant", InstantParams, "transfers take no virtual time (explicit zero)",
         lambda p: nw.InstantLink())


# ----------------------------------------------------------------------------- availability
class AlwaysParams(Params):
    pass


register("availability", "always", AlwaysParams, "always online", lambda p: av.AlwaysOnline())


# ----------------------------------------------------------------------------- selection
class UniformSelectParams(Params):
    k: Optional[int] = Field(None, ge=1, description="clients per round")
    fraction: Optional[float] = Field(None, gt=0, le=1, description="or a fraction of all clients (k = ceil(fraction*N))")

    @model_validator(mode="after")
    def _one(self):
        if (self.k is None) == (self.fraction is None):
            raise ValueError("give exactly one of k or fraction")
        return self


register("selection", "uniform", UniformSelectParams, "k available clients uniformly without replacement",
         lambda p: sel.UniformSelection(k=p.k, fraction=p.fraction))


class AllSelectParams(Params):
    pass


register("selection", "all", AllSelectParams, "every available client", lambda p: sel.AllSelection())
