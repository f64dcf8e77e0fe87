"""FedUMF (docs/algorithms/fedumf.md section 7): the algorithm against the spec's NumPy
reference, its reductions to FedAvg, bookkeeping, laziness, bytes and virtual-time edge cases."""
import numpy as np
import pandas as pd
import pytest
import torch

from emulator.scenario import schema as scenario
from emulator.algorithms.base import AlgoContext
from emulator.algorithms.fedumf import FedUMF
from emulator.compute.executor import Executor
from emulator.sim.world import World

from conftest import quadratic_scenario, tiny


def fedumf_reference(theta1, grads, selections, lrs, K, alpha):
    """FedUMF Alg. 1 (spec [E1]-[E6], section 7 verbatim); grads[i](x) -> full-batch gradient."""
    n = len(grads)
    theta = np.array(theta1, float)
    g = np.zeros((n, theta.size))                                      # L2: g_0 = 0
    prev, eta_prev, hist = set(), None, [theta.copy()]                  # L3: S_0 = {}
    for t, S in enumerate(selections, start=1):
        eta = lrs[t - 1]
        ratio = 1.0 if eta_prev is None else eta / eta_prev
        new_g, ups = np.zeros_like(g), []
        for i in range(n):
            start = theta.copy()                                        # [E1]
            if i in S and i not in prev:
                start = start + alpha * ratio * g[i]                    # [E2]
            x = start.copy()
            for _ in range(K):
                x = x - eta * grads[i](x)                               # [E3]
            new_g[i] = x - start                                        # [E4]
            if i in S:
                ups.append(x)                                           # [E5]
        theta = np.mean(ups, axis=0)                                    # [E6]
        g, prev, eta_prev = new_g, set(S), eta
        hist.append(theta.copy())
    return hist


def quad(a, c, K, lr, rounds, select, algo="fedumf", decay=1.0, init=None, **kw):
    """client_quadratic in float64 with exact gradients; links with latency, so a background
    job (download + compute) always ends before its round (download + compute + upload)."""
    sc = quadratic_scenario(n=len(a), rounds=rounds, steps=K, lr=lr, algo=algo, lr_decay=decay, **kw)
    sc["workload"]["dataset"] = {"name": "client_quadratic", "a": a, "c": c}
    if init is not None:
        sc["workload"]["dataset"]["init"] = init
    sc["protocol"]["select"] = select
    sc["clients"]["groups"][0]["network"] = {"latency": 0.01, "up_mbps": 1000, "down_mbps": 1000}
    sc["algorithm"]["weighting"] = "uniform"          # Alg. 1 L19: 1/M (FedAvg as the paper runs it)
    return sc


def run_world(sc):
    w = World(scenario.load(sc))
    w.run()
    assert w.status == "complete", w.message
    return w


def grads_of(a, c):
    A, C = np.asarray(a, float), np.asarray(c, float)
    return [(lambda x, A=A[i], C=C[i]: A * (x - C)) for i in range(len(A))]


# --------------------------------------------------------------------------- T1, T2
@pytest.mark.parametrize("decay, want_umf, want_avg", [(1.0, 1.9, 1.0), (0.5, 0.975, 0.5)])
def test_T1_scalar_hand_check(decay, want_umf, want_avg):
    """n = 2, M = 1, f_0 = theta^2/2, f_1 = (theta - 10)^2/2, S_1 = {0}, S_2 = {1}: the ratio
    eta_t/eta_{t-1} matters (without it 1.45) and the sign is + (with - 0.025)."""
    a, c = [[1.0], [1.0]], [[0.0], [10.0]]
    for algo, want in (("fedumf", want_umf), ("fedavg", want_avg)):
        w = run_world(quad(a, c, 1, 0.1, 2, {"model": "cyclic", "k": 1}, algo, decay))
        assert float(w.tasks[0].algorithm.x[0]) == pytest.approx(want, abs=1e-12), algo


T2_A = [[1, 2], [2, 1], [0.5, 3], [4, 1]]
T2_C = [[1, 2], [-1, 0], [3, -1], [0, 4]]
T2_SEL = [[0, 1], [1, 2], [0, 3], [0, 3], [1, 2]]


