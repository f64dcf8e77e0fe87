"""DP-FedAvg — McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018, Algorithm 1; with adaptive clipping as an option — Andrew,
Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive Clipping",
NeurIPS 2021, Algorithm 1. Our reading: docs/algorithms/dp.md.

Client (as FedAvg):  local SGD from x_t; the update is Δ_k = w_k - x_t.
Server:  Δ'_k = Δ_k min(1, S_t / |Δ_k|)                                   (dp.md Eq. 1.1)
         Δ̄_t = (Σ_k Δ'_k + N(0, (z_Δ S_t)² I)) / m                          (Eq. 1.2)
         x_{t+1} = x_t + η_g Δ̄_t                                            (Eq. 1.3)
Adaptive (optional):  b̄_t = (Σ_k 1[|Δ_k| <= S_t] + N(0, σ_b²)) / m        (Eq. 2.1, 2.2)
         S_{t+1} = S_t exp(-η_C (b̄_t - γ))                                  (Eq. 2.3)
         z_Δ = (z⁻² - (2 σ_b)⁻²)^(-1/2)                                     (Eq. 2.4)
Accounting (dp.md section 3): epsilon after every aggregation through `dp-accounting`
(algorithms/dp_ledger.py), under Poisson sampling at q = m / N and without amplification.
The noise comes from the keyed stream ("dp_aggregate", model, round) (emulator/rng.py).
"""
from __future__ import annotations

import math
from typing import Literal, Optional

import torch
from pydantic import Field

from ..registry import Params, register
from .base import Aggregation
from .dp_ledger import PrivacyLedgers
from .fedavg import FedAvg, FedAvgParams


class AdaptiveClipParams(Params):
    """Quantile-based adaptive clipping (dp.md section 2)."""
    quantile: float = Field(0.5, gt=0, lt=1, description="gamma: the target fraction of updates left unclipped")
    lr: float = Field(0.2, ge=0, description="eta_C: the clipping norm's learning rate (geometric update)")
    bit_noise: Optional[float] = Field(None, gt=0, description="sigma_b: noise std on the unclipped count "
                                                                "(default clients_per_round / 20)")


class DPFedAvgParams(FedAvgParams):
    weighting: Literal["uniform"] = Field("uniform", description="every arrival weighs 1 (dp.md Eq. 1.2)")
    clip: float = Field(gt=0, description="S: each update's L2 norm is clipped to it (the initial S_1 with adaptive)")
    noise_multiplier: float = Field(ge=0, description="z: noise std z*S on the sum of clipped updates")
    clients_per_round: int = Field(ge=1, description="m: the fixed denominator qN, and q = m / clients.count "
                                                     "for accounting (set it to select.k)")
    denominator: Literal["fixed", "realised"] = Field(
        "fixed", description="fixed: divide by m (McMahan et al. 2018); realised: by the arrivals "
                             "(not what the accounting assumes)")
    delta: float = Field(1e-5, gt=0, lt=1, description="delta at which epsilon is reported")
    adaptive: Optional[AdaptiveClipParams] = Field(None, description="adaptive clipping (Andrew et al. 2021)")
    pld: bool = Field(False, description="also the final epsilon by the PLD accountant in summary.json "
                                         "(seconds of compute at the end of the run)")

    def bit_noise(self) -> float:
        a = self.adaptive
        return a.bit_noise if a.bit_noise is not None else self.clients_per_round / 20.0

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.clients_per_round > fleet.clients:
            out.append((f"{at}.clients_per_round", f"is {self.clients_per_round}, but clients.count is "
                                                   f"{fleet.clients}; at most that many take part in a round"))
        if self.adaptive is not None and self.noise_multiplier > 0 and 2 * self.bit_noise() <= self.noise_multiplier:
            out.append((f"{at}.adaptive.bit_noise", f"is {self.bit_noise():g}; the update's own noise "
                        f"(docs/algorithms/dp.md Eq. 2.4) needs 2 * bit_noise > noise_multiplier = "
                        f"{self.noise_multiplier:g}"))
        return out


def update_noise_multiplier(z: float, bit_noise: Optional[float]) -> float:
    """z_Δ of dp.md Eq. 2.4 (z itself without adaptive clipping)."""
    if bit_noise is None or z == 0:
        return z
    return (z ** -2 - (2.0 * bit_noise) ** -2) ** -0.5


