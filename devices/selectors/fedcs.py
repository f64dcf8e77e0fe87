"""FedCS (Nishio & Yonetani, ICC 2019; docs/algorithms/selection.md section 3): among a
random share of the available clients, greedily admit as many as fit the round's deadline,
given that the model is distributed to all of them, they train in parallel, and their
uploads go one at a time in the admission order (Eq. 3.1, 3.2). Valid only with a deadline.

Estimates per candidate: its last observed download, computation and upload seconds, else
its a-priori profile. `upload_model: parallel` replaces the scheduled uploads by parallel
ones (Theta = max(t_UD + t_UL)), which is what flemu's dedicated links do; the default is
FedCS's own model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import Selector


def estimates(ctx, ids: np.ndarray) -> tuple:
    """(t_DL, t_UD, t_UL) of these clients: last observed, else profile."""
    prof = ctx.profile(ids)
    h = ctx.history
    out = []
    for name, prior in (("t_down", prof.t_down), ("t_comp", prof.t_comp), ("t_up", prof.t_up)):
        seen = h.get(name, ids)
        out.append(np.where(np.isnan(seen), prior, seen))
    return tuple(out)


def greedy(dl: np.ndarray, ud: np.ndarray, ul: np.ndarray, T_round: float, t_cs: float = 0.0,
           t_agg: float = 0.0, strict: bool = True, parallel: bool = False, cap: int = 0) -> list:
    """Eq. 3.2: positions admitted, in upload order. Each step takes the candidate that adds
    least to the predicted finish Td + Theta (ties: the lowest position) and admits it if
    t_cs + Td' + Theta' + t_agg < T_round (<= without `strict`). A rejected step leaves the
    state unchanged and every other candidate costs at least as much, so the greedy stops."""
    left = np.ones(len(dl), dtype=bool)
    S: list = []
    Td = Theta = 0.0
    while left.any() and (not cap or len(S) < cap):
        d_inc = np.maximum(Td, dl) - Td
        if parallel:
            cost = d_inc + np.maximum(0.0, ud + ul - Theta)
        else:
            cost = d_inc + ul + np.maximum(0.0, ud - Theta)
        cost = np.where(left, cost, np.inf)
        x = int(np.argmin(cost))
        left[x] = False
        Td_new = max(Td, float(dl[x]))
        Th_new = max(Theta, float(ud[x] + ul[x])) if parallel else Theta + float(ul[x]) + max(0.0, float(ud[x]) - Theta)
        t = t_cs + Td_new + Th_new + t_agg
        if not (t < T_round if strict else t <= T_round):
            break
        S.append(x)
        Td, Theta = Td_new, Th_new
    return S


@dataclass
class FedCSSelector(Selector):
    fraction_candidates: float = 0.1     # C: the share of available clients asked for their state
    cap_k: bool = False                  # stop admitting at k
    upload_model: str = "sequential"     # sequential (FedCS) | parallel
    strict: bool = True
    t_cs: float = 0.0
    t_agg: float = 0.0
    name: str = "fedcs"
    observes = True

    def check(self, ctx):
        if ctx.deadline is None:
            return [("model", "fedcs admits clients against the round's deadline; this protocol has none")]
        return []

    def select(self, ctx):
        if ctx.deadline is None:
            raise ValueError("fedcs needs the round's deadline")
        avail = np.asarray(ctx.available, dtype=np.int64)
        if not len(avail):
            return []
        n = min(len(avail), max(1, math.ceil(self.fraction_candidates * len(avail) - 1e-9)))
        cand = np.sort(avail[ctx.rng.choice(len(avail), n, replace=False)])
        dl, ud, ul = (np.nan_to_num(a, nan=np.inf) for a in estimates(ctx, cand))
        cap = ctx.count() if self.cap_k and ctx.k is not None else 0
        S = greedy(dl, ud, ul, ctx.deadline, self.t_cs, self.t_agg, self.strict, self.upload_model == "parallel", cap)
        return np.sort(cand[S]).tolist()
