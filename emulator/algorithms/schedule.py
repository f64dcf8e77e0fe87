"""What the FedSUM family and its baselines share (shared/specs/fedsum.md sections 4, 5.1):
one local learning rate eta_l (`lr`), one global rate eta_g (`server_lr`, default 1) and
one local learning-rate schedule for all nine methods:

    constant:  eta_l^t = lr
    inv_sqrt:  eta_l^t = lr / sqrt(t/10 + 1)        fedsum.md 5.1 (Table 2) [ref-code], A9

Rounds: flemu counts rounds from 1 (metrics.csv round 0 is the initial model); the spec
counts from 0. Every module of the family maps t_spec = t - 1 (`spec_round`) and writes its
formulas in the spec's numbering.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from ..registry import Params


class ScheduledParams(Params):
    lr: float = Field(gt=0, description="local learning rate eta_l (eta_0 of the schedule)")
    server_lr: float = Field(1.0, gt=0, description="global learning rate eta_g")
    lr_schedule: Literal["constant", "inv_sqrt"] = Field(
        "constant", description="eta_l^t = lr, or lr / sqrt(t/10 + 1) with t the 0-based round (fedsum.md 5.1)")


def spec_round(t: int) -> int:
    """The spec's 0-based round of flemu's 1-based round t."""
    return t - 1


def local_lr(p, t: int) -> float:
    """eta_l^t of flemu round t (1-based), fedsum.md 5.1: lr or lr / sqrt(t_spec/10 + 1)."""
    if p.lr_schedule == "constant":
        return float(p.lr)
    return float(p.lr / math.sqrt(spec_round(t) / 10 + 1))
