"""FedUMF's bookkeeping on exact values (docs/algorithms/fedumf.md; docs/mutation.md, fedumf):
a selected client whose trained model missed the deadline keeps it as g and fuses it when next
selected (fusion_gate `aggregated`), or does not (`selected`); the reasons `no_update` (never
kept, or kept too long ago); alpha = 0 computes no background job; the defaults a scenario
records; the alpha warning; the declared name and per-client state."""
import warnings

import numpy as np
import pytest

from emulator.algorithms.fedumf import FedUMF
from emulator.listing import algorithm_lines
from emulator.scenario import schema as scenario
from emulator.sim.world import World

from conftest import quadratic_scenario

A = [[1.0, 2.0], [2.0, 1.0], [0.5, 3.0]]
C = [[1.0, 0.0], [-1.0, 2.0], [3.0, -1.0]]
X1 = np.array([1.0, -1.0])
ALPHA, LR, DECAY = 0.5, 0.1, 0.9


def eta(t):
    return LR * DECAY ** (t - 1)


def step(i, x, t):
    """One local step (K = 1) of client i in round t: x - eta_t a_i (x - c_i)."""
    return x - eta(t) * np.asarray(A[i]) * (x - np.asarray(C[i]))


def deadline_run(tmp_path, n, rounds, steps_csv, gate="aggregated"):
    """Every client selected every round, K = 1, a 1.8 s deadline. Client 0 is fast (0.01 s
    links, 1 s steps: its upload lands at 1.02 s into each round); clients 1.. have 0.5 s links
    and the step times of `steps_csv` (client, start, step_time), so whether they finish, are
    cut while computing (the deadline before their compute ends: nothing uploaded) or while
    uploading (compute done, `upload` called, the model not aggregated) varies by round."""
    sc = quadratic_scenario(n=n, rounds=rounds, steps=1, lr=LR, algo="fedumf", lr_decay=DECAY, alpha=ALPHA,
                            fusion_gate=gate)
    sc["workload"]["dataset"] = {"name": "client_quadratic", "a": A[:n], "c": C[:n], "init": X1.tolist()}
    sc["protocol"]["wait"] = {"mode": "deadline", "seconds": 1.8}
    trace = tmp_path / "steps.csv"
    trace.write_text("client,start,step_time\n" + steps_csv)
    link = {"latency": 0.01, "up_mbps": 1000, "down_mbps": 1000}
    sc["clients"]["groups"] = [
        {"name": "fast", "count": 1, "compute": {"model": "constant", "step_time": 1.0}, "network": link},
        {"name": "slow", "count": n - 1, "compute": {"model": "trace", "path": str(trace)},
         "network": dict(link, latency=0.5)}]
    w = World(scenario.load(sc))
    w.run()
    assert w.status == "complete", w.message
    return w


def reasons(w):
    c = w.recorder.clients_frame()
    c = c[c["selected"]]
    return {(int(r), int(k)): (int(f), s) for r, k, f, s in zip(c["round"], c["client"], c["fused"], c["fuse_skipped"])}


@pytest.mark.parametrize("gate", ["aggregated", "selected"])
def test_a_model_cut_on_its_upload_is_kept_and_fused_when_next_selected(tmp_path, gate):
    """Round 1: client 1 computes 0.5-1.5 s (step 1 s) and uploads until 2.0 s, past the 1.8 s
    deadline: `upload` was called but theta_2 = client 0's model alone. It keeps
    g_1 = theta_2^1 - theta_1. Round 2 (steps of 0.1 s from 1.6 s): both arrive. Under
    `aggregated` client 1 was not aggregated in round 1 and fuses g_1 with alpha eta_2/eta_1
    = 0.45; under `selected` it was selected in round 1 and does not fuse (selected_prev)."""
    w = deadline_run(tmp_path, 2, 2, "a,0,1.0\na,1.6,0.1\n", gate)
    m = w.recorder.metrics
    assert m[1]["round_time"] == pytest.approx(1.8) and m[2]["round_time"] == pytest.approx(1.1, abs=1e-6)
    theta2 = step(0, X1, 1)
    g1 = step(1, X1, 1) - X1
    fuses = gate == "aggregated"
    start = theta2 + ALPHA * eta(2) / eta(1) * g1 if fuses else theta2
    theta3 = (step(0, theta2, 2) + step(1, start, 2)) / 2
    np.testing.assert_allclose(w.tasks[0].algorithm.x.numpy(), theta3, rtol=0, atol=1e-15)
    assert reasons(w) == {(1, 0): (0, "first_round"), (1, 1): (0, "first_round"),
                          (2, 0): (0, "selected_prev"), (2, 1): (1, "none") if fuses else (0, "selected_prev")}
    assert [r["n_fused"] for r in m[1:]] == [0, int(fuses)]
    assert w.tasks[0].algorithm.summary()["fedumf"] == {
        "updates_kept": 1, "updates_fused": int(fuses), "updates_lost_unfinished": 0,
        "updates_lost_superseded": 0, "updates_lost_offline": 0}


