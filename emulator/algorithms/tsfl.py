"""T-SFL aggregation rules under the `intervals` protocol (docs/algorithms/tsfl.md):
DMS (discriminative model selection, T-SFL Algorithm 1), the Corollary-1 optimal weights
without filtering (`tsfl_optimal`), and the paper's synchronous "FedAsync" of footnote 2
(`fedasync_interval`). FedAvg and FedProx under intervals are `fedavg` / `fedprox`.

Source: Y. Shao et al., "Robust Model Aggregation for Heterogeneous Federated Learning:
Analysis and Optimizations". Cited as `T-SFL Eq.(n)`, `T-SFL Alg.1 Ln`, our rules as
`docs/algorithms/tsfl.md Dk [ours]`. Every client trains with plain SGD at a constant rate (docs/algorithms/tsfl.md A2).
"""
from __future__ import annotations

from typing import Literal, Optional

import numpy as np
import torch
from pydantic import Field, model_validator

from ..compute.jobs import LocalRule, LocalSpec
from ..registry import Params, register
from .base import Aggregation, Algorithm, Upload, weighted_sum


# ----------------------------------------------------------------------------- the math
def heterogeneity_degree(tau) -> float:
    """T-SFL fn. 1: delta = (1/N) sum_i (tau_i - mean tau)^2 (population variance)."""
    tau = np.asarray(tau, float)
    return float(np.mean((tau - tau.mean()) ** 2)) if len(tau) else float("nan")


def dms_filter_probs(tau):
    """T-SFL Eqs.(7)-(8), docs/algorithms/tsfl.md D2-D3: K = mean tau, H = max tau,
    P_i = (K - tau_i)/H for tau_i < K (exact integer test tau_i * n < sum tau), else 0."""
    tau = np.asarray(tau, np.int64)
    n, tot, H = len(tau), int(tau.sum()), int(tau.max()) if len(tau) else 0
    K = tot / n if n else float("nan")
    below = tau * n < tot
    P = np.where(below, (K - tau) / max(H, 1), 0.0)
    return K, H, P


def slope(eta, L, G2, sigma2, n, H) -> float:
    """T-SFL Eq.(6) / Cor. 1: s = eta L (H - 1) G^2 / (2 N sigma^2), with max(H-1, 0) and
    sigma^2 floored at 1e-12 (docs/algorithms/tsfl.md 3.2, 3.4)."""
    return eta * L * max(H - 1, 0) * G2 / (2.0 * n * max(sigma2, 1e-12))


def _shifted(st: np.ndarray) -> np.ndarray:
    """s tau_i minus its largest value: the weights do not change (c absorbs a common shift), and
    with a huge slope (sigma^2 estimated ~0, floored at 1e-12) c + s tau_i no longer cancels two
    numbers of order s: the weighted clients' terms are ~0, so their weights stay exact."""
    return st - st.max() if len(st) else st


def waterfill(tau, s) -> np.ndarray:
    """docs/algorithms/tsfl.md 3.3 / D7 [ours, A6]: rho_i = max(0, c + s tau_i) with c making sum rho = 1;
    equals the Cor.-1 closed form 1/n + s (tau_i - mean tau) whenever that is >= 0. Any sign
    of s: the clients are taken in decreasing order of s tau_i (s < 0 favours small tau)."""
    tau = np.asarray(tau, float)
    n = len(tau)
    st = _shifted(s * tau)
    order = np.argsort(-st, kind="stable")
    for k in range(n, 0, -1):
        top = order[:k]
        c = (1.0 - st[top].sum()) / k
        if c + st[top].min() >= 0:
            rho = np.zeros(n)
            rho[top] = c + st[top]
            return rho
    return np.zeros(n)


