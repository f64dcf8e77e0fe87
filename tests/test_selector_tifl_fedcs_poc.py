"""TiFL, FedCS and power-of-choice on hand-computed cases (docs/algorithms/selection.md
sections 2-4), with injected uniforms where a case draws."""
from __future__ import annotations

import numpy as np
import pytest

from devices.selectors import Chosen, History, Profile, RoundOutcomes, SelectionContext, Uniforms
from devices.selectors.fedcs import FedCSSelector, greedy
from devices.selectors.power_of_choice import PowerOfChoiceSelector
from devices.selectors.tifl import TiflSelector, change_probs, draw_tier, make_tiers

LAT = np.array([0, 1.0, 5.0, 2.0, 9.0, 4.0, 8.0])          # Ti-1: clients 1..6 (0 unused)


# ----------------------------------------------------------------------------- TiFL
def test_Ti1_tiering():
    tier_of, lam = make_tiers(LAT[1:], 3)
    tiers = [sorted((np.flatnonzero(tier_of == t) + 1).tolist()) for t in range(3)]
    assert tiers == [[1, 3], [2, 5], [4, 6]] and lam.tolist() == [2, 5, 9]
    tier_of, lam = make_tiers(np.array([1.0, 2.0, 3.0, 4.0]), 3)       # array_split: 2, 1, 1
    assert tier_of.tolist() == [0, 0, 1, 2]
    tier_of, _ = make_tiers(LAT[1:], 3, deadline=8.5)                  # client 4 (9 s) drops out
    assert tier_of[3] == -1 and (tier_of >= 0).sum() == 5


def test_Ti2_change_probs():
    P = change_probs(np.array([0.80, 0.60, 0.70]), np.array([True, True, True]))
    assert P == pytest.approx([1 / 6, 1 / 2, 1 / 3])
    P = change_probs(np.array([0.80, 0.60, 0.70]), np.array([False, True, True]))
    assert P == pytest.approx([0, 2 / 3, 1 / 3])


def test_Ti3_tier_draw():
    P = np.array([1 / 6, 1 / 2, 1 / 3])
    live = np.arange(3)
    assert [draw_tier(P, live, u) for u in (0.10, 0.50, 0.70)] == [0, 1, 2]


def tifl_context(r, avail, rng, k=2, history=None):
    return SelectionContext(round=r, available=np.asarray(avail), num_clients=7, rng=rng, k=k,
                            n_samples=np.full(7, 10), history=history or History(),
                            profile_fn=lambda ids: Profile(*([np.zeros(len(ids))] * 2), LAT[np.asarray(ids)],
                                                           np.zeros(len(ids))))


def test_Ti4_credits_are_never_exceeded_and_one_tier_per_round():
    """Credits 2 per tier (client 0 is the fastest tier's too): 6 rounds use each tier twice;
    every selection lies in one tier; a tier without credits is never drawn again."""
    s = TiflSelector(tiers=3, credits=2, adaptive=False)
    rng = np.random.default_rng(4)
    used = []
    for r in range(1, 7):
        got = s.select(tifl_context(r, range(1, 7), rng))
        t = {int(s.tier_of[c]) for c in got}
        assert len(t) == 1 and len(got) == 2
        used.append(t.pop())
    assert sorted(used) == [0, 0, 1, 1, 2, 2] and (s.C == 0).all()


def test_Ti5_expected_round_time():
    """Uniform tier probabilities, k = 2: the mean of the drawn tier's latency tends to
    (2 + 5 + 9) / 3 = 5.333 (random 2-of-6: E[max] = 6.8)."""
    s = TiflSelector(tiers=3, adaptive=False)
    rng = np.random.default_rng(9)
    times = [LAT[s.select(tifl_context(r, range(1, 7), rng))].max() for r in range(1, 6001)]
    assert np.mean(times) == pytest.approx(16 / 3, abs=3 * np.std(times) / np.sqrt(len(times)))
    pairs = [(a, b) for a in range(1, 7) for b in range(a + 1, 7)]
    assert np.mean([max(LAT[a], LAT[b]) for a, b in pairs]) == pytest.approx(6.8)


