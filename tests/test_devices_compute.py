"""Compute models: step clocks, the T-SFL interval fit with its float guard, redraw
policies, trace replay, FLOP profiles and energy of a hand-computed round."""
import math

import numpy as np
import pandas as pd
import pytest

from devices import clocks
from devices import compute as cm


# (delta, tau) of the grid where the float product tau * (delta / tau) exceeds delta
GUARD_SENSITIVE = [(0.3, 37), (0.7, 35), (3.3, 23), (3.3, 25), (3.3, 41), (3.3, 46), (3.3, 49),
                   (7, 25), (7, 41), (7, 43)]


def test_fit_float_guard_grid(monkeypatch):
    """T-SFL T11: c = delta/tau with d = u = 0 gives exactly tau iterations for every tau, delta."""
    grid = [(delta, tau) for delta in (1, 0.3, 0.7, 3.3, 7, 10) for tau in range(1, 50)]
    assert [(d, t) for d, t in grid if t * (d / t) > d] == GUARD_SENSITIVE
    for delta, tau in grid:
        assert cm.FixedClock(delta / tau).fit(delta) == tau, (delta, tau)
    # without the guard the clock loses one iteration exactly where time(tau) > delta in floats
    monkeypatch.setattr(clocks, "FIT_EPS", 0.0)
    unguarded = {(d, t): cm.FixedClock(d / t).fit(d) for d, t in grid}
    assert {k: v for k, v in unguarded.items() if v != k[1]} == {(d, t): t - 1 for d, t in GUARD_SENSITIVE}
    # and the guard is relative and tiny: a budget short by 1e-6 of time(tau) still fits tau - 1
    monkeypatch.undo()
    assert cm.FixedClock(0.3 / 37).fit(0.3 * (1 - 1e-6)) == 36 and cm.FixedClock(0.1).fit(1.0) == 10


def test_fit_with_transfer_budget():
    """T11: delta 10, d 0.5, u 1, c 2 -> tau 4; times [1.5, 2.5, 3, 4] -> 3."""
    assert cm.FixedClock(2.0).fit(10 - 0.5 - 1) == 4
    it = iter([1.5, 2.5, 3.0, 4.0])
    clock = cm.DrawClock(lambda n: [next(it) for _ in range(min(n, 4))] + [1e9] * max(0, n - 4))
    assert clock.fit(8.5) == 3 and clock.time(3) == 7.0


def test_iterations_model_case3_probabilities():
    """T-SFL T12: floor(N(2, 0.4)): P(1) = P(2) = 0.4938, P(0) = P(3) = 0.0062."""
    m = cm.IterationsCompute(mean=2.0, std=0.4)
    rng = np.random.default_rng(0)
    taus = np.array([m.iterations(0, r, rng) for r in range(100_000)])
    freq = np.bincount(taus, minlength=4)[:4] / len(taus)
    assert np.allclose(freq[[1, 2]], 0.4938, atol=0.007) and np.allclose(freq[[0, 3]], 0.0062, atol=0.002)
    assert m.clock(0, 5, rng).time(taus[5]) == pytest.approx(1.0) if taus[5] else True
    fixed = cm.IterationsCompute(fixed=4, period=2.0)
    assert fixed.clock(3, 1, rng).fit(2.0) == 4 and fixed.clock(3, 1, rng).time(1) == 0.5
    zero = cm.IterationsCompute(fixed=0)
    assert zero.clock(0, 1, rng).fit(1.0) == 0 and math.isinf(zero.clock(0, 1, rng).time(1))


def test_redraw_policies():
    rng = np.random.default_rng(0)
    per_client = cm.LognormalCompute(mean_step_time=1.0, sigma=0.5, redraw="client")
    a = per_client.duration(0, 1, 10, rng)
    assert per_client.duration(0, 2, 10, rng) == a and per_client.duration(1, 1, 10, rng) != a
    per_round = cm.LognormalCompute(mean_step_time=1.0, sigma=0.5, redraw="round")
    assert per_round.duration(0, 1, 10, rng) != per_round.duration(0, 2, 10, rng)
    # per step: the mean of many steps' sums approaches steps x mean
    per_step = cm.LognormalCompute(mean_step_time=0.2, sigma=0.5, redraw="step")
    d = np.array([per_step.duration(0, r, 50, rng) for r in range(2000)])
    assert abs(d.mean() - 10.0) < 4 * d.std() / math.sqrt(2000)
    n = cm.NormalCompute(mean_step_time=0.05, std=0.1, floor=0.01, redraw="step")
    assert min(n.draw(rng, 10_000)) >= 0.01


def test_trace_compute_integrates_through_changes(tmp_path):
    f = tmp_path / "speed.csv"
    f.write_text("client,start,step_time\nA,0,1.0\nA,10,0.5\nB,0,2\n")
    m = cm.TraceCompute(trace=cm.read_step_trace(f), members=[5, 6])
    c = m.clock(5, 1, None, now=8.0)
    # 2 steps at 1 s until t = 10, then 0.5 s each: 4 steps take 2 + 1 = 3 s
    assert c.time(4) == pytest.approx(3.0) and c.fit(3.0) == 4 and c.fit(2.9) == 3
    assert m.clock(6, 1, None, now=0).time(3) == 6.0


def test_flops_profiles():
    m = cm.FlopsCompute(gflops=cm.DEVICE_PROFILES["laptop_cpu"])
    w = cm.Work(flops_per_step=6 * 480_500 * 32, batch=32)
    assert m.duration(0, 1, 10, None, work=w) == pytest.approx(10 * 6 * 480_500 * 32 / 50e9)


def test_energy_of_a_hand_computed_round(run_in):
    """Client A (timing test): compute 0.4 s, comm 0.0524 s, round 1.1486 s.
    Energy = 3 W x 0.4 + 2 W x 0.0524 + 0.5 W x (1.1486 - 0.4524) = 1.6529 J."""
    from test_timing import two_clients
    sc = two_clients(rounds=2)
    for g in sc["clients"]["groups"]:
        g["energy"] = {"compute_watts": 3.0, "transmit_watts": 2.0, "idle_watts": 0.5}
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    a, b = c[c.client == 0], c[c.client == 1]
    assert np.allclose(a["energy_j"], 3 * 0.4 + 2 * 0.0524 + 0.5 * (1.1486 - 0.4524), atol=1e-12)
    assert np.allclose(b["energy_j"], 3 * 1.0 + 2 * 0.1486, atol=1e-12)
    assert res.summary["energy_j_total"] == pytest.approx(float(c["energy_j"].sum()))
    assert set(res.summary["energy_j_by_group"]) == {"A", "B"}