def capped_waterfill(tau, s, cap) -> np.ndarray:
    """Def. 1.3's weight limit rho_i <= cap (= theta/N) on top of water-filling (docs/algorithms/tsfl.md 3.3,
    A7 `cap_theta` [ours]): rho_i = min(max(c + s tau_i, 0), cap) with the unique c making
    sum rho = 1 - the Euclidean projection of the Cor.-1 line onto the capped simplex. The
    excess above the cap flows to the uncapped clients, keeping the slope s between every
    two of them. Needs n cap >= 1 (else the caller relaxes the cap to 1/n)."""
    tau = np.asarray(tau, float)
    n = len(tau)
    if n == 0:
        return np.zeros(0)
    if cap * n < 1 - 1e-12:
        raise ValueError(f"cap {cap} x {n} clients < 1: no weights on the simplex respect it")
    st = _shifted(s * tau)
    f = lambda c: float(np.clip(c + st, 0.0, cap).sum())          # noqa: E731  nondecreasing in c
    # f is piecewise linear with breakpoints where a client hits 0 (c = -s tau_i) or the cap
    # (c = cap - s tau_i); f = 0 below the lowest and n cap >= 1 above the highest
    bps = np.unique(np.concatenate([-st, cap - st]))
    vals = np.array([f(b) for b in bps])
    k = int(np.searchsorted(vals, 1.0, side="left"))               # first breakpoint with f >= 1
    if k == len(bps):                                              # n cap = 1 up to float noise
        c = bps[-1]
    elif vals[k] == 1.0:
        c = bps[k]
    else:                                                          # 1 lies strictly inside (bps[k-1], bps[k])
        lo, hi = bps[k - 1], bps[k]
        c = lo + (1.0 - vals[k - 1]) * (hi - lo) / (vals[k] - vals[k - 1])
    return np.clip(c + st, 0.0, cap)


def theorem2_weights(tau, eta, L, theta, G2, sigma2, N, H, Gamma, D, F_hat) -> np.ndarray:
    """T-SFL Eq.(4) (Theorem 2) with its self-referential sums frozen into D and F_hat: the
    general optimum rho_i* = [B D + (A Gamma + C tau_i) F] / [F 2 eta^2 N sigma^2], with
    A = eta {2L[eta L (1 + theta) - 1] + eta}, B = 2 eta L [1 - eta L (1 + theta)],
    C = eta^3 L (H - 1) G^2. Needs w*, Gamma, theta: a reference for consistency checks
    (docs/algorithms/tsfl.md T9), never used in runs."""
    tau = np.asarray(tau, float)
    A = eta * (2 * L * (eta * L * (1 + theta) - 1) + eta)
    B = 2 * eta * L * (1 - eta * L * (1 + theta))
    C = eta ** 3 * L * (H - 1) * G2
    return (B * D + (A * Gamma + C * tau) * F_hat) / (F_hat * 2 * eta ** 2 * N * sigma2)


def affine_weights(tau, s) -> np.ndarray:
    """Cor. 1 closed form without clipping (`clip: none`, may be negative)."""
    tau = np.asarray(tau, float)
    return 1.0 / len(tau) + s * (tau - tau.mean())


# ----------------------------------------------------------------------------- parameters
class ConstantsParams(Params):
    """How the slope s of Eq.(6) is obtained (docs/algorithms/tsfl.md 3.4, A8): its unknown constants L, G^2,
    sigma^2 estimated by probes or given, s itself given, or rho proportional to tau."""
    mode: Literal["estimate", "fixed", "slope", "proportional"] = Field(
        "estimate", description="estimate L, G2, sigma2 by gradient probes (concentrates the weight on the "
                                "fastest clients as training goes on), fixed values, the slope s itself, "
                                "or rho proportional to tau")
    L: Optional[float] = Field(None, gt=0, description="smoothness constant (mode fixed)")
    G2: Optional[float] = Field(None, gt=0, description="gradient second-moment bound (mode fixed)")
    sigma2: Optional[float] = Field(None, gt=0, description="gradient variance bound (mode fixed)")
    s: Optional[float] = Field(None, description="the slope s of rho_i - rho_j = s (tau_i - tau_j) (mode slope); "
                                                 "s < 0 favours clients with fewer iterations")
    ema: float = Field(0.9, ge=0, lt=1, description="smoothing of the probe estimates over intervals")
    sigma2_unit: Literal["batch", "sample"] = Field(
        "batch", description="sigma^2 of Ass. 1 read as the variance of a mini-batch gradient (A8), "
                             "or of a one-sample gradient: batch size x the probe's estimate (mode estimate)")

    @model_validator(mode="after")
    def _fixed(self):
        if self.mode == "fixed" and None in (self.L, self.G2, self.sigma2):
            raise ValueError("mode fixed needs L, G2 and sigma2")
        if self.mode == "slope" and self.s is None:
            raise ValueError("mode slope needs s")
        return self


