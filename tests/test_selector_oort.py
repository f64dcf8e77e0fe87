"""Oort's rules on hand-computed cases (docs/algorithms/selection.md section 1): the utility
(Eq. 1.1), a full selection with injected uniforms with and without the speed penalty, the
pool's cut-off under FedScale's and the Oort artifact's rules, the pacer, the blacklist, the
exploration schedule, and invariants over random states."""
from __future__ import annotations

import math

import numpy as np
import pytest

from devices.selectors import Profile, SelectionContext, Uniforms, wswor
from devices.selectors import oort_rules as rules
from devices.selectors.oort import OortSelector

# O-2's six clients (ids 1..6; id 0 has no data, so it never registers)
R = {1: 14, 2: 8, 3: 6, 4: 2}
T_OBS = {1: 10, 2: 40, 3: 20, 4: 30}
L = {1: 4, 2: 2, 3: 4, 4: 1}
C = {1: 2, 2: 1, 3: 3, 4: 1}
N_SAMPLES = np.array([0, 100, 100, 100, 100, 12, 4])      # unexplored 5, 6: capped sizes 12 and 4
PRIOR = np.array([0, 0, 0, 0, 0, 50, 15], dtype=float)    # unexplored 5, 6: a-priori durations


def profile(ids):
    ids = np.asarray(ids)
    z = np.zeros(len(ids))
    return Profile(z, z, PRIOR[ids], z)


def o2_selector(**kw) -> OortSelector:
    p = dict(exploration_decay=0.9, exploration_min=0.2, round_threshold=50, alpha=2, clip_bound=0.7,
             cut_off=0.05, sample_window=5, filter_less=1)
    p.update(kw)
    s = OortSelector(**p)
    ids = np.array([1, 2, 3, 4])
    s.state.put("reward", ids, [R[i] for i in ids])
    s.state.put("duration", ids, [T_OBS[i] for i in ids])
    s.state.put("stamp", ids, [L[i] for i in ids])
    s.state.put("count", ids, [C[i] for i in ids])
    s.eps = 0.3                      # the previous exploration share
    s.calls = 1                      # not the first (random) call
    return s


def o2_context(k=4) -> SelectionContext:
    return SelectionContext(round=5, available=np.arange(1, 7), num_clients=7, rng=np.random.default_rng(0),
                            k=k, n_samples=N_SAMPLES, profile_fn=profile)


def test_O1_utility_of_the_last_participation():
    """Losses [1, 2, 2]: n = 3, s2 = 9, 3 unique samples: U = 3 sqrt(9 / 3) = sqrt(27)."""
    U = rules.utility("full", 600, np.array([50]), np.array([3.0]), np.array([9.0]), np.array([3]),
                      np.array([0.0]), np.array([np.nan]), np.array([np.nan]))
    assert U[0] == pytest.approx(5.196152, abs=1e-6)
    # FedScale's client: the last batch, capped by |D_i| (50 here)
    U = rules.utility("last_batch", 600, np.array([50]), np.array([3.0]), np.array([9.0]), np.array([3]),
                      np.array([2.0]), np.array([8.0]), np.array([np.nan]))
    assert U[0] == pytest.approx(50 * 2.0)


def test_O2_full_selection_with_injected_draws(monkeypatch):
    import devices.selectors.oort as oort_module
    tables = []

    def spy(weights, m, draw):
        tables.append(np.asarray(weights).tolist())
        return wswor(weights, m, draw)
    monkeypatch.setattr(oort_module, "wswor", spy)
    s = o2_selector()
    s.draws = Uniforms(values=[0.50, 0.10, 0.60, 0.55])
    ctx = o2_context()
    # the intermediate values of the hand computation
    reg = np.arange(1, 7)
    T = rules.preferred_duration(s.durations(ctx, reg), 50)
    assert T == 30
    clip, minR, rangeR = rules.reward_scale(s.rewards(reg, N_SAMPLES), 0.7)
    assert (clip, minR, rangeR) == pytest.approx((12, 1.998, 12.002))
    sc = rules.scores(np.array([14, 8, 6, 2.]), np.array([10, 40, 20, 30.]), np.array([4, 2, 4, 1]), 5, clip, minR,
                      rangeR, T, 2)
    assert sc == pytest.approx([1.033950, 0.440864, 0.534033, 0.401345], abs=1e-6)
    assert s.select(ctx) == [1, 3, 4, 6]
    # the draws' tables: the exploitation pool's scores in order [1, 3, 2, 4], then the explore priors
    assert tables[0] == pytest.approx([1.033950, 0.534033, 0.440864, 0.401345], abs=1e-6)
    assert tables[1] == pytest.approx([12 * (30 / 50) ** 2, 4])
    assert s.eps == pytest.approx(0.27)
    assert sorted(s.exploit_prev.tolist()) == [1, 3, 4] and s.explore_prev.tolist() == [6]


