"""Availability and selection models: frequencies within 4 standard errors over 10,000
rounds (fixed seeds), Markov statistics, every-client-once-per-epoch for cyclic patterns,
and continuous-time models answering "when next online"."""
import math

import numpy as np
import pytest

from devices import availability as av
from devices import selectors as sel
from devices.selectors import SelectionContext
from conftest import Rngs


def masks(model, n, rounds, labels=None):
    model.bind(np.arange(n), Rngs(), labels)
    ids = np.arange(n)
    return np.array([model.online_mask(ids, r, 0.0) for r in range(1, rounds + 1)])


def test_bernoulli_frequencies_within_4_se():
    p = [0.05, 0.2, 0.5, 0.9]
    m = masks(av.BernoulliAvailability(p=p), 4, 10_000)
    freq = m.mean(0)
    se = np.sqrt(np.array(p) * (1 - np.array(p)) / 10_000)
    assert np.all(np.abs(freq - p) < 4 * se)


def test_bernoulli_label_probabilities_fedawe():
    """FedSUM spec P2 (FedAWE): phi_c ~ U(0, 1) for c = 0..4, U(0, 0.5) for c = 5..9, one
    vector per run drawn from the group's round-0 stream; p_i = sum_c nu_ic phi_c with nu_i
    the client's empirical label distribution."""
    eye = np.eye(10, dtype=int)
    labels = np.vstack([
        10 * eye[0],                  # only class 0: p = phi_0
        3 * eye[7],                   # only class 7: p = phi_7 <= 0.5
        5 * eye[0] + 5 * eye[9],      # half 0, half 9: (phi_0 + phi_9) / 2
        np.full(10, 4),               # uniform mix: mean(phi)
        [1, 2, 3, 4, 0, 0, 6, 0, 3, 1],
    ])
    model = av.BernoulliAvailability(p="labels")
    model.bind(np.arange(5), Rngs(seed=5), labels)
    # the same draws, by hand, from the stream the model uses
    g = Rngs(seed=5).round(0)
    phi = np.concatenate([g.uniform(0, 1, 5), g.uniform(0, 0.5, 5)])
    assert np.all(phi[:5] <= 1) and np.all(phi[5:] <= 0.5)
    want = [phi[0], phi[7], (phi[0] + phi[9]) / 2, phi.mean(),
            sum(n * f for n, f in zip([1, 2, 3, 4, 0, 0, 6, 0, 3, 1], phi)) / 20]
    np.testing.assert_allclose(model.probs, want, rtol=0, atol=1e-12)
    assert len(set(np.round(model.probs[:5], 9))) == 5           # five different numbers
    # the probabilities are what the rounds use: the mask is random < p with the round's stream
    mask = model.online_mask(np.arange(5), 3, 0.0)
    assert np.array_equal(mask, Rngs(seed=5).round(3).random(5) < np.array(want))
    # over many seeds (one phi per run): E p = 0.375 for a uniform label mix, E phi_0 = 0.5,
    # E phi_7 = 0.25, and phi_7 ranges over (0, 0.5) only
    seeds = 2000
    p = np.empty((seeds, 3))
    for s in range(seeds):
        m = av.BernoulliAvailability(p="labels")
        m.bind(np.arange(3), Rngs(seed=s), labels[[3, 0, 1]])
        p[s] = m.probs
    sd_mix = math.sqrt((5 / 12 + 5 / 48) / 100)                 # sd of the mean of the ten phi
    assert abs(p[:, 0].mean() - 0.375) < 4 * sd_mix / math.sqrt(seeds)
    assert abs(p[:, 1].mean() - 0.5) < 4 * math.sqrt(1 / 12 / seeds)
    assert abs(p[:, 2].mean() - 0.25) < 4 * math.sqrt(1 / 48 / seeds)
    assert p[:, 2].max() <= 0.5 and p[:, 2].max() > 0.49 and p[:, 1].max() > 0.99


def test_sine_frequencies_follow_the_trajectory():
    model = av.SineAvailability(p=0.6, amplitude=0.3, period=20)
    m = masks(model, 50, 10_000)
    for phase_round in (1, 6, 11, 16):      # t = 0, 5, 10, 15: factors 0.7, 1.0, 0.7, 0.4
        rows = m[phase_round - 1::20]
        expect = model.prob(phase_round)[0]
        se = math.sqrt(expect * (1 - expect) / rows.size)
        assert abs(rows.mean() - expect) < 4 * se
    assert np.isclose(model.prob(6)[0], 0.6) and np.isclose(model.prob(16)[0], 0.6 * 0.4)


