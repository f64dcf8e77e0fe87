"""FedSUM family — R. You, S. Pu, "FedSUM Family: Efficient Federated Learning Methods under
Arbitrary Client Participation", arXiv:2512.18275 (docs/algorithms/fedsum.md, section 3).

The paper's typeset mathematics was lost (docs/algorithms/fedsum.md section 0, A1): the rules below are the
spec's reconstruction; `[recon]` marks a reconstructed equation, `[ours]` our choice. Steps
are cited by the spec's labels B1-B4 (FedSUM-B, Alg. 1), S1-S5 (FedSUM, Alg. 2), C1-C6
(FedSUM-CR, Alg. 3). Rounds: flemu's round t (1-based) is the spec's round t - 1.

Stochastic Uplink-Merge (SUM), docs/algorithms/fedsum.md 3.1, common to the three variants:
    y_i          mean raw stochastic gradient of client i's latest active round (0 before)
    Delta_i^t  = y_i^{t+1} - y_i^t                                     Eq.(6), one vector up
    y^{t+1}    = y^t + (1/N) sum_{i in S^t} Delta_i^t                  Eq.(7) [recon]
    x^{t+1}    = x^t - gamma^t y^{t+1},  gamma^t = eta_g eta_l^t K     App. C Eq.(14) / D Eq.(39) [recon], A3
so that y^t = (1/N) sum_i y_i^t at every round (never-seen clients count as 0, divisor N).
The server steps also when S^t is empty (A7, `step_on_empty`).

Variants (what a client in S^t computes from x^t):
    FedSUM-B   K mini-batch gradients at the fixed point x^t, averaged       B2, Eq.(5) [recon]
    FedSUM     K local steps on g + c_i^t,  c_i^t = y^t - y_i^t (y^t downloaded)   S2-S4, Eqs.(8)-(9)
    FedSUM-CR  K local steps on g + c_i^t,  c_i^t = (x_hat_i - x^t) / Gamma(r_i, t) - y_i^t,
               rebuilt from the model x_hat_i = x^{r_i} of the client's last selection r_i
               (Gamma(a, b) = sum_{r=a}^{b-1} gamma^r); c_i^t = 0 when t = r_i            C2-C5, Eqs.(10)-(11)

Emulator mapping (docs/algorithms/fedsum.md 3.7): the correction vector is the executors' per-client
`correction`; the mean raw gradient is `TrainResult.grad_mean` (accumulated, not rebuilt
from the endpoint: S4); FedSUM-B is a job with learning rate 0, whose K steps are K
gradients at x^t. Client state lives in the store (`fedsum_y`, CR also `fedsum_xhat` and the
integer `fedsum_r`) and is committed in `aggregate` for the clients actually merged, so a
client that dropped out keeps its old state (docs/algorithms/fedsum.md 3.6).

K in gamma^t [ours]: the local steps the round's uploads were asked for (their maximum; the
protocol's `local_steps`), the last known value in a round without uploads. A client that
completed only K_i < K steps uploads the mean of its K_i gradients; K_i = 0 counts as a
dropout (3.6).
"""
from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from ..compute.jobs import LocalRule, LocalSpec
from ..compute.lazy import derived
from ..registry import register
from .base import Aggregation, Broadcast, Upload
from .schedule import Scheduled, ScheduledParams, spec_round

Y, XHAT, R = "fedsum_y", "fedsum_xhat", "fedsum_r"


class FedSumParams(ScheduledParams):
    step_on_empty: bool = Field(True, description="A7: the server steps x <- x - gamma^t y also in a round "
                                                  "without uploads (false: no step, and gamma^t = 0 in FedSUM-CR's Gamma)")


class _FedSumFamily(Scheduled):
    supports = frozenset({"rounds"})
    weights_total = None          # a merged client's weight is its 1/N share of y (Eq. (7)), not a mean
    up_vectors = 1                # Delta_i (docs/algorithms/fedsum.md 3.5)
    up_reference = "zero"         # Delta_i is an update (docs/algorithms/compression.md 1.1)

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.y = torch.zeros_like(self.x)      # y^0 = 0
        self._K = None                         # K of gamma^t (see module doc)
        self._eg = []                          # per spec round r: eta_g eta_l^r (0: the server did not step)
        self._Kr = []                          # per spec round r: its K (None until one is known)
        self._cum = [0.0]                      # prefix sums: Gamma(0, r) = _cum[r]

    # -- gamma^t and Gamma(a, b) ------------------------------------------------------------
    def gamma_sum(self, a: int, b: int) -> float:
        """Gamma(a, b) = sum_{r=a}^{b-1} gamma^r over closed spec rounds (docs/algorithms/fedsum.md 1, A6)."""
        return self._cum[b] - self._cum[a]

    def _close_round(self, t: int, K_t, stepped: bool) -> float:
        """Record flemu round t's gamma = eta_g eta_l^t K (0 if the server did not step) as
        spec round t - 1 of Gamma."""
        if K_t is not None:
            self._K = K_t
        self._eg.append(self.p.server_lr * self.lr(t) if stepped else 0.0)
        self._Kr.append(self._K)
        if self._K is not None and None in self._Kr:   # rounds before any upload: y was 0, x did not move
            self._Kr = [self._K if k is None else k for k in self._Kr]
            self._cum = [0.0]
            for e, k in zip(self._eg[:-1], self._Kr[:-1]):
                self._cum.append(self._cum[-1] + e * k)
        gamma = self._eg[-1] * (self._Kr[-1] or 0)
        self._cum.append(self._cum[-1] + gamma)
        return gamma

    # -- the verbs ----------------------------------------------------------------------------
    def upload(self, client, t, result):
        # B3 / S4 / C5: y_i^{t+1} = (1/K) sum_k g_i^{t,k} (raw gradients); Delta_i = y_i^{t+1} - y_i^t  Eq.(6)
        y_old = self.states.row(Y, client).clone()
        return Upload([derived(lambda r, y0: r.grad_mean - y0, result, y_old)], result=result,
                      meta={"y_new": derived(lambda r: r.grad_mean, result)})

    def commit(self, t: int, merged: list) -> None:
        """Variant-specific client state of the merged clients (before the server step)."""

    def aggregate(self, t, arrivals):
        N = self.ctx.num_clients
        merged, K_t = [], None
        acc = torch.zeros_like(self.y)
        for a in sorted(arrivals, key=lambda a: a.client):
            if a.steps <= 0:                                 # K_i = 0: a dropout (docs/algorithms/fedsum.md 3.6)
                continue
            acc += a.vectors[0]                              # sum_{i in S^t} Delta_i^t
            self.states.put(Y, a.client, a.meta["y_new"])    # the client stored y_i <- y_i^{t+1}
            merged.append(a.client)
            K_t = a.steps if K_t is None else max(K_t, a.steps)
        self.commit(t, merged)
        self.y = self.y + acc / N                            # B4 / S5 / C6: Eq.(7) [recon]
        stepped = bool(merged) or self.p.step_on_empty       # A7
        gamma = self._close_round(t, K_t, stepped)
        if stepped:
            self.x = self.x - gamma * self.y                 # App. C Eq.(14) / App. D Eq.(39) [recon], A3
        return Aggregation({c: 1.0 / N for c in merged}, round_cols={"gamma": gamma})


