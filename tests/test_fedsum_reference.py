"""FedSUM family and baselines on the spec's quadratic (docs/algorithms/fedsum.md section 8): every method run
by the emulator (float64, exact gradients, participation replayed from a trace) equals the
NumPy reference of Appendix A (tests/reference/fedsum_reference.py) to 1e-10 on every
iterate (T7, constant and decaying lr), the spec's reductions and invariants (T8a-e, g) and
exact convergence of the family where the baselines stall (T9).
Spec rounds are 0-based; the emulator's iterate after its round t is the spec's x^t."""
import numpy as np
import pandas as pd
import pytest
import torch

from emulator.measures.participation import delay_metrics
from reference import fedsum_reference as ref
from reference.fedsum_harness import METHODS, XSTAR, algo_block, quad_scenario, reference, run_world

SEQ = ref.SEQ
TOL = 1e-10

# docs/algorithms/fedsum.md T7: (x^3, x^6) with eta_l = 0.1, eta_g = 1, K = 3 on SEQ
T7 = {
    "fedsum_b": ((0.260000000000, 0.200000000000), (0.683040000000, 0.895600000000)),
    "fedsum": ((0.230370074074, 0.180666666667), (0.644773607327, 0.842582847190)),
    "fedsum_cr": ((0.230370074074, 0.180666666667), (0.646503450866, 0.847209614388)),
    "fedavg": ((0.138752000000, 0.271000000000), (0.441678768599, 0.814383334405)),
    "fedavg_active": ((0.138752000000, 0.271000000000), (0.441678768599, 0.814383334405)),
    "scaffold": ((0.212223111111, 0.271000000000), (0.598424221366, 0.848133550576)),
    "scaffold_1up": ((0.212223111111, 0.271000000000), (0.598424221366, 0.848133550576)),
    "mifa": ((0.241611555556, 0.180666666667), (0.670070162393, 0.865052056208)),
    "fedvarp": ((0.229085333333, 0.271000000000), (0.642486336735, 0.871922656627)),
    "fedau": ((0.075639111111, 0.090333333333), (0.914865172585, 1.349907790308)),
    "fedawe": ((0.000000000000, 0.542000000000), (1.004836022000, 1.115765355333)),
    "fedawe_clip": ((0.000000000000, 0.500000000000), (0.668430486556, 0.900789031697)),
}
# docs/algorithms/fedsum.md T7, decaying eta_l^t = 0.1 / sqrt(t/10 + 1): x^6
T7_DECAY = {"fedsum_b": (0.639763423037, 0.823446600613), "fedsum": (0.602753115710, 0.773625277184),
            "fedsum_cr": (0.604449825209, 0.777993429792)}


@pytest.mark.parametrize("method", list(METHODS))
def test_t7_every_iterate_equals_the_reference(tmp_path, method):
    xs, _ = run_world(quad_scenario(algo_block(method, 0.1), SEQ, tmp_path))
    np.testing.assert_allclose(xs, reference(method, SEQ, 0.1, 3), rtol=0, atol=TOL)
    np.testing.assert_allclose(xs[3], T7[method][0], rtol=0, atol=TOL)
    np.testing.assert_allclose(xs[6], T7[method][1], rtol=0, atol=TOL)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "fedavg"])   # fedavg: geometric lr_decay only
def test_t7_decaying_lr_every_iterate_equals_the_reference(tmp_path, method):
    xs, _ = run_world(quad_scenario(algo_block(method, 0.1, schedule="inv_sqrt"), SEQ, tmp_path))
    np.testing.assert_allclose(xs, reference(method, SEQ, 0.1, 3, schedule="inv_sqrt"), rtol=0, atol=TOL)
    if method in T7_DECAY:
        np.testing.assert_allclose(xs[6], T7_DECAY[method], rtol=0, atol=TOL)


@pytest.mark.parametrize("method", list(METHODS))
def test_t7_server_lr_and_arrival_order(tmp_path, method):
    """eta_g = 0.7, and clients finishing in reverse index order (T8g: order independence)."""
    sc = quad_scenario(algo_block(method, 0.1, server_lr=0.7), SEQ, tmp_path, step_times=(3.0, 2.0, 1.0))
    xs, _ = run_world(sc)
    np.testing.assert_allclose(xs, reference(method, SEQ, 0.1, 3, server_lr=0.7), rtol=0, atol=TOL)


FULL = [[0, 1, 2]] * 20


