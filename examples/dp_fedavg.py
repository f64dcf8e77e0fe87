"""DP-FedAvg with DP-SGD on the clients (Abadi et al., "Deep Learning with Differential
Privacy", CCS 2016, Algorithm 1): a plugin whose client side is a per-sample transform and a
noisy gradient transform (docs/local-training.md, depth a).

Each local step on a mini-batch B:  g_i = grad l_i(w);  g_i <- g_i / max(1, |g_i| / C);
g = (1/|B|) (sum_i g_i + N(0, sigma^2 C^2 I));  w <- w - lr g.  The noise comes from the job's
keyed stream ("local_noise", client, round, model): the same whichever executor runs it.
The server averages as FedAvg. summary.json records the noise multiplier and clipping norm.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from emulator.api import ClipPerSample, FedAvg, FedAvgParams, GradTransform, LocalRule, register


@dataclass(frozen=True)
class DPGaussianNoise(GradTransform):
    """g + sigma C / |B| z: the noise N(0, sigma^2 C^2) of the clipped sum, on the batch mean."""

    noise_multiplier: float
    clip: float
    needs_noise: ClassVar[bool] = True

    def __call__(self, g, ctx):
        return g + (self.noise_multiplier * self.clip / ctx.batch_size) * ctx.noise


class DPFedAvgParams(FedAvgParams):
    clip: float = Field(1.0, gt=0, description="per-sample gradient clipping norm C")
    noise_multiplier: float = Field(1.0, ge=0, description="sigma: noise std sigma*C on each batch's clipped sum")


class DPFedAvg(FedAvg, cohort_path=True):    # one local rule for every client: FedAvg's cohort path
    name = "dp_fedavg"

    def local_rule(self, t):
        p = self.p
        return LocalRule(lr=self.lr(t), momentum=p.momentum, weight_decay=p.weight_decay,
                         per_sample=(ClipPerSample(p.clip),),
                         transforms=(DPGaussianNoise(p.noise_multiplier, p.clip),))

    def summary(self):
        return {"dp": {"mechanism": "DP-SGD local steps: per-sample clipping, Gaussian noise",
                       "clip_norm": self.p.clip, "noise_multiplier": self.p.noise_multiplier}}


register("algorithm", "dp_fedavg", DPFedAvgParams,
         "DP-FedAvg: local DP-SGD (per-sample clipping to C, Gaussian noise sigma*C), FedAvg server", DPFedAvg)