def test_O3_without_the_speed_penalty():
    s = o2_selector(round_threshold=100)
    s.draws = Uniforms(values=[0.50, 0.10, 0.60, 0.55])
    assert s.select(o2_context()) == [1, 2, 4, 5]


def test_O4_cut_off_rules():
    """CUTOFF 1.05: the artifact stops at the first score below 0.421412 (pool [1, 3, 2]);
    FedScale keeps at least 10 n_exploit + 1 candidates (client 4 stays). In the artifact's
    full mode the result needs no draw: {1, 3, 5, 6}."""
    ordered = np.array([1.033950, 0.534033, 0.440864, 0.401345])
    assert rules.pool_size(ordered, 3, 1.05, "oort_repo") == 3
    assert rules.pool_size(ordered, 3, 1.05, "fedscale") == 4
    s = o2_selector(cut_off=1.05, rule="oort_repo")
    s.draws = Uniforms(values=[])          # any draw would fail
    assert s.select(o2_context()) == [1, 3, 5, 6]


@pytest.mark.parametrize("hist, r, want", [
    ([1.0, 1.0, 1.05, 0.98], 4, 35), ([1, 1, 6, 6], 4, 25), ([1, 1, 1.5, 1.5], 4, 30),
    ([1.0, 1.0, 1.05, 0.98, 1.0], 5, 30), ([1.0, 1.0], 2, 30)])
def test_O5_pacer(hist, r, want):
    assert rules.pacer(hist, r, 2, 5, 30, True) == want


def test_O5_pacer_without_tightening_only_relaxes():
    assert rules.pacer([1, 1, 6, 6], 4, 2, 5, 30, False) == 30


def test_O5_pacer_inside_the_selector_moves_T():
    """Two windows of equal exploitation reward: at r = 2W the percentile relaxes by delta."""
    s = o2_selector(pacer_step=2, pacer_delta=5, round_threshold=30)
    s.exploit_prev = np.array([1, 3])
    for r in (1, 2, 3, 4):
        s.fed_back = {1, 3}
        s.pace(r)
    assert s.hist_exploit == pytest.approx([(14 + 6) / 2.0001] * 4)        # R_1 + R_3 over 2 + 1e-4
    assert s.pct == 35


def test_O6_blacklist():
    ids = np.arange(1, 11)
    assert rules.blacklist(ids, np.array([5, 4, 4, 3, 3, 2, 1, 0, 0, 0]), 3, 0.3, 10).tolist() == [1, 2, 3]
    assert rules.blacklist(ids, np.array([5, 5, 4, 4, 0, 0, 0, 0, 0, 0]), 3, 0.3, 10).tolist() == [1, 2, 3]
    assert rules.blacklist(ids, np.array([5, 5, 4, 4, 0, 0, 0, 0, 0, 0]), -1, 0.3, 10).tolist() == []


def test_O6_blacklisted_clients_are_never_selected():
    for seed in range(20):                                   # counts 2, 1, 3, 1: clients 3 and 1 retire
        s2 = o2_selector(blacklist_rounds=1, blacklist_max_len=0.5)
        got = s2.select(SelectionContext(round=5, available=np.arange(1, 7), num_clients=7,
                                         rng=np.random.default_rng(seed), k=3, n_samples=N_SAMPLES, profile_fn=profile))
        assert not {1, 3} & set(got)


