"""FedAsync — C. Xie, S. Koyejo, I. Gupta, "Asynchronous Federated Optimization",
arXiv:1903.03934 (docs/algorithms/tsfl.md section 5.4), with an optional FedBuff-style buffer
(J. Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022).

Worker (Xie Alg. 1, worker):  from y = x, H local iterations
    y <- y - lr * grad[ f(y; z) + (rho/2) ||y - x||^2 ]                    (prox_rho)
Updater (Xie Alg. 1, updater), in arrival order, on (x_new, v_start):
    k = v - v_start (+ staleness_offset)          updates applied since the download [A20]
    (v: the model version, `version`; v_start: the version the client downloaded, which its
    broadcast carries as `Broadcast.round` and its arrival as `Arrival.round`)
    alpha_k = alpha * s(k)
    x <- (1 - alpha_k) x + alpha_k x_new;  v <- v + 1
Staleness functions (Xie section 5.2): constant s = 1; polynomial s_a(k) = (k + 1)^-a;
hinge s_{a,b}(k) = 1 if k <= b else 1 / (a (k - b) + 1).
Buffer (`buffer: K > 1`): arrivals are collected and applied together when K have arrived:
    mode `model`: x <- x + (1/K) sum_i alpha s(k_i) (x_i - x)      (K = 1: exactly FedAsync)
    mode `delta` (FedBuff): x <- x + (server_lr / K) sum_i s(k_i) (x_i - x_{v_start,i}),
      the clients' own updates against the model they downloaded.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..compute.jobs import LocalRule, LocalSpec
from ..registry import Params, register
from .base import Aggregation, Algorithm, Broadcast, Upload, VersionedModel


def staleness_weight(k: float, function: str, a: float = 0.5, b: float = 4.0) -> float:
    """Xie et al. section 5.2 s(k); s(0) = 1 and non-increasing."""
    if function == "constant":
        return 1.0
    if function == "polynomial":
        return float((k + 1.0) ** (-a))
    if function == "hinge":
        return 1.0 if k <= b else 1.0 / (a * (k - b) + 1.0)
    raise ValueError(f"unknown staleness function {function!r}")


class StalenessParams(Params):
    function: Literal["constant", "polynomial", "hinge"] = Field("polynomial", description="s(k)")
    a: float = Field(0.5, gt=0, description="polynomial exponent, or hinge slope")
    b: float = Field(4.0, ge=0, description="hinge threshold")


class FedAsyncParams(Params):
    lr: float = Field(gt=0, description="local learning rate gamma")
    alpha: float = Field(0.6, gt=0, le=1, description="mixing weight alpha")
    staleness: StalenessParams = Field(default_factory=StalenessParams, description="staleness function s(k)")
    staleness_offset: int = Field(0, ge=0, description="1 reproduces Xie's literal index s(t - tau) (fresh = 1)")
    prox_rho: float = Field(0.005, ge=0, description="local proximal weight rho")
    buffer: int = Field(1, ge=1, description="apply updates K at a time (FedBuff-style); 1 = FedAsync")
    buffer_mode: Literal["model", "delta"] = Field("model", description="buffered mixing of models, or FedBuff's deltas")
    server_lr: float = Field(1.0, gt=0, description="server learning rate of buffer_mode delta")


class FedAsync(Algorithm, VersionedModel):
    """Declares `VersionedModel`: `version` counts the updates applied (what `async` reads)."""

    up_reference = "start"        # uploads the trained model (docs/algorithms/compression.md 1.1)
    name = "fedasync"
    supports = frozenset({"async"})
    weights_total = None        # alpha_k are mixing weights, not a simplex

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.version = 0
        self._buffer = []
        self._history = {0: self.x}   # model of each version still referenced by a download (delta mode)

    def broadcast(self, t):
        if self.p.buffer_mode == "delta":
            self._history[self.version] = self.x
        return Broadcast([self.x], self.version)       # the download carries the model version

    def local_spec(self, client, t, received):
        # Xie Alg. 1 worker: y <- y - gamma grad[f(y; z) + rho/2 ||y - x||^2], anchor x = the download
        return LocalSpec(start=received.vectors[0], rule=LocalRule(lr=self.p.lr, prox_mu=self.p.prox_rho))

    def upload(self, client, t, result):
        return Upload([result.params], result=result)

    def aggregate(self, t, arrivals):
        weights, staleness = {}, None
        for a in sorted(arrivals, key=lambda a: a.client):
            downloaded = a.round                                         # the version it trained from
            k = self.version - downloaded + self.p.staleness_offset      # updates since the download
            s = staleness_weight(k, self.p.staleness.function, self.p.staleness.a, self.p.staleness.b)
            self._buffer.append((a, s))
            weights[a.client] = self.p.alpha * s
            staleness = k
            if len(self._buffer) >= self.p.buffer:
                self._apply()
        return Aggregation(weights, round_cols={} if staleness is None else {"staleness": staleness})

    def _apply(self):
        K = len(self._buffer)
        if self.p.buffer_mode == "model":
            step = sum(self.p.alpha * s * (a.vectors[0] - self.x) for a, s in self._buffer)
            self.x = self.x + step / K            # K = 1: x <- (1 - alpha_k) x + alpha_k x_new
        else:
            step = sum(s * (a.vectors[0] - self._history[a.round]) for a, s in self._buffer)   # a.round: the version downloaded
            self.x = self.x + self.p.server_lr * step / K
        self._buffer = []
        self.version += 1
        if self.p.buffer_mode == "delta":         # forget versions no pending download can refer to
            self._history = {v: m for v, m in self._history.items() if v >= self.version - 1000}


register("algorithm", "fedasync", FedAsyncParams,
         "FedAsync (Xie et al.): mix each arrival with alpha * s(staleness); optional FedBuff buffer", FedAsync)
