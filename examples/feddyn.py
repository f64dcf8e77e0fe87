"""FedDyn — Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR 2021,
Algorithm 1: a plugin whose client side is a custom loss term (docs/local-training.md, depth a).

Client k (line 6): theta_k^t = argmin L_k(theta) - <grad_k, theta> + alpha/2 |theta - theta^{t-1}|^2,
  by the protocol's local SGD steps; `FedDynTerm` is the two extra terms, its gradient
  -grad_k + alpha (theta - theta^{t-1}).
Client state (line 7): grad_k <- grad_k - alpha (theta_k^t - theta^{t-1})   (grad_k^0 = 0)
Server (lines 9-10): h^t = h^{t-1} - alpha/m sum_{k in P_t} (theta_k^t - theta^{t-1}),
  theta^t = mean_{k in P_t} theta_k^t - h^t / alpha     (m: all clients)
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from emulator.api import (Aggregation, Algorithm, LocalRule, LocalSpec, LossTerm, Params, Upload,
                          register)

GRAD = "feddyn_grad"          # per-client state: grad_k, the client's last local gradient estimate


@dataclass(frozen=True)
class FedDynTerm(LossTerm):
    """-<grad_k, w> + alpha/2 |w - theta^{t-1}|^2 (grad_k: the spec's vector "grad")."""

    alpha: float

    def __call__(self, w, ctx):
        return -(ctx.vectors["grad"] * w).sum() + 0.5 * self.alpha * (w - ctx.start).pow(2).sum()


class FedDynParams(Params):
    lr: float = Field(gt=0, description="local learning rate")
    alpha: float = Field(0.01, gt=0, description="dynamic regulariser alpha")


class FedDyn(Algorithm):
    name = "feddyn"
    supports = frozenset({"rounds"})

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.h = self.x.new_zeros(self.x.shape)

    def local_spec(self, client, t, received):
        # line 6: start from theta^{t-1}; grad_k read lazily (a pending state stays uncomputed)
        return LocalSpec(start=received.vectors[0], rule=LocalRule(lr=self.p.lr, terms=(FedDynTerm(self.p.alpha),)),
                         vectors={"grad": self.states.get(GRAD, client)})

    def upload(self, client, t, result):
        return Upload([result.params], result=result)

    def aggregate(self, t, arrivals):
        arr = [a for a in arrivals if a.steps > 0]
        if not arr:
            return Aggregation()
        a_, x = self.p.alpha, self.x
        for a in arr:                                            # line 7, for the clients heard from
            self.states.put(GRAD, a.client, self.states.row(GRAD, a.client) - a_ * (a.vectors[0] - x))
        delta = sum(a.vectors[0] - x for a in arr)
        self.h = self.h - a_ / self.ctx.num_clients * delta       # line 9
        self.x = sum(a.vectors[0] for a in arr) / len(arr) - self.h / a_   # line 10
        return Aggregation({a.client: 1.0 / len(arr) for a in arr})


register("algorithm", "feddyn", FedDynParams,
         "FedDyn (Acar et al. 2021): dynamic regulariser as a local loss term; per-client gradient state", FedDyn)
