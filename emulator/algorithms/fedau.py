"""FedAU — S. Wang, M. Ji, "A Lightweight Method for Tackling Unknown Participation
Statistics in Federated Averaging", ICLR 2024 (arXiv 2023), Algorithm 1 with its
"ComputeWeight" routine; in the form of the FedSUM experiments' code lineage
(docs/algorithms/fedsum.md section 4, [ref-code]). Rounds: flemu's round t is the spec's t - 1.

Server, round t:  x^{t+1} = x^t + eta_g (1/N) sum_{i in S^t} omega_i^t Delta_i,
  Delta_i = y_K - x^t from K plain SGD steps at eta_l^t (divisor N, not |S^t|: docs/algorithms/fedsum.md 4.1).
ComputeWeight, per client (all N, every round): a_i = rounds absent since the last recorded
interval, and the recorded intervals (kept as their sum and count: two [N] arrays).
  absent:  a_i += 1; if a_i >= K_cut: record interval a_i, a_i = 0
  active:  omega_i^t = mean(recorded intervals), 1 if none;    (the weight is used first)
           then record interval a_i + 1, a_i = 0                (the interval that ends now)
"""
from __future__ import annotations

import numpy as np
from pydantic import Field

from ..registry import register
from .base import Aggregation, weighted_sum
from .schedule import LocalSgdDelta, ScheduledParams

ABSENT, IV_SUM, IV_COUNT = "fedau_absent", "fedau_interval_sum", "fedau_interval_count"


class FedAuParams(ScheduledParams):
    cutoff: int = Field(50, ge=1, description="K_cut: an absence this long is recorded as an interval (docs/algorithms/fedsum.md 4)")


class FedAu(LocalSgdDelta):
    name = "fedau"
    client_state = (ABSENT, IV_SUM, IV_COUNT)
    supports = frozenset({"rounds"})
    weights_total = None          # omega_i / N: the weights sum to |S^t| x mean(omega) / N

    def aggregate(self, t, arrivals):
        N = self.ctx.num_clients
        absent = self.states.scalars(ABSENT, np.int64, 0)
        iv_sum = self.states.scalars(IV_SUM, np.float64, 0.0)
        iv_cnt = self.states.scalars(IV_COUNT, np.int64, 0)
        arr = sorted((a for a in arrivals if a.steps > 0), key=lambda a: a.client)
        active = np.zeros(N, dtype=bool)
        ids = np.array([a.client for a in arr], dtype=np.int64)
        active[ids] = True
        # ComputeWeight, active clients: the mean of the intervals recorded *before* this one
        omega = np.where(iv_cnt[ids] > 0, iv_sum[ids] / np.maximum(iv_cnt[ids], 1), 1.0)
        iv_sum[ids] += absent[ids] + 1                     # then record the interval that ends now
        iv_cnt[ids] += 1
        absent[ids] = 0
        # absent clients: count, and cut a long absence into an interval of K_cut
        off = ~active
        absent[off] += 1
        cut = off & (absent >= self.p.cutoff)
        iv_sum[cut] += absent[cut]
        iv_cnt[cut] += 1
        absent[cut] = 0
        if not arr:
            return Aggregation()
        w = omega / N
        self.x = self.x + self.p.server_lr * weighted_sum([a.vectors[0] for a in arr], w)
        return Aggregation({int(c): float(wi) for c, wi in zip(ids, w)}, client_cols={"fedau_omega": {
            int(c): float(o) for c, o in zip(ids, omega)}})


register("algorithm", "fedau", FedAuParams,
         "FedAU (Wang & Ji 2023): updates weighted by each client's mean participation interval (cut at K_cut), "
         "divided by N", FedAu)