def test_T2_golden_trajectory_and_reference():
    """The spec's table (n = 4, d = 2, K = 2, alpha = 0.7, eta_t = 0.1 x 0.5^(t-1)): first
    round, a client selected twice, fusion after one and after two absences, a repeat."""
    want = {2: (-0.085, 0.36), 3: (-0.0471039453125, 0.089266875), 4: (0.00515760052490234, 0.387215606054688),
            5: (0.0172639754302931, 0.471908776923752), 6: (0.0119547100286115, 0.422764373376353)}
    ref = fedumf_reference([0, 0], grads_of(T2_A, T2_C), [set(s) for s in T2_SEL],
                           [0.1 * 0.5 ** t for t in range(5)], 2, 0.7)
    for k, v in want.items():
        np.testing.assert_allclose(ref[k - 1], v, atol=1e-12)
    sc = quad(T2_A, T2_C, 2, 0.1, 5, {"model": "sequence", "sets": T2_SEL}, decay=0.5, alpha=0.7)
    sc["run"]["eval_every"] = 1
    w = run_world(sc)
    np.testing.assert_allclose(w.tasks[0].algorithm.x.numpy(), ref[-1], rtol=0, atol=1e-12)
    # F(theta_t) at every round (metrics.csv test_loss) follows the reference's trajectory
    F = w.tasks[0].data.extra["F"]
    got = [r["test_loss"] for r in w.recorder.metrics]
    np.testing.assert_allclose(got, [F(h) for h in ref], rtol=1e-12)
    # fusing sets F_2 = {2}, F_3 = {0, 3}, F_4 = {}, F_5 = {1, 2}; F_1 a no-op
    c = w.recorder.clients_frame()
    fused = c[c["fused"] == 1].groupby("round")["client"].apply(sorted).to_dict()
    assert fused == {2: [2], 3: [0, 3], 5: [1, 2]}
    sel = c[c["selected"]]
    assert set(sel.loc[sel["round"] == 1, "fuse_skipped"]) == {"first_round"}
    assert set(sel.loc[sel["round"] == 4, "fuse_skipped"]) == {"selected_prev"}
    assert [r["n_fused"] for r in w.recorder.metrics[1:]] == [0, 1, 2, 0, 2]
    # summary.json: every round's 2 unselected clients keep their g (a background job of
    # 0.01 + 2 s ends before its round's 2.02 s), 10 in all; the 5 fusing clients read one each
    assert w.tasks[0].algorithm.summary()["fedumf"] == {
        "updates_kept": 10, "updates_fused": 5, "updates_lost_unfinished": 0,
        "updates_lost_superseded": 0, "updates_lost_offline": 0}


# --------------------------------------------------------------------------- T3
def random_problem(n, d, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 2.0, (n, d)).tolist(), rng.normal(0, 1, (n, d)).tolist()


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_T3_emulator_equals_the_reference_every_round(executor):
    """n = 10, d = 5, K = 3, eta_t = 0.05 x 0.9^(t-1), alpha = 0.8, 20 rounds of a recorded
    uniform M = 3 selection: every round's model equals the reference (float64: 1e-10)."""
    a, c = random_problem(10, 5, 7)
    sc = quad(a, c, 3, 0.05, 20, {"model": "uniform", "k": 3}, decay=0.9, alpha=0.8, init=[5.0] * 5)
    sc["executor"]["name"] = executor
    w = run_world(sc)
    cl = w.recorder.clients_frame()
    sels = [set(cl.loc[(cl["round"] == t) & cl["selected"], "client"]) for t in range(1, 21)]
    assert all(len(s) == 3 for s in sels) and any(not (sels[t] & sels[t - 1]) for t in range(1, 20))
    ref = fedumf_reference([5.0] * 5, grads_of(a, c), sels, [0.05 * 0.9 ** t for t in range(20)], 3, 0.8)
    x = w.tasks[0].algorithm.x.numpy()
    assert np.linalg.norm(x - ref[-1]) <= 1e-10 * np.linalg.norm(ref[-1])
    F = w.tasks[0].data.extra["F"]
    np.testing.assert_allclose([r["test_loss"] for r in w.recorder.metrics], [F(h) for h in ref], rtol=1e-10)
    # the fused offset matters: FedAvg on the same selections is elsewhere
    avg = fedumf_reference([5.0] * 5, grads_of(a, c), sels, [0.05 * 0.9 ** t for t in range(20)], 3, 0.0)
    assert np.linalg.norm(avg[-1] - ref[-1]) > 1e-3