@pytest.mark.parametrize("decay, floor, first", [(0.98, 0.3, 55), (0.95, 0.2, 30)])
def test_O7_exploration_schedule(decay, floor, first):
    """eps after Oort call j is max(0.9 decay^j, floor): the floor is first reached at call 55
    (FedScale) or 30 (the artifact's values)."""
    s = OortSelector(exploration_decay=decay, exploration_min=floor, filter_less=1)
    ctx = SelectionContext(round=2, available=np.arange(1, 7), num_clients=7, rng=np.random.default_rng(1), k=2,
                           n_samples=N_SAMPLES, profile_fn=profile)
    s.select(ctx)                                    # the first call: random, no decay
    seen = []
    for j in range(1, 70):
        s.select(ctx)
        seen.append(s.eps)
        assert s.eps == pytest.approx(max(0.9 * decay ** j, floor))
    assert next(j for j, e in enumerate(seen, 1) if e == floor) == first


def test_first_call_is_uniform_and_a_small_feasible_set_is_taken_whole():
    s = OortSelector(filter_less=1)
    ctx = SelectionContext(round=1, available=np.arange(0, 7), num_clients=7, rng=np.random.default_rng(3), k=2,
                           n_samples=N_SAMPLES, profile_fn=profile)
    ref = np.random.default_rng(3)
    feasible = np.arange(1, 7)                       # client 0 has no samples: never registered
    assert s.select(ctx) == sorted(feasible[ref.choice(6, 2, replace=False)].tolist())
    few = SelectionContext(round=2, available=np.array([0, 5]), num_clients=7, rng=np.random.default_rng(3), k=2,
                           n_samples=N_SAMPLES, profile_fn=profile)
    assert s.select(few) == [5]


def test_registration_filter_auto_and_explicit():
    """auto: FedScale's 32 lowered to the k-th largest client; an explicit filter leaving fewer
    than k clients registered is a problem of the selection block."""
    n = np.array([10, 20, 40, 5])
    assert OortSelector().threshold(n, 2) == 20
    assert OortSelector().threshold(np.array([100, 50, 40]), 2) == 32
    ctx = SelectionContext(round=0, available=np.arange(4), num_clients=4, k=2, n_samples=n)
    assert OortSelector().check(ctx) == []
    (field, msg), = OortSelector(filter_less=32).check(ctx)
    assert field == "filter_less" and "only 1 of 4 clients" in msg


def test_feedback_utility_stragglers_and_stamps():
    """Aggregated clients get their utility; a straggler the mean utility of the round's
    aggregated clients and its full duration; an offline client nothing."""
    from devices.selectors import RoundOutcomes, Status
    s = OortSelector(filter_less=1)
    s.sizes = np.full(10, 100)
    nan = np.nan
    o = RoundOutcomes(round=3, ids=np.array([1, 2, 3, 4]),
                      status=np.array([Status.AGGREGATED, Status.AGGREGATED, Status.STRAGGLER, Status.DROPPED]),
                      t_down=np.array([1., 1, 1, nan]), t_comp=np.array([2., 2, 9, nan]), t_up=np.array([1., 1, nan, nan]),
                      total=np.array([4., 4, 11, 7]), met_deadline=np.array([1, 1, 0, 0], bool),
                      cut=np.array([0, 0, 1, 0], bool), loss_n=np.array([3., 4, 0, 0]), loss_sum=np.array([5., 4, nan, nan]),
                      loss_sq=np.array([9., 16, nan, nan]), unique=np.array([3, 4, 0, 0]), last_n=np.zeros(4),
                      last_sq=np.full(4, nan), ema_sq=np.full(4, nan))
    s.observe(o)
    u1, u2 = math.sqrt(27), 4 * 2.0
    assert s.state.get("reward", [1, 2, 3, 4]) == pytest.approx([u1, u2, (u1 + u2) / 2, nan], nan_ok=True)
    assert s.state.get("duration", [1, 2, 3, 4]) == pytest.approx([4, 4, 11, nan], nan_ok=True)
    assert s.state.get("stamp", [1, 2, 3, 4]).tolist() == [3, 3, 3, 0]
    assert s.state.get("count", [1, 2, 3, 4]).tolist() == [1, 1, 1, 0]


def inclusion(w, m):
    """Exact inclusion probabilities of successive sampling (enumerating the draw orders)."""
    from itertools import permutations
    w = np.asarray(w, float)
    p = np.zeros(len(w))
    for seq in permutations(range(len(w)), m):
        pr, left = 1.0, w.sum()
        for i in seq:
            pr *= w[i] / left
            left -= w[i]
        p[list(seq)] += pr
    return p


