"""FedAvg with Adam on the clients (a fresh torch.optim.Adam per local job): a plugin whose
client side is any torch.optim optimizer (docs/local-training.md, depth b). The server
averages as FedAvg. Jobs run on the sequential loop (summary.json `executor_paths` says so)."""
from __future__ import annotations

import torch
from pydantic import Field

from emulator.api import FedAvg, FedAvgParams, OptimizerRule, register


class LocalAdamParams(FedAvgParams):
    momentum: float = Field(0.0, ge=0, le=0, description="unused (Adam's betas replace momentum)")
    beta1: float = Field(0.9, ge=0, lt=1, description="Adam beta1")
    beta2: float = Field(0.999, ge=0, lt=1, description="Adam beta2")
    eps: float = Field(1e-8, gt=0, description="Adam epsilon")


class LocalAdam(FedAvg, cohort_path=True):    # one local rule for every client: FedAvg's cohort path
    name = "local_adam"

    def local_rule(self, t):
        p = self.p
        return OptimizerRule(optimizer=torch.optim.Adam,
                             options={"lr": self.lr(t), "betas": (p.beta1, p.beta2), "eps": p.eps,
                                      "weight_decay": p.weight_decay})


register("algorithm", "local_adam", LocalAdamParams,
         "FedAvg with a local torch.optim.Adam on each client (fresh per round)", LocalAdam)