def test_markov_per_round_stationary_and_run_lengths():
    p_on_off, p_off_on = 0.1, 0.3
    m = masks(av.MarkovAvailability(p_on_off=p_on_off, p_off_on=p_off_on), 20, 10_000)
    pi = p_off_on / (p_on_off + p_off_on)          # 0.75
    # autocorrelated: the variance of the mean inflates by (1 + rho)/(1 - rho), rho = 1 - p_on_off - p_off_on
    rho = 1 - p_on_off - p_off_on
    se = math.sqrt(pi * (1 - pi) / m.size * (1 + rho) / (1 - rho))
    assert abs(m.mean() - pi) < 4 * se
    runs = []
    for col in m.T:
        d = np.diff(np.r_[0, col.astype(int), 0])
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        runs += list((ends - starts)[1:-1])       # drop runs cut by the window
    runs = np.array(runs)
    # on-runs are geometric with mean 1/p_on_off = 10 and sd sqrt(1-p)/p
    se = math.sqrt(1 - p_on_off) / p_on_off / math.sqrt(len(runs))
    assert abs(runs.mean() - 1 / p_on_off) < 4 * se
    # rounds asked out of order (the async protocol asks each client at its own job count)
    # give the same chain
    model = av.MarkovAvailability(p_on_off=p_on_off, p_off_on=p_off_on)
    ref = masks(av.MarkovAvailability(p_on_off=p_on_off, p_off_on=p_off_on), 20, 30)
    model.bind(np.arange(20), Rngs())
    order = [7, 3, 30, 1, 12, 12, 29]
    for r in order:
        assert np.array_equal(model.online_mask(np.arange(20), r, 0.0), ref[r - 1])


def test_markov_per_round_starts_stationary():
    """The chain starts in its stationary law: round 1 (and every round after it) has each of
    20,000 independent clients online with probability pi = p_off_on / (p_on_off + p_off_on),
    within 4 standard errors; a chain started elsewhere (all online, or 1 - pi) is off by
    more than 40 standard errors in round 1."""
    for p_on_off, p_off_on in ((0.1, 0.3), (0.4, 0.1)):
        pi = p_off_on / (p_on_off + p_off_on)                # 0.75, 0.2
        m = masks(av.MarkovAvailability(p_on_off=p_on_off, p_off_on=p_off_on), 20_000, 3)
        se = math.sqrt(pi * (1 - pi) / 20_000)
        assert np.all(np.abs(m.mean(1) - pi) < 4 * se), (m.mean(1), pi)


def test_uniform_selects_exactly_k():
    s = sel.UniformSelection(k=7)
    rng = np.random.default_rng(0)
    for r in range(1, 200):
        chosen = s.select(SelectionContext(r, list(range(50)), 50, rng))
        assert len(chosen) == 7 and len(set(chosen)) == 7
    assert s.select(SelectionContext(1, [3, 4], 50, rng)) == [3, 4]          # fewer available than k: all of them
    assert len(sel.UniformSelection(fraction=0.1).select(SelectionContext(1, list(range(50)), 50, rng))) == 5
    # a fraction of a small fleet selects at least one client: ceil(0.1 x 5) = 1, not 0
    assert sel.UniformSelection(fraction=0.1).count(5) == 1 and sel.UniformSelection(fraction=0.01).count(5) == 1
    assert sel.UniformSelection(fraction=0.07).count(100) == 7         # 0.07 x 100 = 7.000000000000001
    assert len(sel.UniformSelection(fraction=0.1).select(SelectionContext(1, list(range(5)), 5, rng))) == 1
    # exactly k available: all of them, and nothing is drawn (the stream stays where it was)
    state = rng.bit_generator.state
    assert sel.UniformSelection(k=3).select(SelectionContext(1, [9, 2, 5], 50, rng)) == [2, 5, 9]
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("cls", [sel.CyclicSelection, sel.ReshuffledCyclicSelection])
def test_cyclic_every_client_once_per_epoch(cls):
    s = cls(k=4)
    rng = np.random.default_rng(1)
    N, M = 20, 5
    for epoch in range(6):
        seen = []
        for b in range(M):
            seen += s.select(SelectionContext(epoch * M + b + 1, list(range(N)), N, rng))
        assert sorted(seen) == list(range(N))


def test_reshuffled_cyclic_takes_one_permutation_per_epoch_in_order():
    """Epoch e uses the e-th permutation drawn from the stream, cut into blocks of S = 2
    (N = 6, M = 3; the rounds of an epoch draw nothing more)."""
    s = sel.ReshuffledCyclicSelection(k=2)
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    for epoch in range(3):
        perm = ref.permutation(6)
        for b in range(3):
            assert s.select(SelectionContext(3 * epoch + b + 1, list(range(6)), 6, rng)) == sorted(perm[2 * b:2 * b + 2].tolist())
    assert rng.bit_generator.state == ref.bit_generator.state


