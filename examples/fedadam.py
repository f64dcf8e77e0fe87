"""FedAdam and FedYogi: adaptive server optimisers (Reddi et al. 2021, "Adaptive Federated
Optimization", ICLR, Algorithm 2). Clients run local SGD as in FedAvg; the server treats the
averaged change as a pseudo-gradient:

    Delta_t = sum_k p_k x^k_{t+1} - x_t
    m_t     = beta1 m_{t-1} + (1 - beta1) Delta_t                          (m_0 = 0)
    FedAdam: v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2
    FedYogi: v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)   (v_0 = tau^2)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)                            (eta: server_lr)

Use with `plugins: [fedadam.py]` and `algorithm: {name: fedadam, lr: 0.05, server_lr: 0.1}`.
"""
import torch
from pydantic import Field

from emulator.api import Aggregation, FedAvg, FedAvgParams, register, sample_weights, weighted_sum


class FedAdamParams(FedAvgParams):
    beta1: float = Field(0.9, ge=0, lt=1, description="first-moment decay beta_1")
    beta2: float = Field(0.99, ge=0, lt=1, description="second-moment decay beta_2")
    tau: float = Field(1e-3, gt=0, description="adaptivity tau (v_0 = tau^2)")


class _ServerAdaptive(FedAvg):
    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.m = torch.zeros_like(self.x)
        self.v = torch.full_like(self.x, params.tau ** 2)

    def second_moment(self, d2):
        raise NotImplementedError

    def aggregate(self, t, arrivals):
        if not arrivals:
            return Aggregation()
        p = sample_weights(arrivals, self.p.weighting)
        delta = weighted_sum([a.vectors[0] for a in arrivals], p) - self.x      # Delta_t
        self.m = self.p.beta1 * self.m + (1 - self.p.beta1) * delta
        self.v = self.second_moment(delta * delta)
        self.x = self.x + self.p.server_lr * self.m / (self.v.sqrt() + self.p.tau)
        return Aggregation(dict(zip([a.client for a in arrivals], p.tolist())))


@register("algorithm", "fedadam", FedAdamParams, "FedAdam (Reddi et al. 2021): Adam on the server")
class FedAdam(_ServerAdaptive):
    def second_moment(self, d2):
        return self.p.beta2 * self.v + (1 - self.p.beta2) * d2


@register("algorithm", "fedyogi", FedAdamParams, "FedYogi (Reddi et al. 2021): Yogi on the server")
class FedYogi(_ServerAdaptive):
    def second_moment(self, d2):
        return self.v - (1 - self.p.beta2) * d2 * torch.sign(self.v - d2)