class TsflParams(Params):
    lr: float = Field(gt=0, description="local learning rate eta (plain SGD, docs/algorithms/tsfl.md A2)")
    constants: ConstantsParams = Field(default_factory=ConstantsParams, description="L, G2, sigma2 of Eq.(6)")
    clip: Literal["waterfill", "none"] = Field("waterfill", description="negative Cor.-1 weights: water-fill (A6) or keep")
    cap_theta: Optional[float] = Field(
        None, gt=0, description="Def. 1.3's limit rho_i <= theta/N (N = uploaders, A9), the excess water-filled "
                                "onto the others (A7); relaxed to 1/|weighted set| when theta/N is below it")

    @model_validator(mode="after")
    def _cap(self):
        if self.cap_theta is not None and self.clip != "waterfill":
            raise ValueError("cap_theta needs clip: waterfill")
        return self


class DmsParams(TsflParams):
    zero_tau: Literal["include", "exclude"] = Field("include", description="clients with tau = 0: filtered like the rest (paper) or always dropped (A11)")


class FedAsyncIntervalParams(Params):
    lr: float = Field(gt=0, description="local learning rate")
    gamma: float = Field(0.5, ge=0, lt=1, description="depreciation factor gamma of T-SFL fn. 2")
    prox_rho: float = Field(0.0, ge=0, description="optional local proximal weight (A15: 0)")


# ----------------------------------------------------------------------------- rules
class _IntervalRule(Algorithm):
    supports = frozenset({"intervals"})
    up_reference = "start"        # uploads the trained model (docs/algorithms/compression.md 1.1)

    def local_spec(self, client, t, received):
        # T-SFL Def. 1.2 / Eq.(1): w_{i,h+1} = w_{i,h} - eta g, from w_{i,0} = w^t
        # plus, in the estimate mode of Eq.(6)'s constants, the gradient probes of docs/algorithms/tsfl.md 3.4
        return LocalSpec(start=received.vectors[0], rule=LocalRule(lr=self.p.lr), probe=self.wants_probe())

    def wants_probe(self) -> bool:
        return False

    def upload(self, client, t, result):
        # the probe scalars (docs/algorithms/tsfl.md 3.4) ride along with the model: "a few bytes", not counted
        meta = {"probe": result.probe} if self.wants_probe() else {}
        return Upload([result.params], result=result, meta=meta)


class FedAsyncInterval(_IntervalRule):
    """T-SFL fn. 2 (the "FedAsync" of Tables 2-3, synchronous): once per interval
    w^{t+1} = gamma w^t + (1 - gamma) (1/n_U) sum_{i in U^t} w_i^t, equal weights."""

    name = "fedasync_interval"

    @property
    def weights_total(self):
        return 1.0 - self.p.gamma

    def local_spec(self, client, t, received):
        return LocalSpec(start=received.vectors[0], rule=LocalRule(lr=self.p.lr, prox_mu=self.p.prox_rho))

    def aggregate(self, t, arrivals):
        if not arrivals:                                   # docs/algorithms/tsfl.md A5: keep w^t
            return Aggregation()
        mean = torch.stack([a.vectors[0] for a in arrivals]).mean(0)
        self.x = self.p.gamma * self.x + (1 - self.p.gamma) * mean     # T-SFL fn. 2
        return Aggregation({a.client: (1 - self.p.gamma) / len(arrivals) for a in arrivals})


