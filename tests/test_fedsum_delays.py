"""FedSUM delay metrics against the spec's closed forms (docs/algorithms/fedsum.md 2.3, T2, T5, T6) for the
participation models the comparison uses (test_participation.py has T1-T5 on sequences):
the exact expectations of Appendix A for uniform sampling (P1, Case 1) and for independent
participation with time-varying p_i^t (P3's sine), checked against the device models, and
deterministic cyclic's closed form for every S | N."""
import numpy as np
import pytest

from devices import availability as av
from devices import selectors as sel
from devices.selectors import SelectionContext
from emulator.measures.participation import delay_metrics
from emulator.rng import Streams
from emulator.sim.world import _GroupRngs
from reference.fedsum_reference import expected_tau_bernoulli, expected_tau_uniform


def test_exact_expectations_of_the_spec():
    assert expected_tau_bernoulli(np.full(5, 0.3), 50).mean() == pytest.approx(5.496567, abs=5e-7)
    assert expected_tau_uniform(4, 2, 30).mean() == pytest.approx(2.674667, abs=5e-7)


@pytest.mark.slow
def test_t6_uniform_sampling_mean_average_delay():
    """N = 4, S = 2, T = 30: E[tau_avg] = 2.674667; 4000 sequences of UniformSelection (P1)."""
    rng = np.random.default_rng(2)
    s = sel.UniformSelection(k=2)
    vals = [delay_metrics([s.select(SelectionContext(t, range(4), 4, rng)) for t in range(1, 31)], 4)["tau_avg"]
            for _ in range(4000)]
    assert abs(np.mean(vals) - 2.674667) < 0.035


@pytest.mark.slow
def test_p3_sine_availability_matches_the_time_varying_formula():
    """P3: p_i^t = clip(p_i (0.3 sin(2 pi t / P) + 0.7)), independently; the mean tau^t over 1000
    seeded sequences matches E[tau^t] of the exact formula with p_i^t round by round (4.5 s.e.);
    the formula with each client's time-averaged p_i does not."""
    N, T, P = 4, 30, 10
    p = np.array([0.2, 0.35, 0.5, 0.8])
    taus = []
    for seed in range(1000):
        m = av.SineAvailability(p=p.tolist(), amplitude=0.3, period=P)
        m.bind(np.arange(N), _GroupRngs(Streams(seed), 0))
        taus.append(delay_metrics([m.group_mask(r) for r in range(1, T + 1)], N)["tau"])
    taus = np.array(taus, dtype=float)
    pt = np.array([np.clip(p * (0.3 * np.sin(2 * np.pi * t / P) + 0.7), 0, 1) for t in range(T)])
    exact = expected_tau_bernoulli(pt, T)
    se = taus.std(0) / np.sqrt(len(taus)) + 1e-12
    assert (np.abs(taus.mean(0) - exact) < 4.5 * se).all()
    flat = expected_tau_bernoulli(np.tile(pt.mean(0), (T, 1)), T)
    assert (np.abs(taus.mean(0) - flat) > 4.5 * se).any()


@pytest.mark.parametrize("N,S,T", [(6, 2, 10), (12, 3, 40), (20, 5, 7), (100, 10, 50)])
def test_cyclic_closed_form(N, S, T):
    """Case 3, S | N, M = N/S: tau^t = min(t + 1, M - 1), tau_avg = (M-1)(T - M/2 + 1)/T (T >= M - 1)."""
    s = sel.CyclicSelection(k=S)
    d = delay_metrics([s.select(SelectionContext(t, range(N), N, None)) for t in range(1, T + 1)], N)
    M = N // S
    assert d["tau"].tolist() == [min(t + 1, M - 1) for t in range(T)]
    assert d["tau_avg"] == pytest.approx((M - 1) * (T - M / 2 + 1) / T, rel=1e-12)
