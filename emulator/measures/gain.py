"""Hitting times and the multi-model gain (docs/algorithms/multimodel.md section 3, Eq. 3).

A model "hits" its target at the first round t >= 1 whose evaluated metric meets it (<= eps
for errors such as `gap`, >= eps for accuracies). T_P, the rounds until *all* M models meet
their targets, follows one of three rules (A12): `simultaneous` (the first round at which
every model's latest evaluation meets its target at once: the default, as the paper reads
all models at one T_M), `max_first_hit` (the last of the per-model first hits), or
`first_model` (model 0 alone: Remark 3's one-model view). The gain is
g_P(M, eps) = M T_1(eps) / T_P(M, eps).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

LOWER_IS_BETTER = ("gap", "log10_gap", "dist_to_opt", "test_loss", "train_loss", "full_train_loss")


def lower_is_better(metric: str) -> bool:
    return metric in LOWER_IS_BETTER


def meets(value, eps: float, lower: bool) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return value <= eps if lower else value >= eps


def first_hit(rounds: Sequence[int], values: Sequence[float], eps: float, lower: bool) -> Optional[int]:
    """The first round >= 1 whose value meets eps (None: never)."""
    for r, v in zip(rounds, values):
        if r >= 1 and meets(v, eps, lower):
            return int(r)
    return None


def joint_hit(series: Sequence[tuple], eps: Sequence[float], rule: str, lower: bool) -> Optional[int]:
    """T_P from each model's (rounds, values) evaluated series (rounds ascending)."""
    if rule == "first_model":
        return first_hit(*series[0], eps[0], lower)
    if rule == "max_first_hit":
        hits = [first_hit(r, v, e, lower) for (r, v), e in zip(series, eps)]
        return None if any(h is None for h in hits) else max(hits)
    if rule != "simultaneous":
        raise ValueError(f"unknown hit rule {rule!r}")
    events = sorted({int(r) for rs, _ in series for r in rs if r >= 1})
    latest = [None] * len(series)
    pos = [0] * len(series)
    for t in events:
        for m, (rs, vs) in enumerate(series):
            while pos[m] < len(rs) and rs[pos[m]] <= t:
                latest[m] = vs[pos[m]]
                pos[m] += 1
        if all(meets(v, e, lower) for v, e in zip(latest, eps)):
            return t
    return None


def gain(M: int, T1: Optional[float], TP: Optional[float]) -> Optional[float]:
    """g = M T_1 / T_P (Eq. 3); None when either is unknown."""
    if T1 is None or TP is None or TP <= 0:
        return None
    return M * T1 / TP