# --------------------------------------------------------------------------- T4, T5
def digits_scenario(algo, k=3, alpha=0.0, executor="sequential"):
    sc = tiny(**{"run.rounds": 6, "clients.count": 8, "protocol.select": {"model": "uniform", "k": k},
                 "workload.partition": {"name": "dirichlet", "alpha": 0.5}})
    sc["algorithm"] = {"name": algo, "lr": 0.1, "momentum": 0.5, "weight_decay": 5e-4, "weighting": "uniform"}
    if algo == "fedumf":
        sc["algorithm"]["alpha"] = alpha
    sc["executor"] = {"name": executor}
    return sc


def test_T4_alpha_zero_is_fedavg_bitwise_and_batched_close():
    """alpha = 0 on real mini-batches with momentum and weight decay: the same global vector
    as FedAvg every round (sequential: bitwise), so the unselected clients' work does not
    disturb the selected clients' batch streams."""
    umf, avg = run_world(digits_scenario("fedumf")), run_world(digits_scenario("fedavg"))
    assert torch.equal(umf.tasks[0].algorithm.x, avg.tasks[0].algorithm.x)
    assert [r["test_acc"] for r in umf.recorder.metrics] == [r["test_acc"] for r in avg.recorder.metrics]
    assert umf.recorder.metrics[-1]["n_fused"] > 0 or any(r.get("n_fused", 0) for r in umf.recorder.metrics)
    b = run_world(digits_scenario("fedumf", executor="batched"))
    torch.testing.assert_close(b.tasks[0].algorithm.x, avg.tasks[0].algorithm.x, rtol=1e-6, atol=1e-7)
    # and alpha > 0 is not FedAvg
    one = run_world(digits_scenario("fedumf", alpha=1.0))
    assert not torch.allclose(one.tasks[0].algorithm.x, avg.tasks[0].algorithm.x)


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_T5_full_participation_is_fedavg(alpha):
    umf = run_world(digits_scenario("fedumf", k=8, alpha=alpha))
    avg = run_world(digits_scenario("fedavg", k=8))
    assert torch.equal(umf.tasks[0].algorithm.x, avg.tasks[0].algorithm.x)
    assert all(r["n_fused"] == 0 for r in umf.recorder.metrics[1:])


# --------------------------------------------------------------------------- T6, T7
def test_T6_T7_uploads_follow_the_papers_K1_cases_and_decay():
    """K = 1, alpha in {1, 0.3}, eta_t = 0.1 x 0.998^(t-1): a fusing client uploads
    theta_t - a eta_t grad(theta_{t-1}) - eta_t grad(theta_t - a eta_t grad(theta_{t-1})),
    a repeat client theta_t - eta_t grad(theta_t); the fused vector is 0.998 x alpha x g of
    the previous round only (never an older g, never a sum)."""
    a, c = random_problem(6, 3, 11)
    grads = grads_of(a, c)
    for alpha in (1.0, 0.3):
        sc = quad(a, c, 1, 0.1, 12, {"model": "uniform", "k": 2}, decay=0.998, alpha=alpha, init=[2.0] * 3)
        w = run_world(sc)
        cl = w.recorder.clients_frame()
        sels = [set(cl.loc[(cl["round"] == t) & cl["selected"], "client"]) for t in range(1, 13)]
        ref = fedumf_reference([2.0] * 3, grads, sels, [0.1 * 0.998 ** t for t in range(12)], 1, alpha)
        lrs = [0.1 * 0.998 ** t for t in range(12)]
        fused = cl[cl["fused"] == 1]
        assert len(fused) >= 3
        for t in range(2, 13):
            f_t = set(fused.loc[fused["round"] == t, "client"])
            assert f_t == sels[t - 1] - sels[t - 2]                        # T7: S_t \ S_{t-1}
            th, th_prev, eta = ref[t - 1], ref[t - 2], lrs[t - 1]
            ups = []
            for i in sorted(sels[t - 1]):
                if i in f_t:
                    s = th - alpha * eta * grads[i](th_prev)
                    ups.append(s - eta * grads[i](s))
                else:
                    ups.append(th - eta * grads[i](th))
            np.testing.assert_allclose(np.mean(ups, 0), ref[t], rtol=1e-10)
        np.testing.assert_allclose(w.tasks[0].algorithm.x.numpy(), ref[-1], rtol=1e-10)


