"""FedAvgM: FedAvg with server momentum (Hsu, Qi and Brown 2019, "Measuring the effects of
non-identical data distribution"; Reddi et al. 2021, Alg. 1 with momentum SGD as the server
optimiser).

    Delta_t = x_t - sum_k p_k x^k_{t+1}        (the round's pseudo-gradient)
    v_t     = beta v_{t-1} + Delta_t             (v_0 = 0)
    x_{t+1} = x_t - eta_g v_t                    (eta_g: server_lr)

Use it with `plugins: [fedavgm.py]` and `algorithm: {name: fedavgm, lr: 0.1, beta: 0.9}`.
"""
import torch
from pydantic import Field

from emulator.api import Aggregation, FedAvg, FedAvgParams, register, sample_weights, weighted_sum


class FedAvgMParams(FedAvgParams):
    beta: float = Field(0.9, ge=0, lt=1, description="server momentum beta")


@register("algorithm", "fedavgm", FedAvgMParams, "FedAvgM (Hsu et al. 2019): FedAvg with server momentum")
class FedAvgM(FedAvg):
    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.v = torch.zeros_like(self.x)                                         # v_0 = 0

    def aggregate(self, t, arrivals):
        if not arrivals:
            return Aggregation()
        p = sample_weights(arrivals, self.p.weighting)                            # n_k / m_t
        delta = self.x - weighted_sum([a.vectors[0] for a in arrivals], p)        # Delta_t
        self.v = self.p.beta * self.v + delta
        self.x = self.x - self.p.server_lr * self.v
        return Aggregation(dict(zip([a.client for a in arrivals], p.tolist())))