def test_adaptive_tifl_moves_probability_to_the_tier_that_learns_worst():
    """At round I the tiers are ranked by their clients' mean training loss: the highest loss
    (lowest accuracy) gets n / D; a tier never aggregated counts as the worst."""
    h = History()
    ids = np.array([1, 3, 2, 5])             # tiers 0 and 1 were aggregated; tier 2 never
    nan = np.full(4, np.nan)
    h.record(RoundOutcomes(round=1, ids=ids, status=np.zeros(4, np.int8), t_down=nan, t_comp=nan, t_up=nan,
                           total=nan, met_deadline=np.ones(4, bool), cut=np.zeros(4, bool),
                           loss_n=np.array([10., 10, 10, 10]), loss_sum=np.array([5., 5, 20, 20]),
                           loss_sq=nan, unique=np.zeros(4, np.int64), last_n=np.zeros(4), last_sq=nan, ema_sq=nan))
    s = TiflSelector(tiers=3, interval=2)
    rng = np.random.default_rng(0)
    s.select(tifl_context(1, range(1, 7), rng, history=h))
    assert s.P == pytest.approx([1 / 3] * 3)
    s.select(tifl_context(2, range(1, 7), rng, history=h))
    assert s.P == pytest.approx([1 / 6, 1 / 3, 1 / 2])     # tier 0 loss 0.5, tier 1 loss 2.0, tier 2 unknown


# ----------------------------------------------------------------------------- FedCS
F1 = {1: (1, 8, 3), 2: (1, 2, 4), 3: (2, 5, 2), 4: (1, 12, 2), 5: (4, 1, 1), 6: (1, 3, 6)}


def replay(S, dl, ud, ul) -> float:
    """An independent event simulation: the model reaches everyone by max t_DL, all train
    in parallel, uploads go one at a time in S's order, each when its client is done."""
    Td = max(dl[i] for i in S)
    free = Td
    for i in S:
        free = max(free, Td + ud[i]) + ul[i]
    return free


def test_F1_six_clients():
    dl, ud, ul = (np.array([F1[i][j] for i in range(1, 7)], float) for j in range(3))
    S = greedy(dl, ud, ul, 20.0)
    assert [i + 1 for i in S] == [5, 2, 3, 1, 4]
    assert replay(S, dl, ud, ul) == 18 < 20
    assert all(dl[i] + ud[i] + ul[i] <= 15 for i in range(6))     # a one-by-one rule would admit all six


def test_F2_knapsack_case():
    S = greedy(np.ones(4), np.zeros(4), np.array([5.0, 1, 3, 2]), 8.0)
    assert [i + 1 for i in S] == [2, 4, 3]
    assert replay(S, np.ones(4), np.zeros(4), np.array([5.0, 1, 3, 2])) == 7


def test_fedcs_strict_parallel_and_cap():
    dl, ud, ul = np.ones(3), np.zeros(3), np.array([1.0, 2, 3])
    assert greedy(dl, ud, ul, 4.0) == [0]                             # then 1 + (1 + 2) = 4 is not < 4
    assert greedy(dl, ud, ul, 4.0, strict=False) == [0, 1]            # 4 <= 4; then 1 + 6 > 4
    assert greedy(dl, ud, ul, 3.5, parallel=True) == [0, 1]           # parallel: 1 + max = 3 < 3.5; 4 is not
    assert greedy(dl, ud, ul, 100.0, cap=1) == [0]


def test_fedcs_selector_uses_observations_then_profile_and_needs_a_deadline():
    h = History()
    nan = np.full(1, np.nan)
    h.record(RoundOutcomes(round=1, ids=np.array([4]), status=np.zeros(1, np.int8), t_down=np.array([1.0]),
                           t_comp=np.array([1.0]), t_up=np.array([1.0]), total=np.array([3.0]), met_deadline=np.ones(1, bool),
                           cut=np.zeros(1, bool), loss_n=np.zeros(1), loss_sum=nan, loss_sq=nan,
                           unique=np.zeros(1, np.int64), last_n=np.zeros(1), last_sq=nan, ema_sq=nan))
    prof = {i: F1[i] for i in F1}
    ctx = SelectionContext(round=2, available=np.arange(1, 7), num_clients=7, rng=np.random.default_rng(0),
                           deadline=15.0, n_samples=np.full(7, 10), history=h,
                           profile_fn=lambda ids: Profile(np.zeros(len(ids)), *(np.array([prof[i][j] for i in ids], float)
                                                                               for j in range(3))))
    s = FedCSSelector(fraction_candidates=1.0)
    # client 4 observed at (1, 1, 1): now cheap, admitted (on its profile, 12 s of compute, it is not)
    dl, ud, ul = (np.array([F1[i][j] if i != 4 else 1.0 for i in range(1, 7)], float) for j in range(3))
    want = sorted(i + 1 for i in greedy(dl, ud, ul, 15.0))
    assert s.select(ctx) == want and 4 in want
    dl0, ud0, ul0 = (np.array([F1[i][j] for i in range(1, 7)], float) for j in range(3))
    assert 3 not in greedy(dl0, ud0, ul0, 15.0)
    no_deadline = SelectionContext(round=0, available=np.arange(1, 7), num_clients=7)
    assert s.check(no_deadline)[0][0] == "model"