class FedSumB(_FedSumFamily):
    """FedSUM-B (Alg. 1): no local updates; server and client send one vector each."""

    name = "fedsum_b"
    client_state = (Y,)
    down_vectors = 1              # B1: x^t

    def broadcast(self, t):
        return Broadcast([self.x], t)                        # B1

    def local_spec(self, client, t, received):
        # B2, Eq.(5) [recon]: K independent mini-batches at x^t, no parameter change (lr 0);
        # the job's mean raw gradient is y_i^{t+1}
        return LocalSpec(start=received.vectors[0], rule=LocalRule(lr=0.0), want_grad_mean=True)


class FedSum(_FedSumFamily):
    """FedSUM (Alg. 2): corrected local SGD with y^t downloaded (2 down, 1 up)."""

    name = "fedsum"
    client_state = (Y,)
    down_vectors = 2              # S1: x^t, y^t

    def broadcast(self, t):
        return Broadcast([self.x, self.y], t)                # S1

    def local_spec(self, client, t, received):
        x, y = received.vectors
        c = y - self.states.row(Y, client)                   # S2, Eq.(9) [recon]: c_i^t = y^t - y_i^t
        # S3, Eq.(8) [recon]: x_i^{t,k+1} = x_i^{t,k} - eta_l^t (g_i^{t,k} + c_i^t); S4: mean raw g
        return LocalSpec(start=x, rule=LocalRule(lr=self.lr(t)), correction=c, want_grad_mean=True)


class FedSumCR(_FedSumFamily):
    """FedSUM-CR (Alg. 3): the correction rebuilt locally from the model of the last
    selection (1 down, 1 up; client keeps y_i, x_hat_i, r_i)."""

    name = "fedsum_cr"
    client_state = (Y, XHAT, R)
    down_vectors = 1              # C1: x^t

    def broadcast(self, t):
        return Broadcast([self.x], t)                        # C1

    def local_spec(self, client, t, received):
        x = received.vectors[0]
        ts = spec_round(t)
        r = int(self.states.scalars(R, np.int64, 0)[client])             # A6: r_i^0 = 0
        G = self.gamma_sum(r, ts)
        if ts == r or G == 0.0:
            c = torch.zeros_like(x)                                      # C2: t = r_i -> c_i^t = 0
        else:
            xhat = self.states.row(XHAT, client, init=self.ctx.x0)      # A6: x_hat_i^0 = x^0
            # C2, Eq.(11) [recon]: gamma-weighted mean of y^{r_i+1..t} minus the client's stale part
            c = (xhat - x) / G - self.states.row(Y, client)
        # C4 = S3, C5 = S4
        return LocalSpec(start=x, rule=LocalRule(lr=self.lr(t)), correction=c, want_grad_mean=True)

    def commit(self, t, merged):
        # C3, Eq.(10) [recon]: r_i <- t, x_hat_i <- x^t (self.x is still x^t: the step comes after)
        if not merged:
            return
        self.states.scalars(R, np.int64, 0)[merged] = spec_round(t)
        self.states.put_rows(XHAT, merged, self.x.expand(len(merged), -1), init=self.ctx.x0)


register("algorithm", "fedsum_b", FedSumParams,
         "FedSUM-B (You & Pu 2025): K gradients at x^t per active client, stochastic uplink-merge "
         "of the latest gradients; 1 vector down, 1 up", FedSumB)
register("algorithm", "fedsum", FedSumParams,
         "FedSUM (You & Pu 2025): local SGD corrected by y - y_i (y downloaded), uplink-merge; "
         "2 vectors down, 1 up", FedSum)
register("algorithm", "fedsum_cr", FedSumParams,
         "FedSUM-CR (You & Pu 2025): FedSUM with the correction rebuilt from the last received model; "
         "1 vector down, 1 up", FedSumCR)