class TsflOptimal(_IntervalRule):
    """Cor.-1 weights on every uploader, no filtering (docs/algorithms/tsfl.md 5.1(e) [ours]):
    rho_i = 1/n + s (tau_i - mean tau) on U^t (water-filled), s from Eq.(6)."""

    name = "tsfl_optimal"

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.L = self.G2 = self.sigma2 = None     # EMA state of the probe estimates

    def wants_probe(self):
        return self.p.constants.mode == "estimate"

    # docs/algorithms/tsfl.md 3.4: the constants of Eq.(6)
    def update_constants(self, arrivals):
        c = self.p.constants
        if c.mode != "estimate":
            return
        probes = [a.meta["probe"] for a in arrivals if a.meta.get("probe")]
        if not probes:                      # no client probed: carry the previous values
            return
        G2 = max(p["G2"] for p in probes)                         # G^2 bounds E||g||^2 over clients
        per = c.sigma2_unit == "sample"                            # B x Var(batch mean) = Var(one sample)
        sig = float(np.mean([p["sigma2"] * (p.get("batch", 1) if per else 1) for p in probes]))   # Cor. 1's common sigma
        Ls = [p["L"] for p in probes if p.get("L") is not None]
        L = max(Ls) if Ls else (self.L or 0.0)
        if self.G2 is None:
            self.L, self.G2, self.sigma2 = L, G2, sig
        else:
            lam = c.ema
            self.L = lam * self.L + (1 - lam) * L
            self.G2 = lam * self.G2 + (1 - lam) * G2
            self.sigma2 = lam * self.sigma2 + (1 - lam) * sig

    def constants_info(self) -> dict:
        """The smoothed probe estimates, recorded in metrics.csv (estimate mode only)."""
        if self.p.constants.mode != "estimate" or self.G2 is None:
            return {}
        return {"L_hat": self.L, "G2_hat": self.G2, "sigma2_hat": self.sigma2}

    def slope(self, tau_all, tau_weighted, n_U, H) -> float:
        c = self.p.constants
        if c.mode == "proportional":                       # rho proportional to tau (3.4 item 3)
            tot = float(np.sum(tau_weighted))
            return 1.0 / tot if tot > 0 else 0.0
        if c.mode == "fixed":
            return slope(self.p.lr, c.L, c.G2, c.sigma2, n_U, H)
        if c.mode == "slope":                              # s given directly (docs/algorithms/tsfl.md 3.4 item 4)
            return float(c.s)
        if self.G2 is None:
            return 0.0
        return slope(self.p.lr, self.L, self.G2, self.sigma2, n_U, H)

    def cap(self, n_U, n_weighted):
        """Def. 1.3's limit theta/N (N = n_U, A9), relaxed to 1/|M| when too tight (A7)."""
        if self.p.cap_theta is None:
            return None
        return max(self.p.cap_theta / n_U, 1.0 / n_weighted)

    def weights(self, tau, s, n_U):
        if self.p.clip == "none":
            return affine_weights(tau, s)
        cap = self.cap(n_U, len(tau))
        return waterfill(tau, s) if cap is None else capped_waterfill(tau, s, cap)

    def weight_info(self, rho, s, n_U) -> dict:
        """Per interval (metrics.csv): how many weighted clients kept a weight > 0, the largest
        weight, the relative tilt s n_U of Eq.(6), and the cap in force (docs/algorithms/tsfl.md 4.2 D8)."""
        info = {"weighted": int(np.count_nonzero(rho > 0)), "max_weight": float(np.max(rho)) if len(rho) else 0.0,
                "slope_n": s * n_U}
        if self.p.cap_theta is not None:
            info["weight_cap"] = self.cap(n_U, len(rho))
        return info

    def aggregate(self, t, arrivals):
        if not arrivals:
            return Aggregation(round_cols={"survivors": 0, "weighted": 0})
        arrivals = sorted(arrivals, key=lambda a: a.client)
        tau = np.array([a.meta["tau"] for a in arrivals], np.int64)
        self.update_constants(arrivals)
        H = int(tau.max())
        s = self.slope(tau, tau, len(tau), H)
        rho = self.weights(tau, s, len(tau))
        self.x = weighted_sum([a.vectors[0] for a in arrivals], rho)
        return Aggregation({a.client: float(r) for a, r in zip(arrivals, rho)},
                           round_cols={"H": H, "slope": s, "survivors": len(arrivals),
                                       **self.weight_info(rho, s, len(tau)), **self.constants_info()})