# ----------------------------------------------------------------------------- power-of-choice
P1_SIZES = np.array([0, 100, 200, 300, 100, 200, 100])
P1_LOSS = np.array([0, 0.9, 0.4, 0.7, 1.5, 0.2, 1.1])


def poc_context(history=None, probe=None, avail=range(1, 7)):
    calls = []

    def probe_fn(ids, m):
        calls.append((ids.tolist(), m))
        return P1_LOSS[ids]
    ctx = SelectionContext(round=3, available=np.asarray(avail), num_clients=7, rng=np.random.default_rng(0), k=2,
                           n_samples=P1_SIZES, history=history or History(), probe_fn=probe or probe_fn)
    return ctx, calls


def test_P1_candidates_and_selection():
    s = PowerOfChoiceSelector(d=4)
    s.draws = Uniforms(values=[0.35, 0.05, 0.95, 0.5])
    ctx, calls = poc_context()
    got = s.select(ctx)
    assert calls == [([3, 1, 6, 4], None)]                 # A in draw order; client 2 never probed
    assert isinstance(got, Chosen) and got.ids == [4, 6] and got.weights == [0.5, 0.5]
    s = PowerOfChoiceSelector(d=4, variant="cpow_d", probe_batch=64, weights="samples")
    s.draws = Uniforms(values=[0.35, 0.05, 0.95, 0.5])
    ctx, calls = poc_context()
    assert s.select(ctx) == [4, 6] and calls == [([3, 1, 6, 4], 64)]


def test_P2_rpow_d_reads_last_training_losses():
    h = History()
    ids = np.array([1, 3, 4, 6])
    n = np.full(4, 10.0)
    nan = np.full(4, np.nan)
    h.record(RoundOutcomes(round=1, ids=ids, status=np.zeros(4, np.int8), t_down=nan, t_comp=nan, t_up=nan, total=nan,
                           met_deadline=np.ones(4, bool), cut=np.zeros(4, bool), loss_n=n,
                           loss_sum=n * np.array([0.9, 0.5, 1.2, 0.3]), loss_sq=nan, unique=np.zeros(4, np.int64),
                           last_n=np.zeros(4), last_sq=nan, ema_sq=nan))
    s = PowerOfChoiceSelector(d=4, variant="rpow_d")
    s.draws = Uniforms(values=[0.15, 0.05, 0.95, 0.55])
    ctx, calls = poc_context(history=h)
    assert s.select(ctx).ids == [2, 4] and calls == []      # 2 never selected: +inf, chosen first; no probe


def test_P3_edge_cases():
    # d = m: S = A, a weighted sample without replacement
    s = PowerOfChoiceSelector(d=2)
    s.draws = Uniforms(values=[0.35, 0.05])
    ctx, _ = poc_context()
    assert s.select(ctx).ids == [1, 3]
    # d = |available|: the m highest losses, whatever the draws
    s = PowerOfChoiceSelector(d=6)
    s.draws = Uniforms(np.random.default_rng(1))
    ctx, _ = poc_context()
    assert s.select(ctx).ids == [4, 6]


def test_rand_baseline_draws_with_replacement_and_weighs_by_multiplicity():
    s = PowerOfChoiceSelector(variant="rand")
    s.draws = Uniforms(values=[0.35, 0.40])               # both draws hit client 3
    ctx, calls = poc_context()
    got = s.select(ctx)
    assert got.ids == [3] and got.weights == [1.0] and calls == []
