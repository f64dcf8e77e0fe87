"""FedProx — Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020,
Algorithm 2.

Client (Alg. 2 line 6): approximately minimise h_k(w; w^t) = F_k(w) + (mu/2) ||w - w^t||^2
  by local SGD: every step uses the gradient g + mu (w - w^t), anchor w^t = the broadcast.
  The number of local steps is whatever the protocol lets the client complete (FedProx's
  "variable amount of local work", gamma-inexact solutions).
Server (Alg. 2 line 7): w^{t+1} = average of the received w_k^{t+1}. FedProx samples devices
  with probabilities p_k and takes a simple mean; under uniform selection the equivalent
  is the n_k-weighted mean used here by default (`weighting: samples`, T-SFL spec A13);
  `weighting: uniform` gives the simple mean.
"""
from __future__ import annotations

from pydantic import Field

from ..compute.jobs import LocalRule
from ..registry import register
from .fedavg import FedAvg, FedAvgParams


class FedProxParams(FedAvgParams):
    mu: float = Field(0.01, ge=0, description="proximal coefficient mu")


class FedProx(FedAvg, cohort_path=True, selection_weights=True):          # one proximal rule for every client
    name = "fedprox"

    def local_rule(self, t):
        # Alg. 2 line 6: grad of F_k(w) + mu/2 ||w - w^t||^2; the anchor defaults to the start w^t
        return LocalRule(lr=self.lr(t), momentum=self.p.momentum, weight_decay=self.p.weight_decay,
                         prox_mu=self.p.mu)


register("algorithm", "fedprox", FedProxParams,
         "FedProx (Li et al. 2020): FedAvg with a proximal term mu/2 ||w - w^t||^2", FedProx)
