"""The selection blocks of the selectors that learn (docs/algorithms/selection.md): Oort, TiFL,
FedCS and power-of-choice, their defaults and the paper-vs-code flags."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from devices import selectors as sel

from ..registry import register
from .selection_params import KOrFraction, SelectionParams


class OortParams(KOrFraction):
    exploration: float = Field(0.9, ge=0, le=1, description="initial exploration share eps_0")
    exploration_decay: float = Field(0.98, gt=0, le=1, description="eps <- max(eps x decay, min) every selection")
    exploration_min: float = Field(0.3, ge=0, le=1, description="smallest exploration share")
    alpha: float = Field(2.0, ge=0, le=100, description="straggler penalty exponent: score x (T/t)^alpha when t > T")
    pacer_step: int = Field(20, ge=1, description="pacer window W, rounds")
    pacer_delta: float = Field(5.0, gt=0, le=100, description="pacer step, percentile points of T")
    round_threshold: float = Field(30.0, gt=0, le=100, description="initial percentile of durations giving T (100: no penalty)")
    cut_off: float = Field(0.05, ge=0, le=100, description="exploitation pool cut-off, x the (n_exploit+1)-th score")
    clip_bound: float = Field(0.9, gt=0, le=1, description="rewards clipped at this quantile")
    blacklist_rounds: int = Field(-1, ge=-1, description="retire clients picked more than this many times (-1: off)")
    blacklist_max_len: float = Field(0.3, ge=0, le=1, description="at most this share of registered clients retired")
    sample_window: float = Field(5.0, ge=1, description="exploration draws from the top sample_window x n_explore")
    utility_cap: float = Field(600.0, gt=0, description="|B_i| cap of the utility (FedScale: 20 steps x 30)")
    filter_less: Optional[int] = Field(None, ge=0, description="clients with fewer samples never register "
                                       "(none: FedScale's 32, lowered so that k clients register)")
    utility: Literal["full", "last_batch", "ema"] = Field(
        "full", description="utility from every sample of the last participation (paper), the last "
                            "mini-batch (FedScale) or an EMA over the first epoch (Oort artifact)")
    rule: Literal["fedscale", "oort_repo"] = Field(
        "fedscale", description="exploit/explore split, pool cut-off and score sign as FedScale or the Oort artifact")
    pacer_tighten: bool = Field(True, description="the pacer also tightens T on a 5x utility change (FedScale)")
    fill_random: bool = Field(False, description="top an under-filled selection up uniformly (Oort artifact)")


def _oort(p, ctx=None):
    return sel.OortSelector(**{k: v for k, v in p.model_dump().items() if k not in ("model", "k", "fraction")})


register("selection", "oort", OortParams,
         "Oort (OSDI 2021): statistical utility x speed penalty, exploration, pacer (FedScale's defaults)", _oort)


class TiflParams(KOrFraction):
    tiers: int = Field(5, ge=1, le=10_000, description="number of tiers M")
    interval: int = Field(10, ge=1, description="rounds between tier-probability updates I")
    credits: Optional[int] = Field(None, ge=1, description="times each tier may be drawn (none: unlimited)")
    adaptive: bool = Field(True, description="move probability to tiers that learn worst (else uniform over tiers)")
    paper_trigger: bool = Field(False, description="update only when the tier last used did not improve (paper)")
    sync_rounds: int = Field(2, ge=1, description="observed rounds before a client's measured time replaces its profile")
    retier_every: int = Field(0, ge=0, description="re-cut the tiers every this many rounds (0: never)")

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.tiers > fleet.clients:
            out.append((f"{at}.tiers", f"{self.tiers} tiers for clients.count = {fleet.clients} clients"))
        return out


register("selection", "tifl", TiflParams, "TiFL (HPDC 2020): one latency tier per round, adaptive tier probabilities",
         lambda p, ctx=None: sel.TiflSelector(tiers=p.tiers, interval=p.interval, credits=p.credits, adaptive=p.adaptive,
                                              paper_trigger=p.paper_trigger, sync_rounds=p.sync_rounds,
                                              retier_every=p.retier_every))


class FedCSParams(SelectionParams):
    fraction_candidates: float = Field(0.1, gt=0, le=1, description="share C of available clients asked for their state")
    k: Optional[int] = Field(None, ge=1, description="with cap_k: admit at most k")
    cap_k: bool = Field(False, description="stop admitting at k (FedCS has no k)")
    upload_model: Literal["sequential", "parallel"] = Field(
        "sequential", description="uploads one at a time in admission order (FedCS) or in parallel")
    strict: bool = Field(True, description="admit while the predicted finish is < the deadline (else <=)")
    t_cs: float = Field(0.0, ge=0, le=1e9, description="seconds of the resource request")
    t_agg: float = Field(0.0, ge=0, le=1e9, description="seconds of the aggregation")

    @model_validator(mode="after")
    def _cap(self):
        if self.cap_k and self.k is None:
            raise ValueError("cap_k needs k")
        return self

    def count(self, n):
        return self.k

    def needs_deadline(self):
        return True

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.k is not None and self.k > fleet.clients:
            out.append((f"{at}.k", f"{self.k} clients per round, but clients.count is {fleet.clients}"))
        return out


register("selection", "fedcs", FedCSParams,
         "FedCS (ICC 2019): greedily admit the candidates that fit the round deadline (needs wait: deadline)",
         lambda p, ctx=None: sel.FedCSSelector(fraction_candidates=p.fraction_candidates, cap_k=p.cap_k,
                                               upload_model=p.upload_model, strict=p.strict, t_cs=p.t_cs,
                                               t_agg=p.t_agg))


class PowerOfChoiceParams(KOrFraction):
    d: Optional[int] = Field(None, ge=1, description="candidates (none: 2k; rpow_d: min(available, 10k))")
    variant: Literal["pow_d", "cpow_d", "rpow_d", "rand"] = Field(
        "pow_d", description="probe all rows, probe probe_batch rows, last training loss (no probe), or random")
    probe_batch: int = Field(64, ge=1, description="cpow_d: rows each probe reads")
    weights: Literal["equal", "samples"] = Field(
        "equal", description="aggregation weights 1/k (the authors' code) or the algorithm's own")

    def probes(self):
        return self.variant in ("pow_d", "cpow_d")

    def gives_weights(self):
        return self.weights == "equal" or self.variant == "rand"

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.d is not None and self.k is not None and self.d < self.k:
            out.append((f"{at}.d", f"d = {self.d} candidates cannot give k = {self.k} clients (d >= k)"))
        return out


register("selection", "power_of_choice", PowerOfChoiceParams,
         "power-of-choice (AISTATS 2022): the k highest-loss of d candidates drawn by data share",
         lambda p, ctx=None: sel.PowerOfChoiceSelector(d=p.d, variant=p.variant, probe_batch=p.probe_batch,
                                                       weights=p.weights))
