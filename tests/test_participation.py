"""FedSUM delay metrics (docs/algorithms/fedsum.md 2.1, tests T1-T4) and their values in run outputs;
interruption of a client that goes offline mid-round; an offline-heavy fleet does not
spin the clock."""

import numpy as np
import pandas as pd
import pytest

from devices import selectors as sel
from devices.selectors import SelectionContext
from emulator.measures.participation import delay_metrics


def test_t1_hand_sequence():
    SEQ = [{0}, {1}, set(), {0, 2}, {1}, {0, 1, 2}]
    d = delay_metrics([list(s) for s in SEQ], 3)
    assert list(d["tau"]) == [1, 2, 3, 2, 1, 0] and d["tau_max"] == 3 and d["tau_avg"] == 1.5


def _cyclic(N, S, T):
    s = sel.CyclicSelection(k=S)
    return [s.select(SelectionContext(t, range(N), N, None)) for t in range(1, T + 1)]


def test_t2_cyclic_closed_forms():
    d = delay_metrics(_cyclic(6, 2, 10), 6)
    assert list(d["tau"]) == [1] + [2] * 9 and d["tau_avg"] == pytest.approx(1.9)
    d = delay_metrics(_cyclic(100, 10, 2000), 100)
    assert d["tau_max"] == 9 and d["tau_avg"] == pytest.approx(8.982)
    d = delay_metrics(_cyclic(100, 1, 2000), 100)
    assert d["tau_max"] == 99 and d["tau_avg"] == pytest.approx(96.5745)
    assert delay_metrics(_cyclic(10, 3, 200), 10)["tau_max"] == 3
    assert delay_metrics(_cyclic(100, 7, 200), 100)["tau_max"] == 14


def test_t3_full_participation():
    assert delay_metrics([list(range(5))] * 8, 5)["tau_max"] == 0


@pytest.mark.slow
def test_t4_reshuffled_cyclic_bound_reached():
    rng = np.random.default_rng(0)
    worst = 0
    for _ in range(300):
        s = sel.ReshuffledCyclicSelection(k=2)
        d = delay_metrics([s.select(SelectionContext(t, range(6), 6, rng)) for t in range(1, 201)], 6)
        assert d["tau_max"] <= 4
        worst = max(worst, d["tau_max"])
    assert worst == 4


def test_t5_bernoulli_expected_average_delay():
    """N = 5, p = 0.3, T = 50: E[tau_avg] = 5.496567 (exact formula); 4,000 sequences."""
    rng = np.random.default_rng(1)
    vals = [delay_metrics(rng.random((50, 5)) < 0.3, 5)["tau_avg"] for _ in range(4000)]
    assert abs(np.mean(vals) - 5.496567) < 0.08


def test_delay_metrics_in_run_outputs(run_in):
    from conftest import tiny
    sc = tiny(**{"run.rounds": 9, "protocol.select": {"model": "cyclic", "k": 2}})
    res = run_in(sc)
    m = res.metrics[res.metrics["round"] >= 1]
    assert list(m["tau"]) == [1, 2] + [2] * 7          # N = 6, S = 2: M - 1 = 2 after warm-up
    assert res.summary["delay"]["0"] == {"tau_max": 2, "tau_avg": pytest.approx(17 / 9), "never_aggregated": 0}
    # cyclic blocks of 2 over 6 clients, 9 rounds: {0,1} {2,3} {4,5} {0,1} ... round 9 = {4,5}
    part = pd.read_csv(res.run_dir / "partition.csv")
    assert list(part["last_aggregated_round"]) == [7, 7, 8, 8, 9, 9]


def test_offline_mid_round_is_dropped(run_in, tmp_path):
    """Client A (timing test) goes offline at 0.3 s, during its computation (0.0208..0.4208):
    dropped 'offline' with 0.2792 s of compute and floor(4 x 0.2792 / 0.4) = 2 steps done;
    only B's update is aggregated; the round lasts as long as B. A is back at 0.5 and
    completes round 2."""
    from test_timing import two_clients
    trace = tmp_path / "avail.csv"
    trace.write_text("client,start,end\nA,0,0.3\nA,0.5,1000\n")
    sc = two_clients(rounds=2)
    sc["clients"]["groups"][0]["availability"] = {"model": "trace", "path": str(trace)}
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv", keep_default_na=False)
    a1 = c[(c.client == 0) & (c["round"] == 1)].iloc[0]
    assert a1["dropped"] and a1["drop_reason"] == "offline" and a1["weight"] == 0
    assert a1["compute_time"] == pytest.approx(0.3 - 0.0208, abs=1e-12) and a1["steps"] == 2
    assert a1["bytes_up"] == 0
    b1 = c[(c.client == 1) & (c["round"] == 1)].iloc[0]
    assert b1["weight"] == 1.0
    m = res.metrics
    assert m.loc[m["round"] == 1, "round_time"].item() == pytest.approx(1.1486, abs=1e-12)
    a2 = c[(c.client == 0) & (c["round"] == 2)].iloc[0]
    assert not a2["dropped"] and a2["weight"] > 0
    assert res.summary["grad_steps_computed"] == 4 + 8 and res.summary["grad_steps_skipped"] == 2


@pytest.mark.slow
def test_mostly_offline_fleet_does_not_spin(run_in):
    """10,000 clients online ~1 % of the time (exponential on 50 s / off 4,950 s); 5 per round,
    1 s of compute each. Events are bounded by what the participants do, whatever the fleet's
    size: at most 12 SimPy events per participant per round plus 4 per round plus one wait per
    round (the waits are single timeouts, not a polling loop)."""
    import simpy

    from conftest import tiny
    sc = tiny(**{"run.rounds": 10, "clients.count": 10_000, "output.clients_csv": "participants",
                 "protocol.select": {"model": "uniform", "k": 5}, "workload.partition": {"name": "iid"}})
    sc["clients"]["groups"][0].update(availability={"model": "markov_time", "mean_on": 50.0, "mean_off": 4950.0},
                                      compute={"model": "constant", "step_time": 0.2}, network="instant")
    sc["workload"]["dataset"] = {"name": "synthetic", "alpha": 0, "beta": 0, "max_samples_per_client": 60}
    counter = {"n": 0}
    orig = simpy.Environment.schedule

    def counting(self, event, priority=1, delay=0):
        counter["n"] += 1
        return orig(self, event, priority, delay)

    simpy.Environment.schedule = counting
    try:
        res = run_in(sc)
    finally:
        simpy.Environment.schedule = orig
    R, k = 10, 5
    assert res.summary["rounds"] == R
    assert counter["n"] <= R * (12 * k + 4) + R
