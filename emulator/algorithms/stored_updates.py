"""Stored-update baselines of the FedSUM comparison (docs/algorithms/fedsum.md section 4):
the server keeps every client's latest model update u_i (a table of N rows, u_i^0 = 0, rows
stored on first write) and steps with their mean, read from the table's exact running sum
(docs/client-state.md): O(d) a round, the same bits whatever the order of the writes. Both in the form of the FedSUM experiments' code lineage ([ref-code],
A11): u_i is the raw update Delta_i = y_K - x^t of `LocalSGD(x^t)` (K plain SGD steps at
eta_l^t), not normalised by the learning rate; never-seen clients count as zeros.

MIFA — X. Gu et al., "Fast Federated Learning in the Presence of Arbitrary Device
Unavailability", NeurIPS 2021:
    u_i <- Delta_i (i in S^t);  x^{t+1} = x^t + eta_g (1/N) sum_{i=0}^{N-1} u_i
  (steps also when S^t is empty). The authors' code stores (y_K - x)/eta_t and steps with the
  current eta_t, and fills the table before the first step; a third public version averages
  only the filled entries. With a decaying lr these are different algorithms; this is the
  lineage form (docs/algorithms/fedsum.md 4.1). Identical to the original for a constant lr.

FedVARP — D. Jhunjhunwala et al., "FedVARP: Tackling the Variance Due to Partial Client
Participation in Federated Learning", UAI 2022, Algorithm 1:
    if S^t != {}:  v = (1/N) sum_j u_j^{old} + (1/|S^t|) sum_{i in S^t} (Delta_i - u_i^{old})
                   u_i <- Delta_i (i in S^t);  x^{t+1} = x^t + eta_g v
    S^t = {}: no step (lineage code; the original would step with mean u_j).
  The mean of the table is taken *before* this round's entries are replaced (docs/algorithms/fedsum.md 4.1).
Rounds: flemu's round t is the spec's t - 1.
"""
from __future__ import annotations

import torch

from ..registry import register
from .base import Aggregation
from .schedule import LocalSgdDelta, ScheduledParams


class _StoredUpdates(LocalSgdDelta):
    supports = frozenset({"rounds"})
    weights_total = None          # the step is a mean over all N stored updates, not a mean of the uploads
    table = "?"

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.states.declare(self.table, keep_sum=True)                        # u_i^0 = 0; sum_i u_i kept

    def _arrived(self, arrivals):
        return sorted((a for a in arrivals if a.steps > 0), key=lambda a: a.client)


class Mifa(_StoredUpdates):
    name = "mifa"
    table = "mifa_u"
    client_state = ("mifa_u",)

    def aggregate(self, t, arrivals):
        N = self.ctx.num_clients
        arr = self._arrived(arrivals)
        if arr:
            self.states.put_rows(self.table, [a.client for a in arr],
                                 torch.stack([a.vectors[0] for a in arr]))     # u_i <- Delta_i
        self.x = self.x + self.p.server_lr * self.states.mean(self.table)     # steps also when S^t = {}
        return Aggregation({a.client: 1.0 / N for a in arr})


class FedVarp(_StoredUpdates):
    name = "fedvarp"
    table = "fedvarp_u"
    client_state = ("fedvarp_u",)

    def aggregate(self, t, arrivals):
        arr = self._arrived(arrivals)
        if not arr:
            return Aggregation()                                               # lineage: no step
        ids = [a.client for a in arr]
        D = torch.stack([a.vectors[0] for a in arr])
        ubar = self.states.mean(self.table)                                    # before replacing (4.1)
        v = ubar + (D - self.states.rows(self.table, ids)).mean(0)             # Alg. 1: SAGA-type estimate
        self.states.put_rows(self.table, ids, D)                               # u_i <- Delta_i
        self.x = self.x + self.p.server_lr * v
        return Aggregation({c: 1.0 / len(ids) for c in ids})


register("algorithm", "mifa", ScheduledParams,
         "MIFA (Gu et al. 2021): step with the mean of all N clients' latest updates (stored, zeros for unseen)", Mifa)
register("algorithm", "fedvarp", ScheduledParams,
         "FedVARP (Jhunjhunwala et al. 2022): SAGA-type variance reduction with all N stored updates", FedVarp)