def test_T7_only_the_latest_update_is_fused():
    """Client 2 unselected in rounds 1 and 2, selected in 3: it fuses g_2 (computed from
    theta_2), not g_1 and not g_1 + g_2 — checked on the algorithm's coefficient and store."""
    ctx = AlgoContext(0, 2, 3, np.ones(3), torch.zeros(2, dtype=torch.float64), np.random.default_rng(0))
    p = scenario.member("algorithm", "fedumf", lr=0.1, lr_decay=0.998, alpha=0.5)
    alg = FedUMF(p, ctx)
    from emulator.compute.jobs import LocalRule, LocalSpec
    from emulator.algorithms.base import Arrival
    zero = torch.zeros(2, dtype=torch.float64)
    for t, g in ((1, [1.0, 1.0]), (2, [5.0, -3.0])):
        alg.begin_round(t, [0], [0, 1, 2])
        alg.local_spec(0, t, type("B", (), {"vectors": [zero]})())
        res = type("R", (), {"params": torch.tensor(g, dtype=torch.float64)})()
        alg.keep(2, t, res, LocalSpec(zero, LocalRule(lr=0.1)))
        alg.aggregate(t, [Arrival(0, t, [zero], 1, 1, 0.0)])
    alg.begin_round(3, [2], [0, 1, 2])
    coef, why = alg.fusion(2, 3)
    assert why == "none" and coef == pytest.approx(0.5 * 0.998)           # alpha eta_3 / eta_2
    assert torch.equal(alg.states.row("g", 2), torch.tensor([5.0, -3.0], dtype=torch.float64))


# --------------------------------------------------------------------------- T8
@pytest.mark.parametrize("M, tol", [(10, 0.015), (50, 0.01)])
def test_T8_fusion_frequency(M, tol):
    """Uniform M-of-100 selection, 1000 rounds: the share of selected clients that fuse
    (t >= 2) is 1 - M/n (the algorithm's own fusion rule driven by the selection model)."""
    from devices.selectors import SelectionContext, UniformSelection
    ctx = AlgoContext(0, 1, 100, np.ones(100), torch.zeros(1), np.random.default_rng(0))
    alg = FedUMF(scenario.member("algorithm", "fedumf", lr=0.1), ctx)
    sel, rng = UniformSelection(k=M), np.random.default_rng(5)
    fuses = total = 0
    for t in range(1, 1001):
        S = sel.select(SelectionContext(t, range(100), 100, rng))
        alg.begin_round(t, S, range(100))
        if t >= 2:
            fuses += sum(alg.fusion(i, t)[0] is not None for i in S)
            total += M
        for i in set(range(100)) - set(S):         # the unselected train and keep g_t
            alg.g_round[i], alg.g_lr[i] = t, 0.1
        alg.prev_selected = alg.prev_aggregated = set(S)
    assert abs(fuses / total - (1 - M / 100)) < tol


