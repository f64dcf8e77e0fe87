"""TiFL (Chai et al., HPDC 2020; docs/algorithms/selection.md section 2): clients in tiers
of similar round time; each round draws one tier (Eq. 2.3) and k clients uniformly inside it,
so the round lasts about as long as that tier's slowest member. The adaptive policy moves
probability to tiers that learn worst (Eq. 2.2); credits bound how often a tier is drawn.

Tier latency (Eq. 2.1): a client's mean observed round time once it has `sync_rounds`
observations, else its a-priori estimate; tiers cut the ascending order into `tiers` chunks
(sizes differ by at most one, earlier tiers larger). With a deadline, a client whose estimate
exceeds it is left out (TiFL's dropouts). A tier's accuracy is read, without any extra
evaluation, from its clients' training losses (lower mean loss = higher accuracy).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .base import Selector
from .sampling import Uniforms


def make_tiers(latency: np.ndarray, M: int, deadline: Optional[float] = None) -> tuple:
    """Eq. 2.1: (tier of each client, -1 for dropouts; each tier's latency lambda_t = the max
    latency of its members, NaN for an empty tier). Ties in latency keep the client order."""
    lat = np.where(np.isnan(latency), np.inf, latency)
    keep = np.ones(len(lat), dtype=bool) if deadline is None else lat <= deadline
    idx = np.flatnonzero(keep)
    order = idx[np.argsort(lat[idx], kind="stable")]
    tier_of = np.full(len(lat), -1, dtype=np.int64)
    lam = np.full(M, np.nan)
    for t, part in enumerate(np.array_split(order, M)):
        tier_of[part] = t
        if len(part):
            lam[t] = float(lat[part].max())
    return tier_of, lam


def change_probs(acc: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """Eq. 2.2 (ChangeProbs): the n alive tiers sorted by accuracy ascending (ties: lower
    tier first) get (n - i) / (n (n + 1) / 2) for the i-th; tiers not alive get 0."""
    P = np.zeros(len(acc))
    live = np.flatnonzero(alive)
    n = len(live)
    if not n:
        return P
    order = live[np.lexsort((live, acc[live]))]
    P[order] = (n - np.arange(n)) / (n * (n + 1) / 2)
    return P


def draw_tier(P: np.ndarray, live: np.ndarray, u: float) -> int:
    """Eq. 2.3: a tier among `live` with probability P renormalised over them (uniform when
    they all have P = 0): the first whose cumulative share exceeds u."""
    w = P[live]
    w = np.ones(len(live)) if w.sum() <= 0 else w
    c = np.cumsum(w) / w.sum()
    return int(live[min(int(np.searchsorted(c, u, side="right")), len(live) - 1)])


@dataclass
class TiflSelector(Selector):
    tiers: int = 5
    interval: int = 10                 # I: rounds between probability updates
    credits: Optional[int] = None      # per tier; None: unlimited
    adaptive: bool = True
    paper_trigger: bool = False        # update only if the tier last used did not improve
    sync_rounds: int = 2
    retier_every: int = 0              # 0: the tiers made at the first selection are kept
    name: str = "tifl"
    observes = True
    draws: Optional[Uniforms] = field(default=None, repr=False)

    def __post_init__(self):
        self.reads_loss = self.adaptive
        self.tier_of = None
        self.lam = None
        self.P = np.full(self.tiers, 1.0 / self.tiers)
        self.C = np.full(self.tiers, np.inf if self.credits is None else float(self.credits))
        self.t_prev = None
        self.acc_prev = None
        self.made_at = 0

    def latencies(self, ctx, ids) -> np.ndarray:
        """Eq. 2.1's latency: the mean observed round time after `sync_rounds` observations,
        else the a-priori estimate."""
        h = ctx.history
        mean = h.mean_total(ids)
        enough = h.get("count", ids) >= self.sync_rounds
        return np.where(enough, mean, ctx.profile(ids).total)

    def tier_accuracy(self, ctx) -> np.ndarray:
        """Each tier's accuracy proxy: minus the mean per-sample training loss of its clients'
        last participations (-inf for a tier none of whose clients has been aggregated)."""
        acc = np.full(self.tiers, -np.inf)
        ids = ctx.history.ids
        if not len(ids):
            return acc
        n, s = ctx.history.get("loss_n", ids), ctx.history.get("loss_sum", ids)
        t = self.tier_of[ids]
        for k in range(self.tiers):
            m = (t == k) & (n > 0)
            if m.any():
                acc[k] = -float(s[m].sum() / n[m].sum())
        return acc

    def select(self, ctx):
        r = ctx.round
        if self.tier_of is None or (self.retier_every and r - self.made_at >= self.retier_every):
            self.tier_of, self.lam = make_tiers(self.latencies(ctx, np.arange(ctx.num_clients)), self.tiers,
                                                ctx.deadline)
            self.made_at = r
        filled = ~np.isnan(self.lam)
        if self.adaptive and r >= self.interval and r % self.interval == 0:
            acc = self.tier_accuracy(ctx)
            t = self.t_prev
            if not self.paper_trigger or self.acc_prev is None or t is None or acc[t] <= self.acc_prev[t]:
                self.P = change_probs(acc, filled & (self.C > 0))
            self.acc_prev = acc
        avail = np.asarray(ctx.available, dtype=np.int64)
        tiers_avail = self.tier_of[avail]
        present = np.zeros(self.tiers, dtype=bool)
        present[tiers_avail[tiers_avail >= 0]] = True
        live = np.flatnonzero((self.C > 0) & present)
        if not len(live):
            live = np.flatnonzero(present if present.any() else filled)
        if not len(live):
            return []
        draw = self.draws or Uniforms(ctx.rng)
        t = draw_tier(self.P, live, draw())
        self.C[t] -= 1
        self.t_prev = t
        members = avail[tiers_avail == t]
        k = min(ctx.count(), len(members))
        return np.sort(members[ctx.rng.choice(len(members), k, replace=False)]).tolist() if k else []
