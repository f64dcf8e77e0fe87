"""SCAFFOLD — S. P. Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for
Federated Learning", ICML 2020, Algorithm 1 with option II; as the FedSUM experiments run it
(docs/algorithms/fedsum.md section 4, [ref-code]). Rounds: flemu's t is the spec's t - 1.

Server state x, c (c^0 = 0); client state c_i (c_i^0 = 0: docs/algorithms/fedsum.md 4.1, a random start
leaks an offset into c under partial participation). Round t, client i in S^t:
    y <- y - eta_l^t (g(y) - c_i + c),  K_i steps from x^t         Alg. 1 line 10
    c_i^+ = c_i - c + (x^t - y_K) / (K_i eta_l^t)                   Alg. 1 line 12, option II
    send (y_K - x^t, c_i^+ - c_i)                                   line 13: 2 vectors up
    x^{t+1} = x^t + eta_g mean_{S^t} (y_K - x^t)                    line 16 (no step if S^t is empty)
    c^{t+1} = c^t + (1/N) sum_{S^t} (c_i^+ - c_i)                   line 17
Option II's c_i^+ equals the mean raw gradient of the client's K_i steps (substitute the
update rule); we read that mean from the executor (`grad_mean`), which is the formula with
K_i = the steps the client *actually* ran and eta_l^t the rate *actually* used in the round
(two public-code traps of docs/algorithms/fedsum.md 4.1) and keeps float32 precision when eta_l is small.
The correction covers trainable parameters only (BatchNorm statistics travel beside, never
corrected). Delta c is added once per client with 1/N, not |S| times.

`single_uplink: true` is SCALLION's form (Huang et al. 2023, docs/algorithms/fedsum.md 4): the client sends
delta_i = c_i^+ - c_i only; x^{t+1} = x^t - gamma^t (c + mean_{S^t} delta_i) with
gamma^t = eta_g eta_l^t K; same iterates as option II, 2 down / 1 up.
"""
from __future__ import annotations

import torch
from pydantic import Field

from ..compute.jobs import LocalRule, LocalSpec
from ..compute.lazy import derived
from ..registry import register
from .base import Aggregation, Broadcast, Upload
from .schedule import Scheduled, ScheduledParams

C = "scaffold_c"


class ScaffoldParams(ScheduledParams):
    single_uplink: bool = Field(False, description="SCALLION form: upload only c_i^+ - c_i (1 vector up; same iterates)")


class Scaffold(Scheduled):
    name = "scaffold"
    client_state = (C,)
    supports = frozenset({"rounds"})
    down_vectors = 2              # x, c
    up_vectors = 2                # y_K - x, c_i^+ - c_i   (single_uplink: 1)
    up_reference = "zero"         # both are updates (docs/algorithms/compression.md 1.1)

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.c = torch.zeros_like(self.x)        # c^0 = 0
        if params.single_uplink:
            self.up_vectors = 1
            self.weights_total = None            # x moves along c + mean delta, not a mean of models

    def broadcast(self, t):
        return Broadcast([self.x, self.c], t)

    def local_spec(self, client, t, received):
        x, c = received.vectors
        # Alg. 1 line 10: g(y) + (c - c_i)
        return LocalSpec(start=x, rule=LocalRule(lr=self.lr(t)), correction=c - self.states.row(C, client),
                         want_grad_mean=True)

    def upload(self, client, t, result):
        x = self.x
        ci = self.states.row(C, client).clone()
        c_new = derived(lambda r: r.grad_mean, result)                 # option II c_i^+ (see module doc)
        dc = derived(lambda cn, c0: cn - c0, c_new, ci)                # c_i^+ - c_i
        vecs = [dc] if self.p.single_uplink else [derived(lambda r: r.params - x, result), dc]
        return Upload(vecs, result=result, meta={"c_new": c_new, "lr": self.lr(t)})

    def aggregate(self, t, arrivals):
        N = self.ctx.num_clients
        arr = sorted((a for a in arrivals if a.steps > 0), key=lambda a: a.client)
        if not arr:
            return Aggregation()                                       # nothing arrived: x, c unchanged
        dcs = [a.vectors[-1] for a in arr]
        S = len(arr)
        if self.p.single_uplink:
            K = max(a.steps for a in arr)
            gamma = self.p.server_lr * arr[0].meta["lr"] * K
            self.x = self.x - gamma * (self.c + sum(dcs) / S)          # SCALLION server step
        else:
            self.x = self.x + self.p.server_lr * sum(a.vectors[0] for a in arr) / S   # line 16
        self.c = self.c + sum(dcs) / N                                 # line 17: (1/N) sum, once per client
        for a in arr:
            self.states.put(C, a.client, a.meta["c_new"])              # c_i <- c_i^+
        return Aggregation({a.client: 1.0 / S for a in arr})


register("algorithm", "scaffold", ScaffoldParams,
         "SCAFFOLD option II (Karimireddy et al. 2020): control variates c, c_i; 2 vectors down, 2 up", Scaffold)