# --------------------------------------------------------------------------- T10, T11
def test_T10_unread_background_jobs_are_never_computed_and_results_equal_an_eager_run(monkeypatch):
    a, c = random_problem(8, 4, 3)
    sc = quad(a, c, 2, 0.05, 10, {"model": "uniform", "k": 3}, alpha=1.0, init=[1.0] * 4)
    lazy = run_world(sc)
    cl = lazy.recorder.clients_frame()
    sels = [set(cl.loc[(cl["round"] == t) & cl["selected"], "client"]) for t in range(1, 11)]
    # computed jobs = the selected ones (3 per round) + the background jobs someone fused:
    # sum_{t<T} |S_{t+1} \ S_t|
    want = 3 * 10 + sum(len(sels[t + 1] - sels[t]) for t in range(9))
    assert lazy.executor.stats.jobs_computed == want
    assert lazy.executor.stats.jobs_submitted == 8 * 10       # every client trained every round
    real = Executor.submit

    def eager(self, job):
        fut = real(self, job)
        fut.value()
        return fut
    monkeypatch.setattr(Executor, "submit", eager)
    ea = run_world(sc)
    assert ea.executor.stats.jobs_computed == 8 * 10
    assert torch.equal(ea.tasks[0].algorithm.x, lazy.tasks[0].algorithm.x)
    # virtual compute time covers every available client in both runs
    for w in (lazy, ea):
        f = w.recorder.clients_frame()
        assert (f.groupby("round")["compute_time"].apply(lambda x: (x > 0).sum()) == 8).all()


@pytest.mark.parametrize("broadcast, down_msgs", [("unicast", 8), ("multicast", 1)])
def test_T11_bytes(broadcast, down_msgs):
    a, c = random_problem(8, 4, 3)
    sc = quad(a, c, 2, 0.05, 4, {"model": "uniform", "k": 3}, alpha=1.0)
    sc["protocol"]["broadcast"] = broadcast
    w = run_world(sc)
    model = 4 * 4
    for r in w.recorder.metrics[1:]:
        assert r["bytes_up"] == 3 * model                      # FedAvg's: M models
        assert r["bytes_down"] == down_msgs * model             # every available client, or one message
    avg = run_world(quad(a, c, 2, 0.05, 4, {"model": "uniform", "k": 3}, "fedavg"))
    assert all(r["bytes_down"] == 3 * model for r in avg.recorder.metrics[1:])


# --------------------------------------------------------------------------- T12
def two_group_scenario(unfinished="skip", slow_step=3.0):
    """Clients 0-2 fast (1 s per step), client 3 slow; K = 1; client 3 unselected in round 1
    and selected in round 2, while its round-1 job (slow_step s) may still run."""
    a, c = random_problem(4, 2, 5)
    sc = quad(a, c, 1, 0.1, 3, {"model": "sequence", "sets": [[0, 1], [3], [0, 3]]}, alpha=1.0,
              unfinished=unfinished)
    g = sc["clients"]["groups"][0]
    sc["clients"]["groups"] = [dict(g, name="fast", count=3),
                               dict(g, name="slow", count=1, compute={"model": "constant", "step_time": slow_step})]
    del sc["clients"]["groups"][0]["fraction"], sc["clients"]["groups"][1]["fraction"]
    return sc


def test_T12_unfinished_background_job_skip_wait_and_round_time():
    skip = run_world(two_group_scenario("skip"))
    c = skip.recorder.clients_frame()
    r2 = c[(c["round"] == 2) & (c["client"] == 3)].iloc[0]
    assert r2["fused"] == 0 and r2["fuse_skipped"] == "unfinished"
    r1 = c[(c["round"] == 1) & (c["client"] == 3)].iloc[0]
    assert r1["background_stop"] == "unfinished" and not r1["dropped"]
    # round 1 lasts download + 1 step + upload of the fast clients: the slow unselected one
    # never delays it
    m = skip.recorder.metrics
    assert m[1]["round_time"] == pytest.approx(0.01 + 1.0 + 0.01)
    assert r1["compute_time"] == pytest.approx(m[1]["round_time"] - 0.01)   # stopped at round 2's start
    wait = run_world(two_group_scenario("wait"))
    c = wait.recorder.clients_frame()
    r2 = c[(c["round"] == 2) & (c["client"] == 3)].iloc[0]
    assert r2["fused"] == 1 and r2["fuse_skipped"] == "none"
    # round 2 waits for client 3's round-1 job (ends at 0.01 + 3) and then its own round
    mw = wait.recorder.metrics
    assert mw[2]["virtual_time"] == pytest.approx(0.01 + 3.0 + 0.01 + 3.0 + 0.01)
    # no unfinished job when the slow client is fast enough
    done = run_world(two_group_scenario("skip", slow_step=0.5))
    c = done.recorder.clients_frame()
    assert c[(c["round"] == 2) & (c["client"] == 3)].iloc[0]["fuse_skipped"] == "none"