@pytest.mark.parametrize("schedule", ["constant", "inv_sqrt"])
def test_t8a_b_full_participation_fedsum_is_scaffold_and_fedsum_cr(tmp_path, schedule):
    run = lambda m: np.array(run_world(quad_scenario(algo_block(m, 0.1, schedule=schedule), FULL, tmp_path))[0])  # noqa: E731
    sum_, sca, cr = run("fedsum"), run("scaffold"), run("fedsum_cr")
    assert np.abs(sum_ - sca).max() <= 1e-12          # T8a
    assert np.abs(cr - sum_).max() <= 1e-12           # T8b
    assert np.abs(sum_ - reference("fedsum", FULL, 0.1, 3, schedule=schedule)).max() <= TOL
    if schedule == "constant":
        np.testing.assert_allclose(sum_[20], (0.749875273542, 0.999833698056), rtol=0, atol=TOL)


def test_t8c_one_local_step_family_equals_mifa(tmp_path):
    run = lambda m: np.array(run_world(quad_scenario(algo_block(m, 0.1), SEQ, tmp_path, K=1))[0])  # noqa: E731
    b, s, cr, mifa = run("fedsum_b"), run("fedsum"), run("fedsum_cr"), run("mifa")
    for other in (s, cr, mifa):
        assert np.abs(other - b).max() <= 1e-12
    np.testing.assert_allclose(b[6], (0.332377942387, 0.405081481481), rtol=0, atol=TOL)


