"""FedAvg — McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017, Algorithm 1 (FederatedAveraging).

Server (Alg. 1, ServerExecutes):   w_{t+1} <- sum_{k in S_t} (n_k / m_t) w^k_{t+1},  m_t = sum n_k
  with an optional server learning rate eta_g (Reddi et al. 2021, "Adaptive Federated
  Optimization", Alg. 1 with SGD server optimiser):  w_{t+1} = w_t + eta_g (avg - w_t);
  eta_g = 1 is McMahan's rule. `weighting: uniform` uses 1/|S_t| instead of n_k/m_t.
Client (Alg. 1, ClientUpdate):      E local steps  w <- w - eta * grad l(w; b)  from w_t,
  here with optional momentum and weight decay (PyTorch SGD semantics) and a per-round
  decay eta_t = eta * lr_decay^(t-1).
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ..compute.jobs import LocalRule, LocalSpec
from ..registry import Params, register
from .base import Aggregation, Algorithm, Upload, row_weights, sample_weights, weighted_sum


class FedAvgParams(Params):
    lr: float = Field(gt=0, description="local learning rate eta")
    momentum: float = Field(0.0, ge=0, lt=1, description="local SGD momentum")
    weight_decay: float = Field(0.0, ge=0, description="local L2 weight decay")
    lr_decay: float = Field(1.0, gt=0, le=1, description="per-round factor: eta_t = lr * lr_decay^(t-1)")
    lr_offset: Optional[float] = Field(None, gt=0, description="or eta_t = lr / (lr_offset + t) (t from 1; multi-model paper: 30 / (100 + t))")
    weighting: Literal["samples", "uniform"] = Field("samples", description="server weights n_k/m_t or 1/|S_t|")
    server_lr: float = Field(1.0, gt=0, description="server learning rate eta_g (1 = plain averaging)")


class FedAvg(Algorithm, cohort_path=True, selection_weights=True):
    """Alg. 1 ClientUpdate is the same for every client: one spec per round, declared with
    `cohort_path=True`; a subclass is client by client unless it declares it again
    (`Algorithm.cohort_path`: it is not inherited)."""

    name = "fedavg"
    up_reference = "start"        # uploads w^k_{t+1} (docs/algorithms/compression.md 1.1)
    supports = frozenset({"rounds", "intervals", "multi_model"})

    def lr(self, t: int) -> float:
        """Local learning rate of round t (1-based): lr * lr_decay^(t-1), or with
        `lr_offset` b the decaying lr / (b + t) (docs/algorithms/multimodel.md 2.6: 30 / (100 + t))."""
        b = self.p.lr_offset
        if b is not None:
            return self.p.lr / (b + t)
        return self.p.lr * (self.p.lr_decay ** max(t - 1, 0))

    def local_rule(self, t: int) -> LocalRule:
        return LocalRule(lr=self.lr(t), momentum=self.p.momentum, weight_decay=self.p.weight_decay)

    def local_spec(self, client, t, received):
        # Alg. 1 ClientUpdate(k, w): start from the broadcast w_t
        return LocalSpec(start=received.vectors[0], rule=self.local_rule(t))

    def upload(self, client, t, result):
        # Alg. 1 ClientUpdate: "return w to server"
        return Upload([result.params], result=result)

    def cohort_spec(self, t, received):
        # Alg. 1 ClientUpdate is the same for every client: one spec for the round
        if not self.cohort_path:
            return None
        return self.local_spec(None, t, received)

    def aggregate(self, t, arrivals):
        if not arrivals:
            return Aggregation()
        p = sample_weights(arrivals, self.p.weighting)              # n_k / m_t
        return self._average([a.client for a in arrivals], [a.vectors[0] for a in arrivals], p)

    def aggregate_rows(self, t, rows):
        if not len(rows):
            return Aggregation()
        return self._average(rows.clients.tolist(), rows.params, row_weights(rows, self.p.weighting))

    def _average(self, clients, vectors, p):
        avg = weighted_sum(vectors, p)                              # sum_k (n_k/m_t) w^k_{t+1}
        # eta_g = 1: w_{t+1} = avg exactly (x + (avg - x) would differ in the last bit)
        self.x = avg if self.p.server_lr == 1.0 else self.x + self.p.server_lr * (avg - self.x)
        return Aggregation(dict(zip(clients, p.tolist())))


register("algorithm", "fedavg", FedAvgParams,
         "FedAvg (McMahan et al. 2017): local SGD, sample-weighted model averaging", FedAvg)
