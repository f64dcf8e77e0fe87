"""Privacy accounting of a Gaussian mechanism repeated once per aggregation, through Google's
`dp-accounting` library (docs/algorithms/dp.md section 3): never computed by hand here.

One aggregation is `PoissonSampledDpEvent(q, GaussianDpEvent(z))`; its RDP curve is computed
once by the library's `RdpAccountant` (at its default orders) and t aggregations compose to t
times it (RDP composition adds curves: the accountant's own `compose(event, t)` does the
same product), so epsilon after t rounds is the library's `compute_epsilon` of t x the curve:
the same number as `RdpAccountant().compose(event, t).get_epsilon(delta)`, at a cost that
does not grow with t. Two ledgers: Poisson sampling at the nominal q, and q = 1 (dp.md Eq. 3.1).
"""
from __future__ import annotations

import math

import numpy as np


class EpsilonLedger:
    """epsilon at `delta` after t repetitions of the subsampled Gaussian mechanism (q, z)."""

    def __init__(self, q: float, noise_multiplier: float, delta: float):
        from dp_accounting import dp_event
        from dp_accounting.rdp import rdp_privacy_accountant as rdp
        self.q, self.z, self.delta = float(q), float(noise_multiplier), float(delta)
        self._compute_epsilon = rdp.compute_epsilon
        acc = rdp.RdpAccountant()
        if self.z > 0:
            acc.compose(dp_event.PoissonSampledDpEvent(self.q, dp_event.GaussianDpEvent(self.z)), 1)
        self.orders, self.curve = acc.orders, acc.rdp       # one aggregation's RDP curve

    def epsilon(self, t: int) -> float:
        """epsilon after t aggregations (inf without noise; 0 before the first)."""
        if t <= 0:
            return 0.0
        if self.z <= 0:
            return math.inf
        return float(self._compute_epsilon(self.orders, t * np.asarray(self.curve), self.delta)[0])


class PrivacyLedgers:
    """The two labelled assumptions of dp.md section 3: `poisson` (q = clients_per_round / N)
    and `noamp` (q = 1: no amplification by sampling)."""

    def __init__(self, q: float, noise_multiplier: float, delta: float):
        self.poisson = EpsilonLedger(q, noise_multiplier, delta)
        self.noamp = EpsilonLedger(1.0, noise_multiplier, delta)
        self.rounds = 0

    def pld(self) -> dict:
        """epsilon after the rounds so far by the library's PLD accountant (tighter than RDP,
        seconds of compute: once, for summary.json; dp.md section 3)."""
        from dp_accounting import dp_event
        from dp_accounting.pld import pld_privacy_accountant as pld
        out = {}
        for key, ledger in (("pld_epsilon_poisson", self.poisson), ("pld_epsilon_noamp", self.noamp)):
            if self.rounds == 0 or ledger.z <= 0:
                out[key] = 0.0 if self.rounds == 0 else math.inf
                continue
            g = dp_event.GaussianDpEvent(ledger.z)
            acc = pld.PLDAccountant()
            acc.compose(g if ledger.q >= 1 else dp_event.PoissonSampledDpEvent(ledger.q, g), self.rounds)
            out[key] = float(acc.get_epsilon(ledger.delta))
        return out

    def step(self) -> dict:
        """One more aggregation: the metrics.csv columns after it."""
        self.rounds += 1
        return {"dp_epsilon_poisson": self.poisson.epsilon(self.rounds),
                "dp_epsilon_noamp": self.noamp.epsilon(self.rounds)}
