"""Oort (Lai et al., OSDI 2021), as FedScale runs it by default (docs/algorithms/selection.md
section 1): a bandit over clients. Explored clients are scored by their statistical utility
plus a staleness bonus, times a penalty for being slower than a preferred duration T
(Eq. 1.3, 1.4); most slots go to a weighted draw among the best scores (exploitation, Eq.
1.5, 1.6), the rest to clients never tried, by data size and speed (exploration, Eq. 1.6);
the exploration share decays (Eq. 1.9), a pacer moves T (Eq. 1.7), a blacklist retires
clients picked too often (Eq. 1.8). The paper's and the Oort artifact's choices are flags
(`rule`, `utility`, `pacer_tighten`, `fill_random`).

Per-client state (reward, duration, feedback round, feedback count) is kept only for clients
that gave feedback (`ClientColumns`); a client never tried reads its capped data size and its
a-priori duration from the context.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import oort_rules as rules
from .base import Selector, Status
from .columns import ClientColumns
from .sampling import Uniforms, wswor

FILTER_LESS = 32         # FedScale's registration filter (samples)
STATE = {"reward": (np.float64, np.nan), "duration": (np.float64, np.nan), "stamp": (np.int64, 0),
         "count": (np.int64, 0)}


@dataclass
class OortSelector(Selector):
    exploration: float = 0.9          # eps_0
    exploration_decay: float = 0.98
    exploration_min: float = 0.3
    alpha: float = 2.0                # straggler penalty exponent (FedScale round_penalty)
    pacer_step: int = 20              # W (rounds)
    pacer_delta: float = 5.0          # percentile points
    round_threshold: float = 30.0     # T's initial percentile
    cut_off: float = 0.05
    clip_bound: float = 0.9
    blacklist_rounds: int = -1        # -1: off
    blacklist_max_len: float = 0.3
    sample_window: float = 5.0
    utility_cap: float = 600.0        # local steps x batch (FedScale: 20 x 30)
    filter_less: Optional[int] = None  # None: auto (docs/algorithms/selection.md 1.10)
    utility: str = "full"             # full | last_batch | ema
    rule: str = "fedscale"            # fedscale | oort_repo
    pacer_tighten: bool = True
    fill_random: bool = False
    name: str = "oort"
    observes = True
    reads_loss = True
    draws: Optional[Uniforms] = field(default=None, repr=False)   # injected uniforms (tests)

    def __post_init__(self):
        self.state = ClientColumns(STATE)
        self.eps = self.exploration
        self.eps_min = self.exploration_min
        self.pct = self.round_threshold
        self.calls = 0
        self.exploit_prev = np.zeros(0, dtype=np.int64)
        self.explore_prev = np.zeros(0, dtype=np.int64)
        self.fed_back: set = set()
        self.hist_exploit: list = []
        self.hist_explore: list = []
        self.registered = None            # fleet mask, made at the first call
        self.sizes = None                 # every client's data size (the context's)

    # -- registration (Eq. 1.10) ------------------------------------------------------------
    def threshold(self, n_samples: np.ndarray, k: int) -> int:
        """The registration filter: `filter_less`, or (auto) FedScale's 32 lowered to the
        k-th largest client so that at least k clients register."""
        if self.filter_less is not None:
            return int(self.filter_less)
        kth = int(np.sort(n_samples)[::-1][min(k, len(n_samples)) - 1]) if len(n_samples) else 0
        return min(FILTER_LESS, kth)

    def check(self, ctx):
        k = ctx.count()
        n = np.asarray(ctx.n_samples)
        if self.filter_less is not None and int((n >= self.filter_less).sum()) < k:
            return [("filter_less", f"only {int((n >= self.filter_less).sum())} of {len(n)} clients have at least "
                                    f"{self.filter_less} samples, fewer than k = {k} (the smallest has {int(n.min())}); "
                                    "lower filter_less or leave it out (auto)")]
        return []

    def _register(self, ctx) -> None:
        if self.registered is None:
            self.sizes = n = np.asarray(ctx.n_samples)
            self.registered = n >= self.threshold(n, ctx.count())

    # -- what the selector knows of a client ------------------------------------------------
    def known(self, ctx, ids) -> tuple:
        """(R, t, L, c) of these clients: their last feedback's reward, duration, round and
        count; a client never tried has its capped data size as reward and its a-priori
        duration (the median of known durations where the device models give none)."""
        st = self.state
        sl = st.slots(ids)
        R, t, L, c = (st.take(name, sl) for name in ("reward", "duration", "stamp", "count"))
        R = np.where(np.isnan(R), np.minimum(np.asarray(ctx.n_samples)[ids], self.utility_cap), R)
        miss = np.isnan(t)
        if miss.any():
            prior = ctx.profile(ids[miss]).total
            seen = st.column("duration")
            fallback = float(np.nanmedian(seen)) if len(seen) and not np.isnan(seen).all() else 0.0
            t[miss] = np.where(np.isnan(prior), fallback, prior)
        return R, t, L, c

    def durations(self, ctx, ids) -> np.ndarray:
        return self.known(ctx, ids)[1]

    def rewards(self, ids, n_samples) -> np.ndarray:
        R = self.state.get("reward", ids)
        return np.where(np.isnan(R), np.minimum(np.asarray(n_samples)[ids], self.utility_cap), R)

    # -- select (Eq. 1.3 - 1.6, 1.9) --------------------------------------------------------
    def select(self, ctx):
        self._register(ctx)
        num = ctx.count()
        avail = np.asarray(ctx.available, dtype=np.int64)
        feasible = avail[self.registered[avail]]
        self.calls += 1
        if len(feasible) <= num:
            return np.sort(feasible).tolist()
        if self.calls == 1:                                     # FedScale: the first round is random
            return np.sort(feasible[ctx.rng.choice(len(feasible), num, replace=False)]).tolist()
        draw = self.draws or Uniforms(ctx.rng)
        BL = self.blacklisted()
        self.pace(ctx.round)
        keys = feasible[~np.isin(feasible, BL)] if len(BL) else feasible
        reg_ids = np.flatnonzero(self.registered)
        T = rules.preferred_duration(self.durations(ctx, reg_ids), self.pct)
        if self.rule == "oort_repo" and self.state.n >= len(reg_ids):
            self.eps = self.eps_min = 0.0                        # nobody left unexplored: for good
        R, t, L, c = self.known(ctx, keys)
        exploit = self.exploit(ctx, keys, (R, t, L, c), num, T, draw)
        new = c == 0
        explore = self.explore(keys[new], R[new] * rules.penalty(t[new], T, self.alpha), num - len(exploit), draw)
        out = np.concatenate([explore, exploit]).astype(np.int64)
        if self.fill_random and len(out) < num:                 # the Oort artifact's top-up (A6)
            rest = np.setdiff1d(keys, out)
            out = np.concatenate([out, rest[ctx.rng.choice(len(rest), min(num - len(out), len(rest)), replace=False)]])
        return np.sort(out).tolist()

    def blacklisted(self) -> np.ndarray:
        if self.blacklist_rounds < 0:
            return np.zeros(0, dtype=np.int64)
        return rules.blacklist(self.state.ids, self.state.column("count").copy(), self.blacklist_rounds,
                               self.blacklist_max_len, int(self.registered.sum()))

    def exploit(self, ctx, keys, known, num: int, T: float, draw) -> np.ndarray:
        """Eq. 1.3 - 1.5: the exploited clients, by a weighted draw among the best scores."""
        R, t, L, c = known
        clip, minR, rangeR = rules.reward_scale(R, self.clip_bound)           # every key's reward
        old = c > 0
        explored = keys[old]
        s = rules.scores(R[old], t[old], L[old], ctx.round, clip, minR, rangeR, T, self.alpha,
                         absolute=self.rule != "oort_repo")
        self.eps = max(self.eps * self.exploration_decay, self.eps_min)                  # Eq. 1.9
        if self.rule == "oort_repo":
            n_exploit = min(int(math.floor(num * (1 - self.eps))), len(s))
        else:
            n_exploit = min(num - int(math.floor(num * self.eps)), len(s))
        order = rules.descending(s)
        pool = order[:rules.pool_size(s[order], n_exploit, self.cut_off, self.rule)]
        picked = explored[pool[wswor(s[pool], n_exploit, draw)]]
        self.exploit_prev = picked
        return picked

    def explore(self, cand, prior, room: int, draw) -> np.ndarray:
        """Eq. 1.6: clients never tried (`cand`, in id order), drawn by `prior` (capped data
        size x speed penalty) from the top sample_window x n_explore of them."""
        if not len(cand):
            return np.zeros(0, dtype=np.int64)
        n_explore = min(len(cand), max(room, 0))
        order = rules.descending(prior)
        top = order[:min(int(math.floor(self.sample_window * n_explore)), len(cand))]
        picked = cand[top[wswor(prior[top], n_explore, draw)]]
        self.explore_prev = picked
        return picked

    # -- feedback and pacer (Eq. 1.7) -------------------------------------------------------
    def pace(self, r: int) -> None:
        """Log last round's mean exploitation (and exploration) reward, then move T."""
        for prev, hist in ((self.exploit_prev, self.hist_exploit), (self.explore_prev, self.hist_explore)):
            fed = np.asarray([c for c in prev.tolist() if c in self.fed_back], dtype=np.int64)
            R = self.state.get("reward", fed)
            hist.append(float(np.nansum(R)) / (len(fed) + 1e-4))
        self.fed_back = set()
        self.pct = rules.pacer(self.hist_exploit, r, self.pacer_step, self.pacer_delta, self.pct, self.pacer_tighten)

    def observe(self, o):
        """Feedback (Eq. 1.1): aggregated clients their utility, stragglers the round's mean
        utility of aggregated clients; both their full duration and the round's stamp.
        Clients that went offline give none."""
        ran = o.status != Status.DROPPED
        if not ran.any():
            return
        ids = o.ids[ran]
        sizes = self.sizes[ids] if self.sizes is not None else np.full(len(ids), np.nan)
        U = rules.utility(self.utility, self.utility_cap, sizes, o.loss_n[ran], o.loss_sq[ran],
                          o.unique[ran], o.last_n[ran], o.last_sq[ran], o.ema_sq[ran])
        agg = (o.status[ran] == Status.AGGREGATED) & ~np.isnan(U)
        mean_u = float(U[agg].mean()) if agg.any() else math.nan
        reward = np.where(agg, U, mean_u)
        old = self.state.get("reward", ids)
        reward = np.where(np.isnan(reward), old, reward)          # no utility known: keep the last
        self.state.put("reward", ids, reward)
        self.state.put("duration", ids, o.total[ran])
        self.state.put("stamp", ids, o.round)
        self.state.add("count", ids, 1)
        self.fed_back.update(ids.tolist())