def test_cyclic_wraps_and_skips_unavailable():
    s = sel.CyclicSelection(k=3)
    rng = np.random.default_rng(0)
    assert s.select(SelectionContext(4, list(range(10)), 10, rng)) == [0, 1, 9]        # block {9, 0, 1}
    assert s.select(SelectionContext(1, [0, 2], 10, rng)) == [0, 2]


def test_biased_staircase_frequencies():
    s = sel.BiasedSelection(start=0.5, step=0.05, every=11, floor=0.05)
    p = s.probs(100)
    assert p[0] == 0.5 and p[10] == 0.5 and np.isclose(p[11], 0.45) and np.isclose(p[99], 0.05)
    rng = np.random.default_rng(0)
    counts = np.zeros(100)
    for r in range(1, 10_001):
        counts[s.select(SelectionContext(r, range(100), 100, rng))] += 1
    se = np.sqrt(p * (1 - p) / 10_000)
    assert np.all(np.abs(counts / 10_000 - p) < 4.5 * se)


# ---------------------------------------------------------------------------- continuous time
def test_markov_time_next_online_is_the_switch_time():
    m = av.MarkovTimeAvailability(mean_on=100.0, mean_off=400.0)
    m.bind(np.arange(5), Rngs(3))
    for c in range(5):
        t = 0.0
        for _ in range(20):
            if m.online(c, 0, t):
                end = m.online_until(c, t)
                assert end > t and m.online(c, 0, end - 1e-6) and not m.online(c, 0, end)
                t = end
            else:
                nxt = m.next_online(c, t)
                assert nxt > t and not m.online(c, 0, nxt - 1e-6) and m.online(c, 0, nxt)
                assert m.online_until(c, t) == t
                t = nxt


def test_markov_time_on_fraction():
    m = av.MarkovTimeAvailability(mean_on=100.0, mean_off=300.0)
    m.bind(np.arange(400), Rngs(4))
    ids = np.arange(400)
    frac = np.mean([m.online_mask(ids, 0, t).mean() for t in np.linspace(0, 20_000, 41)])
    assert abs(frac - 0.25) < 0.03


def test_interval_trace_with_period(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("client,start,end,period\n7,10,20,100\n7,50,100,100\n9,0,5,\n8,0,10,100\n8,80,100,100\n")
    m = av.TraceAvailability(trace=av.read_interval_trace(f))
    m.bind([0, 1, 2], Rngs())
    # client k <- the k-th trace client in sorted order: 7, 8, 9
    assert not m.online(0, 0, 5) and m.next_online(0, 5) == 10
    assert m.online(0, 0, 15) and m.online_until(0, 15) == 20
    assert m.next_online(0, 20) == 50
    assert m.online_until(0, 60) == 100          # the next period starts offline (first interval at 110)
    assert m.next_online(0, 130) == 150
    # trace 8: [80, 100) joins the next period's [0, 10): online from 80 until 110
    assert m.online_until(1, 85) == 110 and m.next_online(1, 50) == 80
    assert m.online(2, 0, 1) and m.online_until(2, 1) == 5 and m.next_online(2, 6) == math.inf


def test_diurnal_follows_the_day():
    m = av.DiurnalAvailability(mean=0.5, amplitude=0.45, period=86400, slot=900)
    m.bind(np.arange(300), Rngs(5))
    ids = np.arange(300)
    day = m.online_mask(ids, 0, 86400 * 0.25 + 1).mean()     # sin peak: p = 0.95
    night = m.online_mask(ids, 0, 86400 * 0.75 + 1).mean()   # sin trough: p = 0.05
    assert day > 0.85 and night < 0.15
    for c in range(20):
        t = m.next_online(c, 86400 * 0.75)
        assert m.online(c, 0, t) and (t == 86400 * 0.75 or not m.online(c, 0, t - 1))


def test_online_mask_finds_each_member_in_any_order():
    """online_mask(ids) reads each id's own entry of the group's mask (NumPy positions, any
    order of members and of ids); an id outside the group is an error, not another's entry."""
    members = np.array([17, 3, 42, 8, 25])
    m = av.BernoulliAvailability(p=0.5)
    m.bind(members, Rngs(seed=11))
    full = m.online_mask(members, 4, 0.0)
    assert 0 < full.sum() < len(members)
    ask = np.array([42, 17, 8, 42, 25, 3])
    want = [full[list(members).index(c)] for c in ask]
    assert m.online_mask(ask, 4, 0.0).tolist() == want
    for bad in ([4], [43], [3, 99]):
        with pytest.raises(KeyError):
            m.online_mask(np.array(bad), 4, 0.0)
