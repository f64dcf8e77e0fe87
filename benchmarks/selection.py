"""A selector's per-round cost and the history's memory (docs/selection.md).

    python -m benchmarks.selection [--clients 100000] [--k 100] [--reps 21]

Per-round cost: `select(ctx)` then `observe(outcomes)` of one round, at N clients all online,
each selector with its whole history filled (every client has taken part: Oort scores all N
explored arms, sorts them, draws from its pool), the median over `reps` rounds (each round a
fresh draw from the run's stream; the first is discarded as warm-up) and its ratio to
`uniform`'s, measured in the same run. Goal: Oort with full history <= 50 ms a round at 10^5
(every registered client explored, the exploration share at its floor: 70 of k = 100 slots
drawn from a pool of about all of them, sorted by score; nothing is left to explore, so
FedScale's rule returns those 70).

Memory: bytes the history holds (its columns at capacity, ids and sorted index) after 10^4
and 10^5 participants, per participant, and the same for Oort's own per-client state; the
check that it does not depend on the fleet's size (the same participants drawn from 10^8 ids).

Writes benchmarks/results/selection.json.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from benchmarks.common import RESULTS, log, machine
from devices.selectors import (FedCSSelector, History, OortSelector, PowerOfChoiceSelector, Profile, RoundOutcomes,
                               SelectionContext, TiflSelector, UniformSelection)

OUT = RESULTS / "selection.json"


def outcomes(ids: np.ndarray, r: int, rng) -> RoundOutcomes:
    n = len(ids)
    t = rng.uniform(1, 100, (3, n))
    agg = rng.random(n) < 0.9
    loss_n = np.where(agg, 100.0, 0.0)
    return RoundOutcomes(round=r, ids=ids, status=np.where(agg, 0, 1).astype(np.int8), t_down=t[0], t_comp=t[1],
                         t_up=t[2], total=t.sum(0), met_deadline=agg, cut=~agg, loss_n=loss_n,
                         loss_sum=loss_n * rng.uniform(0.1, 3, n), loss_sq=loss_n * rng.uniform(0.1, 9, n),
                         unique=np.where(agg, 100, 0), last_n=np.full(n, 10.0), last_sq=rng.uniform(1, 50, n),
                         ema_sq=rng.uniform(0.1, 9, n))


class Fleet:
    """N clients with sizes, a-priori profiles and a history in which all N took part."""

    def __init__(self, N: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.N = N
        self.sizes = rng.integers(20, 600, N)
        self.prof = rng.uniform(1, 100, (3, N))
        self.history = History()
        for r, part in enumerate(np.array_split(np.arange(N), max(1, N // 1000)), 1):
            self.history.record(outcomes(part, r, rng))
        self.rounds = max(1, N // 1000)
        self.rng = np.random.default_rng(seed + 1)

    def profile(self, ids) -> Profile:
        ids = np.asarray(ids)
        return Profile(np.ones(len(ids)), self.prof[0][ids], self.prof[1][ids], self.prof[2][ids])

    def context(self, r: int, k: int, deadline=None) -> SelectionContext:
        return SelectionContext(round=r, available=np.arange(self.N), num_clients=self.N, rng=self.rng, k=k,
                                deadline=deadline, n_samples=self.sizes, history=self.history,
                                profile_fn=self.profile)


def warmed_oort(fleet: Fleet, k: int) -> OortSelector:
    """Oort whose every registered client gave feedback (full history)."""
    s = OortSelector()
    s.sizes = fleet.sizes
    s.registered = fleet.sizes >= s.threshold(fleet.sizes, k)
    ids = np.flatnonzero(s.registered)
    s.state.put("reward", ids, fleet.rng.uniform(0, 600, len(ids)))
    s.state.put("duration", ids, fleet.prof.sum(0)[ids])
    s.state.put("stamp", ids, fleet.rng.integers(1, fleet.rounds + 1, len(ids)))
    s.state.put("count", ids, fleet.rng.integers(1, 5, len(ids)))
    s.calls = 1
    s.eps = s.exploration_min             # steady state: 70 of 100 slots exploited
    return s


def per_round(fleet: Fleet, sel, k: int, reps: int, deadline=None) -> dict:
    """Median seconds of select and of observe over `reps` rounds (warm-up discarded)."""
    sel_t, obs_t, sizes = [], [], []
    r0 = fleet.rounds + 1
    for i in range(reps + 1):
        r = r0 + i
        ctx = fleet.context(r, k, deadline)
        t = time.perf_counter()
        got = sel.select(ctx)
        t1 = time.perf_counter()
        ids = np.sort(np.asarray(got.ids if hasattr(got, "ids") else got, dtype=np.int64))
        o = outcomes(ids, r, fleet.rng)
        t2 = time.perf_counter()
        if sel.observes:
            fleet.history.record(o)
            sel.observe(o)
        t3 = time.perf_counter()
        if i:
            sel_t.append(t1 - t)
            obs_t.append(t3 - t2)
            sizes.append(len(ids))
    return {"select_ms": 1e3 * float(np.median(sel_t)), "observe_ms": 1e3 * float(np.median(obs_t)),
            "round_ms": 1e3 * float(np.median(np.add(sel_t, obs_t))), "selected_median": float(np.median(sizes))}


def memory(participants: int, fleet_ids: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(fleet_ids, participants, replace=False))
    h = History()
    for r, part in enumerate(np.array_split(ids, max(1, participants // 1000)), 1):
        h.record(outcomes(part, r, rng))
    s = OortSelector()
    s.state.put("reward", ids, 1.0)
    s.state.put("duration", ids, 1.0)
    s.state.put("stamp", ids, 1)
    s.state.put("count", ids, 1)
    return {"participants": participants, "fleet_ids": fleet_ids, "history_bytes": h.nbytes,
            "history_bytes_per_participant": h.nbytes / participants, "oort_state_bytes": s.state.nbytes,
            "oort_state_bytes_per_participant": s.state.nbytes / participants}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--reps", type=int, default=21)
    a = ap.parse_args(argv)
    N, k = a.clients, a.k
    out = {"machine": machine(), "clients": N, "k": k, "reps": a.reps, "per_round": {}, "memory": []}
    log(f"per-round cost at {N} clients, k = {k}, full history, median of {a.reps} rounds")
    cases = {
        "uniform": lambda f: UniformSelection(k=k),
        "oort": lambda f: warmed_oort(f, k),
        "tifl": lambda f: TiflSelector(),
        "fedcs": lambda f: FedCSSelector(),
        "power_of_choice_rpow_d": lambda f: PowerOfChoiceSelector(variant="rpow_d"),
    }
    for name, make in cases.items():
        fleet = Fleet(N)
        res = per_round(fleet, make(fleet), k, a.reps, deadline=200.0 if name == "fedcs" else None)
        out["per_round"][name] = res
        log(f"  {name:24s} select {res['select_ms']:8.2f} ms  observe {res['observe_ms']:6.2f} ms  "
            f"round {res['round_ms']:8.2f} ms  ({res['selected_median']:.0f} selected)")
    base = out["per_round"]["uniform"]["round_ms"]
    for name, res in out["per_round"].items():
        res["ratio_to_uniform"] = res["round_ms"] / base
    oort = out["per_round"]["oort"]["round_ms"]
    out["goal"] = {"oort_round_ms": oort, "goal_ms": 50.0, "met": bool(oort <= 50.0)}
    log(f"  goal: Oort {oort:.2f} ms a round (<= 50 ms)  {'MET' if oort <= 50 else 'NOT MET'}")
    log("history memory")
    for P, ids in ((10_000, 10_000), (10_000, 10 ** 8), (100_000, 100_000), (100_000, 10 ** 8)):
        m = memory(P, ids)
        out["memory"].append(m)
        log(f"  {P:>7} participants of {ids:>9} ids: history {m['history_bytes'] / 1e6:7.2f} MB "
            f"({m['history_bytes_per_participant']:.0f} B each), Oort state {m['oort_state_bytes'] / 1e6:6.2f} MB")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1))
    log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
