"""DP-SGD on the clients, FedAvg on the server (docs/algorithms/dp.md section 4; Abadi et al.,
"Deep Learning with Differential Privacy", CCS 2016, Algorithm 1): a built-in local rule made
of a per-sample transform and a noisy gradient transform (docs/local-training.md, depth a).

Each local step on a mini-batch B:  g_i = grad l_i(w);  g_i <- g_i / max(1, |g_i| / C);
g = (1/|B|) (sum_i g_i + N(0, sigma^2 C^2 I));  w <- w - lr g.  The noise comes from the job's
keyed stream ("local_noise", client, round, model): the same whichever executor runs it.
The server averages as FedAvg. summary.json records the noise multiplier and clipping norm
(sample-level privacy is not accounted: dp.md section 4).
"""
from __future__ import annotations

from pydantic import Field

from ..compute.jobs import LocalRule
from ..compute.pieces import ClipPerSample, DPGaussianNoise
from ..registry import register
from .fedavg import FedAvg, FedAvgParams


class DPSGDParams(FedAvgParams):
    clip: float = Field(1.0, gt=0, description="per-sample gradient clipping norm C")
    noise_multiplier: float = Field(1.0, ge=0, description="sigma: noise std sigma*C on each batch's clipped sum")


class DPSGD(FedAvg, cohort_path=True):    # one local rule for every client: FedAvg's cohort path
    name = "dp_sgd"

    def local_rule(self, t):
        p = self.p
        return LocalRule(lr=self.lr(t), momentum=p.momentum, weight_decay=p.weight_decay,
                         per_sample=(ClipPerSample(p.clip),),
                         transforms=(DPGaussianNoise(p.noise_multiplier, p.clip),))

    def summary(self):
        return {"dp": {"mechanism": "DP-SGD local steps: per-sample clipping, Gaussian noise",
                       "clip_norm": self.p.clip, "noise_multiplier": self.p.noise_multiplier}}


register("algorithm", "dp_sgd", DPSGDParams,
         "DP-SGD local steps (per-sample clipping to C, Gaussian noise sigma*C; Abadi et al. 2016), FedAvg server",
         DPSGD)