def test_T12_offline_in_the_previous_round_does_not_fuse(tmp_path):
    sc = two_group_scenario("skip", slow_step=0.5)
    for g, off in zip(sc["clients"]["groups"], ([], [1])):    # the slow group's client 3: offline in round 1
        trace = tmp_path / f"{g['name']}.csv"
        trace.write_text("round,client,available\n" + "".join(
            f"{r},0,{0 if r in off else 1}\n" for r in range(1, 4)))
        g["availability"] = {"model": "round_trace", "path": str(trace), "repeat": False}
    w = run_world(sc)
    c = w.recorder.clients_frame()
    r1 = c[(c["round"] == 1) & (c["client"] == 3)].iloc[0]
    assert not r1["available"] and r1["compute_time"] == 0 and r1["bytes_down"] == 0
    r2 = c[(c["round"] == 2) & (c["client"] == 3)].iloc[0]
    assert r2["fused"] == 0 and r2["fuse_skipped"] == "offline"
    # round 3: client 3 was selected in round 2; client 0's round-2 background job (1 s)
    # outlasts round 2 (0.52 s of client 3's work): unfinished, nothing fused
    r3 = c[(c["round"] == 3) & c["selected"]].set_index("client")["fuse_skipped"].to_dict()
    assert r3 == {0: "unfinished", 3: "selected_prev"}
    s = w.tasks[0].algorithm.summary()["fedumf"]
    assert s["updates_fused"] == 0 and s["updates_lost_unfinished"] == 1
    assert s["updates_lost_superseded"] == 2          # clients 1, 2: unselected again, still running


def one_fused_step_run(slow_step: float, slow_network=None):
    """The `partial` scenario of two groups with 2 local steps, run; and theta after round 3
    computed by hand when client 3 fuses ONE completed step of its round-1 job into round 2."""
    a, c = random_problem(4, 2, 5)
    sc = two_group_scenario("partial", slow_step=slow_step)
    sc["protocol"]["local_steps"] = 2
    if slow_network is not None:
        sc["clients"]["groups"][1]["network"] = slow_network
    w = run_world(sc)
    grads, eta = grads_of(a, c), 0.1

    def steps(x, i, k):
        for _ in range(k):
            x = x - eta * grads[i](x)
        return x
    th1 = np.zeros(2)
    th2 = np.mean([steps(th1, 0, 2), steps(th1, 1, 2)], 0)
    g3 = steps(th1, 3, 1) - th1                                   # one of its two steps
    th3 = steps(th2 + g3, 3, 2)
    g0 = steps(th2, 0, 2) - th2                                   # client 0's round-2 job finished
    th4 = np.mean([steps(th3 + g0, 0, 2), steps(th3, 3, 2)], 0)
    return w, th4


def test_partial_fuses_the_completed_steps():
    """`unfinished: partial`: client 3's round-1 job (2 steps of 2 s) is half done when it is
    selected in round 2; it fuses the displacement of its one completed step."""
    w, th4 = one_fused_step_run(slow_step=2.0)
    np.testing.assert_allclose(w.tasks[0].algorithm.x.numpy(), th4, rtol=1e-12)
    cl = w.recorder.clients_frame()
    r1 = cl[(cl["round"] == 1) & (cl["client"] == 3)].iloc[0]
    assert r1["background_stop"] == "partial" and r1["steps"] == 1 and r1["trained"]
    assert cl[(cl["round"] == 2) & (cl["client"] == 3)].iloc[0]["fuse_skipped"] == "none"


def test_partial_counts_the_steps_done_since_the_download_ended():
    """`partial` counts the computation's elapsed time from the end of its download, not its
    start: client 3 (a 1 s link) downloads theta_1 in the background until 1.01 s and computes
    2 steps of 1 s; selected at round 2's start (2.02 s: the fast clients' 2 steps and
    transfers), it has done floor(2 x 1.01 / 2) = 1 step, and fuses that one step (counted
    from the download's start, 2.02 s would make it 2)."""
    w, th4 = one_fused_step_run(slow_step=1.0, slow_network={"latency": 1.0, "up_mbps": 1000, "down_mbps": 1000})
    np.testing.assert_allclose(w.tasks[0].algorithm.x.numpy(), th4, rtol=1e-12)
    cl = w.recorder.clients_frame().set_index(["round", "client"])
    assert cl.loc[(1, 3), "background_stop"] == "partial" and cl.loc[(1, 3), "steps"] == 1
    assert cl.loc[(1, 3), "comm_time"] == pytest.approx(1.0 + 6.4e-8, rel=1e-12)
    assert w.recorder.metrics[1]["virtual_time"] == pytest.approx(2.02 + 2 * 6.4e-8, rel=1e-12)