def test_no_update_when_nothing_was_kept_or_it_is_too_old(tmp_path):
    """Three rounds of 1.8 s deadlines. Client 1: round 1 cut uploading (keeps g_1), round 2
    fuses g_1 but is cut computing (a 2 s step from 1.6 s), round 3 (0.1 s steps from 3.7 s)
    arrives: its g_1 is 2 rounds old, past the default max_fusion_age 1, and it was online in
    round 2: `no_update`. Client 2: round 1 cut computing (2 s steps until 1.9 s), so nothing
    kept: round 2 `no_update`; it arrives in rounds 2 and 3. No background work (everyone is
    selected), so theta follows the arrivals alone."""
    w = deadline_run(tmp_path, 3, 3, "a,0,1.0\na,1.6,2.0\na,3.7,0.1\nb,0,2.0\nb,1.9,0.1\n")
    assert reasons(w) == {(1, 0): (0, "first_round"), (1, 1): (0, "first_round"), (1, 2): (0, "first_round"),
                          (2, 0): (0, "selected_prev"), (2, 1): (1, "none"), (2, 2): (0, "no_update"),
                          (3, 0): (0, "selected_prev"), (3, 1): (0, "no_update"), (3, 2): (0, "selected_prev")}
    theta2 = step(0, X1, 1)
    theta3 = (step(0, theta2, 2) + step(2, theta2, 2)) / 2
    theta4 = (step(0, theta3, 3) + step(1, theta3, 3) + step(2, theta3, 3)) / 3
    np.testing.assert_allclose(w.tasks[0].algorithm.x.numpy(), theta4, rtol=0, atol=1e-15)
    assert w.tasks[0].algorithm.summary()["fedumf"]["updates_kept"] == 1


def test_alpha_zero_computes_no_background_job(tmp_path):
    """alpha = 0 fuses nothing, so no one reads a kept g and no background job is computed:
    4 clients, K = 2, S_t = {0, 1}, {1, 2}, {0, 3}, {0, 3}, {1, 2}: 10 jobs computed of the 20
    submitted, though the bookkeeping still counts the 5 clients that would fuse."""
    sc = quadratic_scenario(n=4, rounds=5, steps=2, lr=LR, algo="fedumf", alpha=0.0)
    sc["workload"]["dataset"] = {"name": "client_quadratic", "a": [[1, 2], [2, 1], [0.5, 3], [4, 1]],
                                 "c": [[1, 2], [-1, 0], [3, -1], [0, 4]]}
    sc["protocol"]["select"] = {"model": "sequence", "sets": [[0, 1], [1, 2], [0, 3], [0, 3], [1, 2]]}
    sc["clients"]["groups"][0]["network"] = {"latency": 0.01, "up_mbps": 1000, "down_mbps": 1000}
    w = World(scenario.load(sc))
    w.run()
    assert w.status == "complete", w.message
    assert w.executor.stats.jobs_submitted == 20 and w.executor.stats.jobs_computed == 10
    assert [r["n_fused"] for r in w.recorder.metrics[1:]] == [0, 1, 2, 0, 2]


def test_the_resolved_scenario_records_the_defaults():
    """config.yaml (`scenario.dump`) holds every default the run used: uniform weights, the
    `aggregated` gate, `skip` for unfinished jobs, updates at most 1 round old, alpha 1."""
    sc = quadratic_scenario(n=2, rounds=1, steps=1, algo="fedumf")
    got = scenario.dump(scenario.load(sc))["algorithm"]
    assert {k: got[k] for k in ("alpha", "weighting", "fusion_gate", "unfinished", "max_fusion_age")} == {
        "alpha": 1.0, "weighting": "uniform", "fusion_gate": "aggregated", "unfinished": "skip",
        "max_fusion_age": 1}


@pytest.mark.parametrize("alpha, warned", [(1.0, False), (1.5, True), (2.5, True)])
def test_alpha_above_one_warns(alpha, warned):
    """The paper's range is (0, 1]: alpha = 1 is silent, 1.5 and 2.5 warn once, naming the value."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert scenario.member("algorithm", "fedumf", lr=0.1, alpha=alpha).alpha == alpha
    msgs = [str(x.message) for x in got]
    assert msgs == ([f"algorithm.alpha = {alpha} > 1 is outside the paper's range (0, 1]"] if warned else [])


def test_declared_name_and_client_state():
    """What `flemu list` shows: the registered name and the per-client state g."""
    assert FedUMF.name == "fedumf"
    assert "per-client state: g" in algorithm_lines(FedUMF)
