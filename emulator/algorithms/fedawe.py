"""FedAWE — M. Xiang, S. Ioannidis, E. Yeh, C. Joe-Wong, L. Su, "Efficient Federated Learning
against Heterogeneous and Non-stationary Client Unavailability", NeurIPS 2024, Algorithm 1
(adaptive innovation echoing + implicit gossiping), in the form of its code
(`varying_awe.py`; docs/algorithms/fedsum.md section 4, [ref-code]). Rounds: flemu's round t is
the spec's t - 1.

Client state: its own model x_i (x_i^0 = x^0) and tau_i, the last round it was active
(-1 before). Round t, client i in S^t:
    trains from its *own stored* x_i (not the server's x):  G_i = x_i - y_K     (K SGD steps)
    echo:   x_i^dagger = x_i - eta_g (t - tau_i) G_i;   tau_i <- t              Alg. 1
Server:  x^{t+1} = mean_{i in S^t} x_i^dagger; then x_i <- x^{t+1} for i in S^t only
  (implicit gossip: absent clients never download); S^t = {}: nothing changes.
Clip (`clip_norm`, [ours] default null): the code clips the *mean echoed innovation*
  e = mean_{S^t} (t - tau_i) G_i to Euclidean norm <= clip_norm before
  x^{t+1} = mean_{S^t} x_i - eta_g clip(e); the server then needs both sums: 2 vectors up.
Messages (docs/algorithms/fedsum.md 4 (ii)): the download of x^{t+1} belongs to the end of round t; flemu
counts it as one vector at the client's next participation (the very first x^0 at its
first), the same bytes per active client per round, at the start of its round.
Evaluation (4 (iii)): the server's x (the code evaluates the mean of all N local models).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from pydantic import Field

from ..compute.jobs import LocalRule, LocalSpec
from ..compute.lazy import derived
from ..registry import register
from .base import Aggregation, Upload
from .schedule import Scheduled, ScheduledParams, spec_round

XL, LAST = "fedawe_x", "fedawe_last"


class FedAweParams(ScheduledParams):
    clip_norm: Optional[float] = Field(None, gt=0, description="clip the mean echoed innovation to this norm "
                                                             "(the FedAWE code: 0.5); 2 vectors up")


class FedAwe(Scheduled):
    name = "fedawe"
    client_state = (XL, LAST)
    supports = frozenset({"rounds"})

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.up_vectors = 1 if params.clip_norm is None else 2

    def _own(self, client):
        return self.states.row(XL, client, init=self.ctx.x0)            # x_i^0 = x^0

    def local_spec(self, client, t, received):
        # the client starts from its own stored model, not from the broadcast
        return LocalSpec(start=self._own(client).clone(), rule=LocalRule(lr=self.lr(t)))

    def upload(self, client, t, result):
        xi = self._own(client).clone()
        m = spec_round(t) - int(self.states.scalars(LAST, np.int64, -1)[client])   # t - tau_i
        eg = self.p.server_lr
        echo = derived(lambda r: m * (xi - r.params), result)                      # (t - tau_i) G_i
        if self.p.clip_norm is None:
            return Upload([derived(lambda e: xi - eg * e, echo)], result=result)    # x_i^dagger
        return Upload([xi, echo], result=result)                                    # both sums (clip)

    def aggregate(self, t, arrivals):
        arr = sorted((a for a in arrivals if a.steps > 0), key=lambda a: a.client)
        if not arr:
            return Aggregation()                                                    # nothing changes
        ids = [a.client for a in arr]
        S = len(arr)
        if self.p.clip_norm is None:
            self.x = sum(a.vectors[0] for a in arr) / S                             # mean x_i^dagger
        else:
            base = sum(a.vectors[0] for a in arr) / S
            echo = sum(a.vectors[1] for a in arr) / S
            n = float(echo.norm())
            if n > self.p.clip_norm:
                echo = echo * (self.p.clip_norm / n)
            self.x = base - self.p.server_lr * echo
        last = self.states.scalars(LAST, np.int64, -1)
        mult = spec_round(t) - last[ids]                                            # t - tau_i, as uploaded
        last[ids] = spec_round(t)                                                   # tau_i <- t
        self.states.put_rows(XL, ids, self.x.expand(S, -1), init=self.ctx.x0)      # x_i <- x^{t+1}, S^t only
        return Aggregation({c: 1.0 / S for c in ids},
                           client_cols={"fedawe_multiplier": {c: int(m) for c, m in zip(ids, mult)}})


register("algorithm", "fedawe", FedAweParams,
         "FedAWE (Xiang et al. 2024): adaptive innovation echoing from each client's own stale model, "
         "implicit gossip; optional clip", FedAwe)