def test_successive_sampling_matches_its_inclusion_probabilities():
    """20,000 draws of 2 of 5: each item's inclusion frequency within 3 sigma of the exact one."""
    w = [5.0, 1.0, 3.0, 0.5, 2.0]
    p = inclusion(w, 2)
    draw = Uniforms(np.random.default_rng(11))
    n = 20_000
    counts = np.zeros(5)
    for _ in range(n):
        counts[wswor(w, 2, draw)] += 1
    assert np.all(np.abs(counts / n - p) <= 3 * np.sqrt(p * (1 - p) / n))


def test_successive_sampling_by_hand():
    """The cumulative table rule: O-2's first table (1: .4290, 3: .6506, 2: .8335, 4: 1)."""
    w = [1.033950, 0.534033, 0.440864, 0.401345]
    assert wswor(w, 3, Uniforms(values=[0.50, 0.10, 0.60])).tolist() == [1, 0, 3]
    assert wswor([0, 2, 0, 1], 3, Uniforms(values=[])).tolist() == [1, 3]     # only 2 have weight: no draw
    # the second draw renormalises over what is left: u = 0.5 of 3 is the third item, not the fourth
    assert wswor([1, 1, 1, 1], 2, Uniforms(values=[0.0, 0.5])).tolist() == [0, 2]


def test_invariants_over_random_states():
    """Output within the feasible clients, distinct, never blacklisted, at most k; a client no
    slower than T is never penalised; a higher reward never lowers a score."""
    rng = np.random.default_rng(5)
    for trial in range(40):
        N = int(rng.integers(8, 40))
        n = rng.integers(0, 200, N)
        s = OortSelector(filter_less=10, blacklist_rounds=int(rng.integers(-1, 3)), round_threshold=float(rng.integers(10, 100)))
        seen = rng.choice(N, int(rng.integers(1, N)), replace=False)
        s.state.put("reward", seen, rng.uniform(0, 50, len(seen)))
        s.state.put("duration", seen, rng.uniform(1, 100, len(seen)))
        s.state.put("stamp", seen, rng.integers(1, 5, len(seen)))
        s.state.put("count", seen, rng.integers(1, 5, len(seen)))
        s.calls = 1
        avail = np.sort(rng.choice(N, int(rng.integers(1, N + 1)), replace=False))
        prior = rng.uniform(1, 100, N)
        k = int(rng.integers(1, 6))
        ctx = SelectionContext(round=int(rng.integers(2, 30)), available=avail, num_clients=N, rng=rng, k=k,
                               n_samples=n, profile_fn=lambda ids: Profile(*([np.zeros(len(ids))] * 2),
                                                                               prior[np.asarray(ids)], np.zeros(len(ids))))
        s._register(ctx)
        BL = set(rules.blacklist(s.state.ids, s.state.column("count").copy(), s.blacklist_rounds,
                                 s.blacklist_max_len, int(s.registered.sum())).tolist())
        got = s.select(ctx)
        assert len(got) == len(set(got)) <= k
        assert set(got) <= set(avail[n[avail] >= 10].tolist())
        if len(avail[n[avail] >= 10]) > k:
            assert not set(got) & BL
    t = np.array([5.0, 30.0, 31.0])
    assert rules.penalty(t, 30.0, 2).tolist() == [1.0, 1.0, pytest.approx((30 / 31) ** 2)]
    lo = rules.scores(np.array([3.0]), np.array([50.0]), np.array([2]), 5, 10, 1, 9, 30, 2)
    hi = rules.scores(np.array([4.0]), np.array([50.0]), np.array([2]), 5, 10, 1, 9, 30, 2)
    slower = rules.scores(np.array([4.0]), np.array([60.0]), np.array([2]), 5, 10, 1, 9, 30, 2)
    assert hi > lo and slower < hi


def test_descending_order_is_the_stable_one():
    rng = np.random.default_rng(2)
    for _ in range(20):
        v = np.round(rng.random(500), int(rng.integers(1, 4)))       # many ties
        assert rules.descending(v).tolist() == np.argsort(-v, kind="stable").tolist()
