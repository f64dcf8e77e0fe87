"""What the FedSUM family and its baselines share (docs/algorithms/fedsum.md sections 4, 5.1):
one local learning rate eta_l (`lr`), one global rate eta_g (`server_lr`, default 1) and
one local learning-rate schedule for all nine methods:

    constant:  eta_l^t = lr
    inv_sqrt:  eta_l^t = lr / sqrt(t/10 + 1)        docs/algorithms/fedsum.md 5.1 (Table 2) [ref-code], A9

Rounds: flemu counts rounds from 1 (metrics.csv round 0 is the initial model); the spec
counts from 0. Every module of the family maps t_spec = t - 1 (`spec_round`) and writes its
formulas in the spec's numbering.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from ..compute.jobs import LocalRule, LocalSpec
from ..compute.lazy import derived
from ..registry import Params
from .base import Algorithm, Upload


class ScheduledParams(Params):
    lr: float = Field(gt=0, description="local learning rate eta_l (eta_0 of the schedule)")
    server_lr: float = Field(1.0, gt=0, description="global learning rate eta_g")
    lr_schedule: Literal["constant", "inv_sqrt"] = Field(
        "constant", description="eta_l^t = lr, or lr / sqrt(t/10 + 1) with t the 0-based round (docs/algorithms/fedsum.md 5.1)")


def spec_round(t: int) -> int:
    """The spec's 0-based round of flemu's 1-based round t."""
    return t - 1


def local_lr(p, t: int) -> float:
    """eta_l^t of flemu round t (1-based), docs/algorithms/fedsum.md 5.1: lr or lr / sqrt(t_spec/10 + 1)."""
    if p.lr_schedule == "constant":
        return float(p.lr)
    return float(p.lr / math.sqrt(spec_round(t) / 10 + 1))


class Scheduled(Algorithm):
    """An algorithm of the FedSUM comparison: its local rate is eta_l^t of `local_lr`."""

    def lr(self, t):
        return local_lr(self.p, t)


class LocalSgdDelta(Scheduled):
    """Clients run LocalSGD(x^t): K plain SGD steps at eta_l^t from the broadcast x^t, and upload
    Delta_i = y_K - x^t (MIFA, FedVARP, FedAU: docs/algorithms/fedsum.md section 4). The server must not move x
    between the broadcast and the uploads (it does not under `rounds`)."""

    up_reference = "zero"         # uploads Delta_i, an update (docs/algorithms/compression.md 1.1)

    def local_spec(self, client, t, received):
        return LocalSpec(start=received.vectors[0], rule=LocalRule(lr=self.lr(t)))

    def upload(self, client, t, result):
        x = self.x                                  # x^t: the server has not moved since the broadcast
        return Upload([derived(lambda r: r.params - x, result)], result=result)   # Delta_i = y_K - x^t
