"""Oort's rules that are plain functions of its state (docs/algorithms/selection.md
section 1): the statistical utility (Eq. 1.1), the preferred duration (Eq. 1.2), the
scores (Eq. 1.3), the exploitation pool (Eq. 1.5), the pacer (Eq. 1.7) and the blacklist
(Eq. 1.8)."""
from __future__ import annotations

import math

import numpy as np


def utility(mode: str, cap: float, n_samples, loss_n, loss_sq, unique, last_n, last_sq, ema_sq) -> np.ndarray:
    """Eq. 1.1: U_i = min(|B_i|, cap) sqrt(mean of squared per-sample losses). `full`
    (default): over every sample of the last participation, |B_i| = unique samples trained;
    `last_batch` (FedScale's client): the last mini-batch's mean, |B_i| = |D_i|; `ema` (the
    Oort artifact): the 0.2-EMA of per-batch means over the first epoch, |B_i| = |D_i|."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if mode == "full":
            return np.minimum(unique, cap) * np.sqrt(loss_sq / loss_n)
        if mode == "last_batch":
            return np.minimum(n_samples, cap) * np.sqrt(last_sq / last_n)
        return np.minimum(n_samples, cap) * np.sqrt(ema_sq)


def preferred_duration(durations: np.ndarray, pct: float) -> float:
    """Eq. 1.2: T = the floor(len * pct / 100)-th smallest duration of every registered client
    (0-based, capped at the last); +inf from pct >= 100 (no penalty)."""
    if pct >= 100 or not len(durations):
        return math.inf
    i = min(int(math.floor(len(durations) * pct / 100)), len(durations) - 1)
    return float(np.partition(durations, i)[i])


def penalty(t: np.ndarray, T: float, alpha: float) -> np.ndarray:
    """Eq. 1.4: (T / max(t, 1e-4))^alpha for clients strictly slower than T, else 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > T, (T / np.maximum(t, 1e-4)) ** alpha, 1.0)


def reward_scale(rewards: np.ndarray, clip_bound: float) -> tuple:
    """Eq. 1.3's normalisation from every key's reward (unexplored ones' too): (clip, minR,
    rangeR) with clip the floor(len * clip_bound)-th smallest positive reward, minR 0.999 x
    the smallest, rangeR max(maxR - minR, 1e-4)."""
    pos = rewards[rewards > 0]
    if not len(pos):
        return 0.0, 0.0, 1e-4
    i = min(int(math.floor(len(pos) * clip_bound)), len(pos) - 1)
    clip = float(np.partition(pos, i)[i])
    lo, hi = float(pos.min()), float(pos.max())
    return clip, 0.999 * lo, max(hi - 0.999 * lo, 1e-4)


def scores(R, t, L, r: int, clip: float, minR: float, rangeR: float, T: float, alpha: float,
           absolute: bool = True) -> np.ndarray:
    """Eq. 1.3 (with Eq. 1.4): ((min(R, clip) - minR) / rangeR + sqrt(0.1 ln r / L)) x penalty."""
    s = (np.minimum(R, clip) - minR) / rangeR + np.sqrt(0.1 * math.log(r) / L)
    s = s * penalty(t, T, alpha)
    return np.abs(s) if absolute else s


def descending(v: np.ndarray) -> np.ndarray:
    """Positions of v by value, descending, ties in position order: the order of a stable
    sort, from a quicksort whose runs of equal values are then put in position order."""
    n = len(v)
    o = np.argsort(-v, kind="quicksort")
    sv = v[o]
    eq = sv[1:] == sv[:-1]
    if not eq.any():
        return o
    run = np.cumsum(np.concatenate([[True], ~eq])) - 1
    tie = np.zeros(n, dtype=bool)
    tie[1:] |= eq
    tie[:-1] |= eq
    at = np.flatnonzero(tie)
    o[at] = o[at][np.argsort(run[at] * n + o[at], kind="quicksort")]
    return o


def pool_size(sorted_scores: np.ndarray, n_exploit: int, cut_off: float, rule: str) -> int:
    """Eq. 1.5: how many of the scores (descending) enter the exploitation pool. The cut-off
    is the (n_exploit+1)-th best score x `cut_off`; FedScale keeps scanning until the pool
    holds more than 10 n_exploit clients, the Oort artifact stops at the first score below."""
    n = len(sorted_scores)
    if n_exploit >= n:
        return n
    cutoff = sorted_scores[n_exploit] * cut_off
    above = int(np.count_nonzero(sorted_scores >= cutoff))      # scores are descending
    if rule == "oort_repo":
        return above
    return min(n, max(above, 10 * n_exploit + 1))


def pacer(hist: list, r: int, W: int, delta: float, pct: float, tighten: bool) -> float:
    """Eq. 1.7: every W rounds from 2W, compare the exploitation utility summed over the last W
    entries with the W before: flat (|cur - prev| <= 0.1 prev) relaxes the preferred
    duration's percentile by delta (at most 100); a sharp change (>= 5 prev) tightens it by
    delta (at least delta) when `tighten` (FedScale; the paper only relaxes)."""
    if r < 2 * W or r % W or len(hist) < 2 * W:
        return pct
    prev, cur = float(sum(hist[-2 * W:-W])), float(sum(hist[-W:]))
    if abs(cur - prev) <= 0.1 * prev:
        return min(100.0, pct + delta)
    if tighten and abs(cur - prev) >= 5 * prev:
        return max(delta, pct - delta)
    return pct


def blacklist(ids: np.ndarray, counts: np.ndarray, rounds: int, max_len: float, registered: int) -> np.ndarray:
    """Eq. 1.8: the clients picked more than `rounds` times, most-picked first (ties by id),
    at most floor(max_len x registered) of them; none when `rounds` is -1 (off)."""
    if rounds < 0 or not len(ids):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((ids, -counts))
    over = order[counts[order] > rounds]
    return np.sort(ids[over[:int(math.floor(max_len * registered))]])