def test_t8d_fedsum_b_full_participation_is_gradient_descent(tmp_path):
    xs, _ = run_world(quad_scenario(algo_block("fedsum_b", 0.1), FULL, tmp_path))
    grads, _ = ref.problem()
    x = np.zeros(2)
    for t in range(20):
        x = x - 0.3 * np.mean([g(x) for g in grads], axis=0)          # gamma = eta_g eta_l K = 0.3
        np.testing.assert_allclose(xs[t + 1], x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(xs[20], (0.749972578812, 0.999963438416), rtol=0, atol=TOL)


@pytest.mark.parametrize("method", ["fedsum_b", "fedsum", "fedsum_cr"])
@pytest.mark.parametrize("schedule", ["constant", "inv_sqrt"])
def test_t8e_merged_y_is_the_mean_of_the_clients_y_and_x_hat_is_x_at_r(tmp_path, method, schedule):
    seq = SEQ + [[2], [], [0, 1]]
    seen = {"rounds": 0}
    xs_by_round = {}

    def check(algo, row):
        t = int(row["round"])
        xs_by_round[t] = algo.x.clone()
        if t == 0:
            return
        y_i = algo.states.table("fedsum_y")
        assert float((algo.y - y_i.mean(0)).norm()) <= 1e-12
        if method == "fedsum_cr":
            r = algo.states.scalars("fedsum_r", np.int64, 0)
            xhat = algo.states.table("fedsum_xhat", algo.ctx.x0)
            for i in range(3):
                # r_i is a spec round: x^{r_i} is the model after flemu round r_i
                assert torch.equal(xhat[i], xs_by_round[int(r[i])])
        seen["rounds"] += 1

    run_world(quad_scenario(algo_block(method, 0.1, schedule=schedule), seq, tmp_path), each=check)
    assert seen["rounds"] == len(seq)


# --------------------------------------------------------------------------- T9
P = [[0], [0, 1], [0, 2]]           # client 0 every round, 1 when t mod 3 = 1, 2 when t mod 3 = 2


def test_t9_pattern_delays():
    d = delay_metrics(P * 1000, 3)
    assert d["tau_max"] == 2 and d["tau_avg"] == pytest.approx(1.666333, abs=5e-7)


FIRST = {"fedsum_b": 55, "fedsum": 59, "fedsum_cr": 60, "scaffold": 73}
STALL = {"fedavg_active": 0.52019, "mifa": 0.032022, "fedvarp": 0.032022, "fedau": 0.17913, "fedawe": 0.41649}


@pytest.mark.parametrize("method", list(FIRST) + list(STALL))
def test_t9_family_reaches_the_exact_minimiser_baselines_stall(tmp_path, method):
    """eta_l = 0.05, K = 3 under pattern P: the emulator's first 90 rounds equal the reference;
    the family and SCAFFOLD pass ||x - x*|| < 1e-6 first at the spec's rounds, the baselines
    stay > 0.01 away; the reference's T = 3000 values are the spec's."""
    T = 90
    xs, _ = run_world(quad_scenario(algo_block(method, 0.05), P, tmp_path, rounds=T))
    full = np.array(reference(method, P * 1000, 0.05, 3))
    np.testing.assert_allclose(xs, full[:T + 1], rtol=0, atol=TOL)
    dist = np.linalg.norm(np.array(xs) - XSTAR, axis=1)
    far = np.linalg.norm(full - XSTAR, axis=1)
    if method in FIRST:
        assert int(np.argmax(dist < 1e-6)) == FIRST[method] and dist[FIRST[method] - 1] >= 1e-6
        assert far[3000] < 1e-12
    else:
        assert dist[-3:].min() > 0.01 and far[-3:].min() > 0.01
        assert far[3000] == pytest.approx(STALL[method], abs=5e-6)


@pytest.mark.parametrize("method", ["fedsum_b", "fedsum", "fedsum_cr"])
def test_a7_no_step_on_empty_is_the_sequence_without_the_empty_round(tmp_path, method):
    """`step_on_empty: false` (A7): with a constant lr, skipping the step and FedSUM-CR's gamma
    in the empty round equals the reference run on SEQ with that round removed."""
    algo = dict(algo_block(method, 0.1), step_on_empty=False)
    xs, _ = run_world(quad_scenario(algo, SEQ, tmp_path))
    short = reference(method, [s for s in SEQ if s], 0.1, 3)               # SEQ without round 2
    np.testing.assert_allclose(xs[:3], short[:3], rtol=0, atol=TOL)
    assert np.array_equal(xs[3], xs[2])                                      # no step in the empty round
    np.testing.assert_allclose(xs[4:], short[3:], rtol=0, atol=TOL)


# --------------------------------------------------------------------------- state commits at merge
@pytest.mark.parametrize("method", ["fedsum_b", "fedsum", "fedsum_cr"])
def test_late_uploads_keep_the_clients_state(tmp_path, run_in, method):
    """A deadline of 4.2 s, K = 3 steps of 1 s: clients 0 and 1 (instant links) always merge;
    client 2's link has 0.3 s latency + exponential jitter each way, so some of its uploads
    miss the deadline after it computed. Its y_i (and r_i, x_hat_i for FedSUM-CR) must change
    only when its upload is merged: after every round y = mean_i y_i, a late client keeps its
    state, and every iterate equals the reference replayed on the merged clients read from
    clients.csv (model.npy, float64, too)."""
    sc = quad_scenario(algo_block(method, 0.1), FULL, tmp_path, rounds=16)
    sc["clients"]["groups"][2]["network"] = {"latency": 0.3, "up_mbps": 100, "down_mbps": 100, "jitter": 0.3}
    sc["protocol"]["wait"] = {"mode": "deadline", "seconds": 4.2}
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    merged = [sorted(g.loc[g["weight"] > 0, "client"]) for _, g in c.groupby("round")]
    late = c[(c["client"] == 2) & c["dropped"]]
    assert len(merged) == 16 and all({0, 1} <= set(m) for m in merged)
    assert (late["drop_reason"] == "late").all() and (late["steps"] == 3).any()   # computed, upload late
    first = min(t for t, m in enumerate(merged) if 2 in m)
    assert (late["round"] > first + 1).any() and sum(2 in m for m in merged) >= 3  # late after merging
    want = reference(method, merged, 0.1, 3)
    np.testing.assert_allclose(np.load(res.run_dir / "model.npy"), want[-1], rtol=0, atol=TOL)
    states, xs_by_round = [], {}

    def check(algo, row):
        t = int(row["round"])
        xs_by_round[t] = algo.x.clone()
        y_i = algo.states.table("fedsum_y").clone()
        assert float((algo.y - y_i.mean(0)).norm()) <= 1e-12          # y = mean of y_i
        if method == "fedsum_cr":
            r = algo.states.scalars("fedsum_r", np.int64, 0).copy()
            xhat = algo.states.table("fedsum_xhat", algo.ctx.x0).clone()
            for i in range(3):
                assert torch.equal(xhat[i], xs_by_round[int(r[i])])
            states.append((y_i, r, xhat))
        else:
            states.append((y_i,))
    xs, _ = run_world(sc, each=check)
    np.testing.assert_allclose(xs, want, rtol=0, atol=TOL)
    for t in late["round"]:                     # a late round leaves client 2's state as it was
        for before, after in zip(states[t - 1], states[t]):
            assert np.array_equal(np.asarray(before[2]), np.asarray(after[2]))


@pytest.mark.parametrize("method", ["fedsum_b", "fedsum", "fedsum_cr"])
def test_leading_empty_rounds_take_the_first_known_k(tmp_path, method):
    """Nobody online in rounds 1 and 2: y stays 0 and x at x^0, and once the first uploads say
    K = 3, those rounds' gamma^t = eta_g eta_l^t K enters FedSUM-CR's Gamma as if K had been
    known from the start (the reference's fixed K), with a decaying eta_l^t."""
    seq = [[], []] + SEQ
    xs, w = run_world(quad_scenario(algo_block(method, 0.1, schedule="inv_sqrt"), seq, tmp_path))
    assert np.array_equal(xs[2], xs[0])
    np.testing.assert_allclose(xs, reference(method, seq, 0.1, 3, schedule="inv_sqrt"), rtol=0, atol=TOL)
    gamma = [0.1 / np.sqrt(r / 10 + 1) * 3 for r in range(8)]             # spec rounds 0..7, K = 3
    m = w.recorder.metrics_frame()
    # metrics.csv: gamma^t as the round knew it (no K yet in rounds 1 and 2: 0, x did not move)
    np.testing.assert_allclose(m.loc[m["round"] >= 1, "gamma"], [0, 0] + gamma[2:], rtol=0, atol=1e-15)
    c = w.recorder.clients_frame()             # a merged client's weight: its 1/N share of y (Eq. (7))
    assert c.loc[c["weight"] > 0, "weight"].tolist() == [1 / 3] * sum(len(s) for s in seq)
    algo = w.tasks[0].algorithm
    for a, b in ((0, 8), (0, 2), (1, 5), (3, 8)):
        assert algo.gamma_sum(a, b) == pytest.approx(sum(gamma[a:b]), rel=0, abs=1e-14)


@pytest.mark.parametrize("method", ["fedsum_b", "fedsum", "fedsum_cr"])
def test_a7_leading_empty_rounds_without_a_step_are_no_rounds(tmp_path, method):
    """`step_on_empty: false` and nobody online in rounds 1 and 2: Gamma(0, 2) = 0, so
    FedSUM-CR's first correction is 0 (not (x_hat - x) / 0), and every later iterate is the
    reference run without those rounds (constant lr; SEQ without its own empty round)."""
    algo = dict(algo_block(method, 0.1), step_on_empty=False)
    busy = [s for s in SEQ if s]
    xs, w = run_world(quad_scenario(algo, [[], []] + busy, tmp_path))
    assert np.array_equal(xs[2], xs[0]) and w.tasks[0].algorithm.gamma_sum(0, 2) == 0.0
    np.testing.assert_allclose(xs[2:], reference(method, busy, 0.1, 3), rtol=0, atol=TOL)


@pytest.mark.parametrize("method", ["fedsum_b", "fedsum", "fedsum_cr"])
def test_zero_local_steps_are_dropouts(tmp_path, method):
    """`local_steps: 0`: every upload has K_i = 0, a dropout (docs/algorithms/fedsum.md 3.6):
    nobody is merged or weighted, y stays 0 and x stays x^0."""
    xs, w = run_world(quad_scenario(algo_block(method, 0.1), SEQ, tmp_path, K=0))
    c = w.recorder.clients_frame()
    assert c["selected"].sum() == sum(len(s) for s in SEQ) and (c["weight"] == 0).all()
    assert all(np.array_equal(x, xs[0]) for x in xs) and len(xs) == len(SEQ) + 1
    assert float(w.tasks[0].algorithm.y.abs().max()) == 0.0


@pytest.mark.parametrize("method", ["fedsum_b", "fedsum", "fedsum_cr"])
def test_declared_client_state_is_the_state_the_run_stores(tmp_path, method):
    """What `flemu list` shows (the class's name and client_state) is what a run uses: the
    registered name, and exactly the per-client tables the store holds afterwards (3 clients,
    2 float64 parameters: 48 bytes a vector table, 24 for FedSUM-CR's integer r_i)."""
    from emulator.listing import algorithm_lines
    _, w = run_world(quad_scenario(algo_block(method, 0.1), SEQ, tmp_path))
    algo = w.tasks[0].algorithm
    kinds = algo.states.summary()["client_state_kinds"]
    assert algo.name == method and tuple(kinds) == algo.client_state
    assert kinds == ({"fedsum_y": 48, "fedsum_xhat": 48, "fedsum_r": 24} if method == "fedsum_cr" else {"fedsum_y": 48})
    assert f"per-client state: {', '.join(kinds)}" in algorithm_lines(type(algo))