def test_background_work_lost_to_going_offline(run_in):
    """Continuous-time availability: background jobs cut by going offline keep nothing
    (background_stop offline); the run's invariants hold and its summary counts them."""
    sc = digits_scenario("fedumf", alpha=1.0)
    sc["run"]["rounds"] = 12
    sc["clients"]["groups"][0]["availability"] = {"model": "markov_time", "mean_on": 2.0, "mean_off": 0.5}
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    s = res.summary["fedumf"]
    assert s["updates_lost_offline"] == int((c["background_stop"] == "offline").sum()) > 0
    assert (c.loc[c["background_stop"] == "offline", "weight"] == 0).all()
    assert res.summary["grad_steps_skipped"] > 0


@pytest.mark.slow
def test_cifar_resnet18_scenario_runs_on_a_users_npz(tmp_path, run_in):
    """Table 3 (Table 4 differs in partition and alpha only) runs through the .npz file loader
    (a small CIFAR-shaped file written here), ResNet-18 with BatchNorm, a few steps."""
    table = "fedumf_cifar_table3"
    f = tmp_path / "cifar.npz"
    rng = np.random.default_rng(1)
    np.savez(f, x_train=rng.integers(0, 255, (40, 32, 32, 3), dtype=np.uint8), y_train=np.arange(40) % 10,
             x_test=rng.integers(0, 255, (20, 32, 32, 3), dtype=np.uint8), y_test=np.arange(20) % 10)
    sc = scenario.load(f"scenarios/papers/{table}.yaml", [f"workload.dataset.path={f}", "clients.count=2",
                                                          "protocol.select.k=1", "run.rounds=2", "run.eval_every=1"])
    res = run_in(scenario.dump(sc))
    s = res.summary
    assert s["status"] == "complete" and s["rounds"] == 2 and s["params"] == 11_173_962
    assert s["fedumf"]["updates_kept"] >= 1 and (res.run_dir / "buffers.npy").exists()
    assert res.metrics["test_acc"].notna().all()


@pytest.mark.parametrize("age, fused", [(1, False), (2, True)])
def test_max_fusion_age_bounds_the_age_of_a_fused_update(tmp_path, run_in, age, fused):
    """Client 1 is unselected in round 1 (it trains in the background and keeps g_1),
    offline in round 2 (no g_2), selected in round 3: its kept g is two rounds old. The
    default `max_fusion_age: 1` must not fuse it (clients.csv: fused 0, reason offline);
    `max_fusion_age: 2` fuses it (and only client 1 fuses, once)."""
    sc = quad([[1.0, 2.0], [2.0, 1.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 1.0], [2.0, 3.0]], K=2, lr=0.1,
              rounds=3, select={"model": "sequence", "sets": [[0, 2], [0, 2], [1, 2]]}, max_fusion_age=age)
    trace = tmp_path / "avail.csv"
    trace.write_text("round,client,available\n" + "".join(
        f"{r},{c},{0 if (r, c) == (2, 1) else 1}\n" for r in range(1, 4) for c in range(3)))
    sc["clients"]["groups"][0]["availability"] = {"model": "round_trace", "path": str(trace), "repeat": False}
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv").set_index(["round", "client"])
    assert not c.loc[(2, 1), "available"] and c.loc[(1, 1), "compute_time"] > 0
    assert c.loc[(3, 1), "selected"] and c.loc[(3, 1), "fused"] == int(fused)
    assert c.loc[(3, 1), "fuse_skipped"] == ("none" if fused else "offline")
    assert c.loc[c["selected"], "fused"].sum() == int(fused)