class DPFedAvg(FedAvg, cohort_path=True):
    """FedAvg's client (one spec per round: the cohort path); the server clips, noises and
    divides by a fixed denominator."""

    name = "dp_fedavg"
    supports = frozenset({"rounds"})     # Δ_k is taken from the round's own broadcast (dp.md section 1)
    weights_total = None          # each arrival weighs 1/m: the weights sum to |C_t| / m
    upload_sensitivity = True     # clipping bounds each decoded upload alone (dp.md 1.1)

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        p = params
        self.m = p.clients_per_round
        self.clip_norm = float(p.clip)                                  # S_t
        self.bit_noise = p.bit_noise() if p.adaptive is not None else None
        self.z_update = update_noise_multiplier(p.noise_multiplier, self.bit_noise)
        self.q = min(1.0, self.m / ctx.num_clients)
        self.ledgers = PrivacyLedgers(self.q, p.noise_multiplier, p.delta)
        self.last = {}

    def aggregate(self, t, arrivals):
        return self._private_mean(t, [a.client for a in arrivals], [a.vectors[0] for a in arrivals])

    def aggregate_rows(self, t, rows):
        return self._private_mean(t, rows.clients.tolist(), rows.params)

    def _private_mean(self, t, clients, vectors):
        S = self.clip_norm
        total = torch.zeros_like(self.x)
        norms = []
        for w in vectors:
            d = w - self.x                                             # Δ_k
            n = float(torch.linalg.vector_norm(d))
            total.add_(d, alpha=min(1.0, S / n) if n > 0 else 1.0)     # Σ Δ'_k (Eq. 1.1)
            norms.append(n)
        if self.ctx.streams is None:
            raise ValueError("dp_fedavg draws its noise from the run's keyed streams: AlgoContext.streams is needed")
        g = self.ctx.streams.keyed("dp_aggregate", self.ctx.task, t)
        noise = torch.from_numpy(g.standard_normal(self.ctx.dim)).to(total)
        total.add_(noise, alpha=self.z_update * S)                     # + N(0, (z_Δ S)² I) (Eq. 1.2)
        denom = self.m if self.p.denominator == "fixed" else max(len(clients), 1)
        self.x = self.x + (self.p.server_lr / denom) * total           # Eq. 1.3
        cols = {"dp_clip": S, "dp_clipped": sum(n > S for n in norms),
                "dp_noise_std": self.z_update * S / denom}
        if self.p.adaptive is not None:
            cols.update(self._adapt(g, norms, S))
        cols.update(self.ledgers.step())
        self.last = cols
        return Aggregation(dict.fromkeys(clients, 1.0 / denom), {"dp_update_norm": dict(zip(clients, norms))}, cols)

    def _adapt(self, g, norms, S) -> dict:
        """The geometric update of the clipping norm from the noised unclipped count (Eq. 2.1-2.3)."""
        a = self.p.adaptive
        b = sum(n <= S for n in norms)                                 # Σ 1[|Δ_k| <= S_t]
        b_bar = (b + self.bit_noise * float(g.standard_normal())) / self.m
        self.clip_norm = S * math.exp(-a.lr * (b_bar - a.quantile))
        return {"dp_unclipped_noised": b_bar}

    def summary(self):
        p = self.p
        return {"dp_delta": p.delta,
                "dp": {"mechanism": "DP-FedAvg: updates clipped to S, Gaussian noise z*S on their sum, "
                                    "fixed denominator" if p.denominator == "fixed" else
                                    "DP-FedAvg with the realised denominator (not covered by the accounting)",
                       "accounting": "dp-accounting RDP (RdpAccountant)", "q": self.q,
                       "noise_multiplier": p.noise_multiplier, "update_noise_multiplier": self.z_update,
                       "clients_per_round": self.m, "clip_norm_initial": p.clip, "clip_norm_final": self.clip_norm,
                       "rounds_accounted": self.ledgers.rounds,
                       "dp_epsilon_poisson": self.last.get("dp_epsilon_poisson", 0.0),
                       "dp_epsilon_noamp": self.last.get("dp_epsilon_noamp", 0.0),
                       **(self.ledgers.pld() if p.pld else {})}}


register("algorithm", "dp_fedavg", DPFedAvgParams,
         "DP-FedAvg (McMahan et al. 2018): updates clipped to S, Gaussian noise on the sum, fixed denominator; "
         "adaptive clipping (Andrew et al. 2021); epsilon by dp-accounting", DPFedAvg)