class DMS(TsflOptimal):
    """DMS, T-SFL Algorithm 1 (docs/algorithms/tsfl.md 4.2, steps D1-D8). The filter (D1-D5) needs only the
    candidates' tau, so it runs in `reads`: a filtered client's model is never read, and the
    lazy executor never trains it (its virtual time still counts)."""

    name = "dms"

    def reads(self, t, arrivals):
        arrivals = sorted(arrivals, key=lambda a: a.client)       # D4: ascending client id
        tau = np.array([a.meta["tau"] for a in arrivals], np.int64)
        K, H, P = dms_filter_probs(tau)                           # D1 (L1), D2 Eq.(7), D3 Eq.(8)
        u = self.ctx.rng.random(len(arrivals))                    # D4 Eq.(9): one uniform per candidate
        beta = u >= P                                             # beta = 0 with probability P
        if self.p.zero_tau == "exclude":
            beta &= tau > 0
        self._filter = ([a.client for a in arrivals], tau, K, H, P, beta)
        return [a.client for a, b in zip(arrivals, beta) if b]   # D5 (L3): survivors only

    def aggregate(self, t, arrivals):
        if not arrivals:                                          # D1: U empty -> w^{t+1} = w^t
            return Aggregation(round_cols={"survivors": 0, "weighted": 0})
        ids, tau, K, H, P, beta = self._filter
        by_id = {a.client: a for a in arrivals}
        self.update_constants(arrivals)
        info = {"dms_p": dict(zip(ids, P.tolist())), "dms_beta": dict(zip(ids, beta.astype(int).tolist()))}
        S = np.flatnonzero(beta)
        if len(S) == 0:                                           # only possible with exclude
            return Aggregation({c: 0.0 for c in ids}, info, {"K": K, "H": H, "survivors": 0, "weighted": 0})
        s = self.slope(tau, tau[S], len(ids), H)                  # D6 Eq.(6), H from D1, N = n_U (A9)
        rho_S = self.weights(tau[S], s, len(ids))                 # D7 (L4, Eq.(10)); cap theta/n_U (A7)
        self.x = weighted_sum([by_id[ids[i]].vectors[0] for i in S], rho_S)   # D8
        rho = np.zeros(len(ids))
        rho[S] = rho_S
        return Aggregation({c: float(r) for c, r in zip(ids, rho)}, info,
                           {"K": K, "H": H, "slope": s, "survivors": int(len(S)),
                            **self.weight_info(rho_S, s, len(ids)), **self.constants_info()})


register("algorithm", "dms", DmsParams,
         "T-SFL DMS (Shao et al.): filter slow clients with P = (K - tau)/H, Cor.-1 weights on survivors", DMS)
register("algorithm", "tsfl_optimal", TsflParams,
         "T-SFL Cor.-1 weights linear in tau on all uploaders (no filtering)", TsflOptimal)
register("algorithm", "fedasync_interval", FedAsyncIntervalParams,
         "T-SFL fn. 2 'FedAsync': w = gamma w + (1 - gamma) mean(uploads) once per interval", FedAsyncInterval)
