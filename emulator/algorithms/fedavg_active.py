"""FedAvg over the active clients, as the FedSUM comparison runs it (docs/algorithms/fedsum.md
section 4, "FedAvg (active)"): K plain SGD steps at eta_l^t from x^t, then
    x^{t+1} = x^t + eta_g (1/|S^t|) sum_{i in S^t} (y_K - x^t);   unchanged if S^t = {}.
This is `fedavg` with `weighting: uniform` and `server_lr: eta_g` (x + eta_g (avg - x) is the
same step); `fedavg_active` only adds the family's shared learning-rate schedule
(`lr_schedule: inv_sqrt`, docs/algorithms/fedsum.md 5.1), which `fedavg`'s geometric `lr_decay` cannot express.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..registry import register
from .fedavg import FedAvg
from .schedule import ScheduledParams, local_lr


class FedAvgActiveParams(ScheduledParams):
    weighting: Literal["samples", "uniform"] = Field("uniform", description="1/|S^t| (docs/algorithms/fedsum.md 4) or n_k/m_t")
    momentum: float = Field(0.0, ge=0, lt=1, description="local SGD momentum (the comparison uses 0)")
    weight_decay: float = Field(0.0, ge=0, description="local L2 weight decay (the comparison uses 0)")


class FedAvgActive(FedAvg, cohort_path=True, selection_weights=True):    # FedAvg's client side and aggregation, its own lr
    name = "fedavg_active"

    def lr(self, t):
        return local_lr(self.p, t)


register("algorithm", "fedavg_active", FedAvgActiveParams,
         "FedAvg over the active clients (docs/algorithms/fedsum.md 4): uniform mean of the updates, eta_g, the family's lr schedule",
         FedAvgActive)
