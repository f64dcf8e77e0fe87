"""FedAvg with the clients' mini-batch gradients clipped to a norm (docs/local-training.md,
depth a: a gradient transform; batched and sequential paths alike)."""
from __future__ import annotations

from dataclasses import replace

from pydantic import Field

from emulator.api import ClipNorm, FedAvg, FedAvgParams, register


class ClipFedAvgParams(FedAvgParams):
    max_norm: float = Field(1.0, gt=0, description="each local step's gradient clipped to this norm")


class ClipFedAvg(FedAvg, cohort_path=True):    # one local rule for every client: FedAvg's cohort path
    name = "fedavg_clip"

    def local_rule(self, t):
        return replace(super().local_rule(t), transforms=(ClipNorm(self.p.max_norm),))


register("algorithm", "fedavg_clip", ClipFedAvgParams,
         "FedAvg with local gradient-norm clipping", ClipFedAvg)
