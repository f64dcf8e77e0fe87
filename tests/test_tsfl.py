"""T-SFL (shared/specs/tsfl.md section 9): the reference functions, DMS statistics, interval
arithmetic through the emulator, FedAsync rules, and equivalences on the quadratic."""
import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch

from emulator.algorithms import tsfl as T
from emulator.algorithms.base import AlgoContext, Arrival, sample_weights
from emulator.algorithms.fedasync import FedAsync, staleness_weight
from emulator import scenario
from conftest import tiny, quadratic_scenario


# --------------------------------------------------------------------------- T1-T5, T18, T19
def test_t1_heterogeneity_degree():
    assert T.heterogeneity_degree([1] * 10 + [4] * 10) == 2.25
    assert T.heterogeneity_degree([1, 2, 3, 4] * 5) == 1.25
    assert T.heterogeneity_degree([3] * 7) == 0


def test_t2_filter_probabilities():
    K, H, P = T.dms_filter_probs([1, 1, 2, 2, 3, 3, 4, 4])
    assert (K, H) == (2.5, 4) and np.allclose(P, [.375, .375, .125, .125, 0, 0, 0, 0], atol=1e-12)
    K, H, P = T.dms_filter_probs([1, 2, 3, 6])
    assert (K, H) == (3, 6) and np.allclose(P, [1 / 3, 1 / 6, 0, 0], atol=1e-12)


def dms_weights(tau, beta, s):
    tau, beta = np.asarray(tau, float), np.asarray(beta, bool)
    rho = np.zeros(len(tau))
    rho[beta] = T.waterfill(tau[beta], s)
    return rho


def test_t3_dms_weights():
    rho = dms_weights([1, 1, 2, 2, 3, 3, 4, 4], [0, 1, 1, 0, 1, 1, 1, 1], 0.02)
    assert np.allclose(rho, [0, .13, .15, 0, .17, .17, .19, .19], atol=1e-12)


def test_t4_slope():
    assert T.slope(0.005, 4, 2, 0.5, 20, 4) == pytest.approx(0.006, abs=1e-15)
    assert T.slope(0.005, 4, 2, 0.5, 20, 1) == 0 and T.slope(0.005, 4, 2, 0.5, 20, 0) == 0


def test_t5_waterfill():
    assert np.allclose(T.waterfill([1, 2, 4, 5], 0.1), [.05, .15, .35, .45], atol=1e-12)
    assert np.allclose(T.waterfill([1, 2, 4, 5], 0.15), [0, 1 / 12, 23 / 60, 8 / 15], atol=1e-12)
    assert np.allclose(T.waterfill([0, 4, 4, 4], 0.2), [0, 1 / 3, 1 / 3, 1 / 3], atol=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(1000):
        n = int(rng.integers(1, 12))
        tau, s = rng.integers(0, 9, n), rng.uniform(0, 1)
        rho = T.waterfill(tau, s)
        assert (rho >= 0).all() and abs(rho.sum() - 1) < 1e-12
        pos = np.flatnonzero(rho > 0)
        for i in pos:
            for j in pos:
                assert abs((rho[i] - rho[j]) - s * (tau[i] - tau[j])) < 1e-12


def test_t18_fedavg_weights():
    arr = [Arrival(i, 0, None, n, 1, 0.0) for i, n in enumerate([512, 1024, 1536])]
    assert np.allclose(sample_weights(arr, "samples"), [1 / 6, 1 / 3, 1 / 2])


# --------------------------------------------------------------------------- DMS through its class
def make_dms(seed=0, **kw):
    p = scenario.member("algorithm", "dms", lr=0.1, constants={"mode": "proportional"}, **kw)
    ctx = AlgoContext(0, 2, 4, np.ones(4), torch.zeros(2, dtype=torch.float64), np.random.default_rng(seed))
    return T.DMS(p, ctx)


def cands(tau):
    return [Arrival(i, 0, None, 10, 1, 0.0, meta={"tau": int(t)}) for i, t in enumerate(tau)]


def test_t6_bernoulli_frequencies():
    dms = make_dms()
    tau = [1, 2, 3, 6]
    n = 50_000
    kept = np.zeros(4)
    for _ in range(n):
        kept[dms.reads(0, cands(tau))] += 1
    drop = 1 - kept / n
    for i, p in ((0, 1 / 3), (1, 1 / 6)):
        assert abs(drop[i] - p) < 4.5 * math.sqrt(p * (1 - p) / n)
    assert drop[2] == 0 and drop[3] == 0
    # Case 1 over 20,000 intervals: keep(tau = 1) = 0.625, mean |S| = 16.25
    dms = make_dms(1)
    tau = [1] * 10 + [4] * 10
    S = [dms.reads(0, cands(tau)) for _ in range(20_000)]
    keep1 = np.mean([sum(1 for c in s if c < 10) / 10 for s in S])
    assert abs(keep1 - 0.625) < 0.005 and abs(np.mean([len(s) for s in S]) - 16.25) < 0.05


def test_t7_survivors_never_empty():
    dms = make_dms(2)
    rng = np.random.default_rng(3)
    for _ in range(10_000):
        tau = rng.integers(0, 7, 20)
        K, H, P = T.dms_filter_probs(tau)
        assert (P >= 0).all() and (P < 1).all()
        S = dms.reads(0, cands(tau))
        assert S and int(np.argmax(tau)) in S


def test_t19_zero_tau_modes():
    K, H, P = T.dms_filter_probs([0, 2, 4])
    assert (K, H) == (2, 4) and np.allclose(P, [0.5, 0, 0])
    dms = make_dms(4, zero_tau="exclude")
    assert all(0 not in dms.reads(0, cands([0, 2, 4])) for _ in range(200))


def test_t12_case3_keep_rates():
    """Case 3 tau process (iterations model, std reading) through DMS: keep rates per group."""
    from devices.compute import IterationsCompute
    groups = [IterationsCompute(mean=m, std=s) for m, s in ((2, .4), (3, .6), (4, .8), (5, 1.0))]
    rng = np.random.default_rng(5)
    dms = make_dms(6)
    kept = np.zeros(4)
    n = 20_000
    for r in range(n):
        tau = [groups[i // 5].iterations(i, r, rng) for i in range(20)]
        for c in dms.reads(0, cands(tau)):
            kept[c // 5] += 1
    assert np.allclose(kept / (5 * n), [0.734, 0.899, 0.978, 0.995], atol=0.01)


# --------------------------------------------------------------------------- FedAsync rules
def test_t13_fedasync_footnote_rule():
    p = scenario.member("algorithm", "fedasync_interval", lr=0.1, gamma=0.5)
    alg = T.FedAsyncInterval(p, AlgoContext(0, 2, 2, np.ones(2), torch.tensor([0.0, 2.0]), None))
    alg.aggregate(1, [Arrival(0, 1, [torch.tensor([2.0, 2.0])], 1, 1, 0.0),
                      Arrival(1, 1, [torch.tensor([4.0, 6.0])], 1, 1, 0.0)])
    assert torch.allclose(alg.x, torch.tensor([1.5, 3.0]))


def test_t14_fedasync_staleness_and_mixing():
    assert staleness_weight(5, "constant") == 1
    assert staleness_weight(0, "polynomial", 0.5) == 1
    assert staleness_weight(1, "polynomial", 0.5) == pytest.approx(0.70711, abs=1e-5)
    assert staleness_weight(3, "polynomial", 0.5) == pytest.approx(0.5)
    assert staleness_weight(8, "polynomial", 0.5) == pytest.approx(1 / 3)
    assert staleness_weight(4, "hinge", 10, 4) == 1
    assert staleness_weight(5, "hinge", 10, 4) == pytest.approx(1 / 11)
    assert staleness_weight(6, "hinge", 10, 4) == pytest.approx(1 / 21)

    def alg(offset=0, **kw):
        p = scenario.member("algorithm", "fedasync", lr=0.1, alpha=0.6, staleness_offset=offset, **kw)
        return FedAsync(p, AlgoContext(0, 1, 2, np.ones(2), torch.zeros(1), None))

    a = alg()
    a.version = 3
    a.aggregate(4, [Arrival(0, 0, [torch.tensor([1.0])], 1, 1, 0.0)])       # k = 3, s = 0.5 -> alpha_k 0.3
    assert torch.allclose(a.x, torch.tensor([0.3]))
    # bookkeeping: A and B download at v = 0, B arrives first (k = 0), then A (k = 1)
    for off, expect in ((0, (0, 1)), (1, (1, 2))):
        a = alg(off)
        ws = []
        for c in (1, 0):
            w = a.aggregate(0, [Arrival(c, 0, [torch.tensor([1.0])], 1, 1, 0.0)])
            ws.append(a.round_info["staleness"])
        assert tuple(ws) == expect


def test_fedbuff_buffer_closed_forms():
    """FedAsync (buffer 1) and the FedBuff-style buffer on hand-made arrivals, against the
    module docstring's formulas worked by hand."""
    def alg(**kw):
        p = scenario.member("algorithm", "fedasync", lr=0.1, alpha=0.6, **kw)
        return FedAsync(p, AlgoContext(0, 1, 2, np.ones(2), torch.zeros(1), None))

    def arrive(a, client, round_, value):
        if a.p.buffer_mode == "delta":
            a.broadcast(a.version)                   # the download the arrival trained from
        return a.aggregate(0, [Arrival(client, round_, [torch.tensor([value])], 1, 1, 0.0)])

    # buffer 1, polynomial s(k) = (k + 1)^-1/2: x <- (1 - 0.6 s) x + 0.6 s x_new, in order
    a = alg()
    x = 0.0
    for c, (r, v) in enumerate([(0, 1.0), (0, 2.0), (1, -1.0)]):     # staleness 0, 1, 1
        k = a.version - r
        al = 0.6 * (k + 1) ** -0.5
        x = (1 - al) * x + al * v
        arrive(a, c, r, v)
        assert float(a.x) == pytest.approx(x, abs=1e-6)
    assert a.version == 3

    # delta mode, K = 1, server_lr = alpha, fresh arrivals: exactly FedAsync
    f, d = alg(staleness={"function": "constant"}), alg(staleness={"function": "constant"},
                                                        buffer_mode="delta", server_lr=0.6)
    for c, v in enumerate([1.0, 3.0, -2.0]):
        arrive(f, c, f.version, v)
        arrive(d, c, d.version, v)
        assert float(d.x) == pytest.approx(float(f.x), abs=1e-6)

    # buffer 2, model mode: x <- x + (1/2) sum 0.6 s(k_i) (x_i - x), applied at the 2nd arrival
    b = alg(buffer=2, staleness={"function": "constant"})
    arrive(b, 0, 0, 1.0)
    assert float(b.x) == 0.0 and b.version == 0
    arrive(b, 1, 0, 3.0)
    assert float(b.x) == pytest.approx(0.5 * (0.6 * 1 + 0.6 * 3), abs=1e-6) and b.version == 1

    # delta mode with a stale arrival: its own update against the model it downloaded
    e = alg(buffer_mode="delta", server_lr=1.0, staleness={"function": "constant"})
    e.broadcast(0)                                        # client 0 downloads x_0 = 0
    arrive(e, 1, 0, 2.0)                                  # client 1: x <- 0 + (2 - 0) = 2
    e.aggregate(0, [Arrival(0, 0, [torch.tensor([1.0])], 1, 1, 0.0)])   # stale: x <- 2 + (1 - 0)
    assert float(e.x) == pytest.approx(3.0) and e.version == 2


def test_fedbuff_buffer_through_the_async_protocol(run_in):
    base = tiny(**{"run.rounds": 12})
    base["protocol"] = {"name": "async", "local_steps": 3}
    base["clients"]["groups"] = [
        {"name": "a", "count": 3, "compute": {"model": "constant", "step_time": 0.1}, "network": "instant"},
        {"name": "b", "count": 3, "compute": {"model": "constant", "step_time": 0.35}, "network": "instant"}]
    a = copy.deepcopy(base)
    a["algorithm"] = {"name": "fedasync", "lr": 0.1, "staleness": {"function": "constant"}}
    c = copy.deepcopy(a)
    c["algorithm"]["buffer"] = 3
    ra, rc = run_in(a, "a"), run_in(c, "c")
    # a real buffer changes the trajectory; 12 merges / 3 per update = 4 versions
    assert not np.array_equal(np.load(ra.run_dir / "model.npy"), np.load(rc.run_dir / "model.npy"))
    assert ra.metrics["version"].max() == 12 and rc.metrics["version"].max() == 4


def test_t17_fedprox_step():
    from emulator.compute.executor import sgd_update
    from emulator.compute.jobs import LocalRule
    rule = LocalRule(lr=0.1, prox_mu=0.5)
    w, anchor = torch.tensor([1.0]), torch.tensor([1.0])
    w, _ = sgd_update(w, 2 * w, None, rule, 0, anchor, None)
    assert torch.allclose(w, torch.tensor([0.8]))
    w, _ = sgd_update(w, 2 * w, None, rule, 1, anchor, None)
    assert torch.allclose(w, torch.tensor([0.65]))


# --------------------------------------------------------------------------- through the emulator
def interval_scenario(groups, algo="dms", rounds=3, interval=1.0, **proto):
    sc = tiny(**{"run.rounds": rounds})
    sc["protocol"] = {"name": "intervals", "interval": interval, "iteration": "batch", **proto}
    sc["algorithm"] = {"name": algo, "lr": 0.1}
    if algo in ("dms", "tsfl_optimal"):
        sc["algorithm"]["constants"] = {"mode": "proportional"}
    sc["clients"]["count"] = sum(g["count"] for g in groups)
    sc["clients"]["groups"] = groups
    return sc


def link_for(d, u, nbytes=2600, latency=0.25):
    """A link on which a message of `nbytes` takes d down and u up (latency 0.25 s)."""
    bits = nbytes * 8
    return {"latency": latency, "down_mbps": bits / (d - latency) / 1e6, "up_mbps": bits / (u - latency) / 1e6}


def test_t11_interval_arithmetic(run_in):
    groups = [
        {"name": "a", "count": 1, "compute": {"model": "constant", "step_time": 2.0}, "network": link_for(0.5, 1.0)},
        {"name": "b", "count": 1, "compute": {"model": "constant", "step_time": 1.0}, "network": link_for(6.0, 5.0)},
        {"name": "c", "count": 1, "compute": {"model": "constant", "step_time": 3.0}, "network": link_for(4.0, 4.0)},
    ]
    res = run_in(interval_scenario(groups, "fedavg", rounds=2, interval=10.0))
    c = pd.read_csv(res.run_dir / "clients.csv", keep_default_na=False)
    r1 = c[c["round"] == 1].set_index("client")
    # a: tau = 4, upload lands at 0.5 + 8 + 1 = 9.5
    assert r1.loc[0, "steps"] == 4 and r1.loc[0, "compute_time"] == pytest.approx(8.0)
    assert r1.loc[0, "comm_time"] == pytest.approx(1.5) and r1.loc[0, "weight"] > 0
    # b: d + u = 11 > 10: not delivered, tau = 0, weight 0
    assert r1.loc[1, "drop_reason"] == "undeliverable" and r1.loc[1, "weight"] == 0 and r1.loc[1, "steps"] == 0
    # c: d = u = 4, c = 3: tau = 0 but delivered: uploads w^t and is weighted (FedAvg: by samples)
    assert r1.loc[2, "steps"] == 0 and not r1.loc[2, "dropped"] and r1.loc[2, "weight"] > 0
    assert abs(r1["weight"].sum() - 1) < 1e-12
    assert res.metrics["virtual_time"].tolist() == [0, 10, 20]


def test_t15_min_iterations_filter(run_in):
    groups = [{"name": f"g{i}", "count": 1, "compute": {"model": "iterations", "fixed": t}, "network": "instant"}
              for i, t in enumerate([1, 2, 3, 5])]
    res = run_in(interval_scenario(groups, "dms", rounds=2, min_iterations=2))
    c = pd.read_csv(res.run_dir / "clients.csv")
    r1 = c[c["round"] == 1].set_index("client")
    assert list(r1["drop_reason"].fillna("")) == ["min_iterations", "min_iterations", "", ""]
    assert np.allclose(r1.loc[[2, 3], "dms_p"], [0.2, 0.0])     # K = 4, H = 5 over U = {2, 3}
    m = res.metrics.set_index("round")
    assert m.loc[1, "K"] == 4 and m.loc[1, "H"] == 5
    # the filtered clients' work is never computed
    assert res.summary["grad_steps_computed"] <= 2 * (3 + 5)
    # m = 4 with tau = [1, 2, 3, 4]: nobody uploads, w^{t+1} = w^t
    groups[3]["compute"]["fixed"] = 4
    res = run_in(interval_scenario(groups, "dms", rounds=2, min_iterations=4), "empty")
    assert np.allclose(res.metrics["test_loss"], res.metrics["test_loss"].iloc[0])
    assert res.summary["grad_steps_computed"] == 0


def quad_intervals(algo, taus, rounds=6, **kw):
    sc = quadratic_scenario(n=len(taus), rounds=rounds, lr=0.1)
    sc["protocol"] = {"name": "intervals", "interval": 1.0, "iteration": "batch"}
    sc["clients"]["groups"] = [{"name": f"g{i}", "count": 1, "compute": {"model": "iterations", "fixed": t},
                                "network": "instant"} for i, t in enumerate(taus)]
    sc["algorithm"] = {"name": algo, "lr": 0.1, **kw}
    return sc


def test_t8_equal_tau_equivalences(run_in):
    E = 3
    runs = {}
    for algo, kw in (("dms", {"constants": {"mode": "proportional"}}), ("tsfl_optimal", {"constants": {"mode": "proportional"}}),
                     ("fedavg", {})):
        runs[algo] = run_in(quad_intervals(algo, [E] * 5, **kw), algo)
    sfl = quadratic_scenario(n=5, rounds=6, steps=E, lr=0.1)
    runs["sfl"] = run_in(sfl, "sfl")
    ref = runs["sfl"].metrics["test_loss"].to_numpy()
    for name, r in runs.items():
        np.testing.assert_allclose(r.metrics["test_loss"].to_numpy(), ref, rtol=1e-12)
    c = pd.read_csv(runs["dms"].run_dir / "clients.csv")
    assert (c["dms_beta"] == 1).all() and np.allclose(c["weight"], 1 / 5)
    # all tau = 0 -> w^{t+1} = w^t exactly
    r0 = run_in(quad_intervals("dms", [0] * 5, constants={"mode": "proportional"}), "zero")
    assert (r0.metrics["test_loss"] == r0.metrics["test_loss"].iloc[0]).all()


def test_t10_aggregation_identity(run_in):
    """sum rho_i w_i^t = w^t - eta sum_i rho_i sum_h grad F_i(w_{i,h}^t), with the emulator's
    recorded weights, for DMS and FedAvg weights (float64, exact gradients)."""
    from emulator.workloads.datasets import quadratic_problem
    taus = [1, 2, 2, 4, 5]
    for algo, kw in (("dms", {"constants": {"mode": "proportional"}}), ("fedavg", {})):
        res = run_in(quad_intervals(algo, taus, rounds=1, **kw), algo)
        c = pd.read_csv(res.run_dir / "clients.csv")
        rho = c.sort_values("client")["weight"].to_numpy()
        A, b, _, _, _ = quadratic_problem(5, 4, 0.01)
        w0 = np.zeros(A.shape[1])
        step = np.zeros_like(w0)
        for i, t in enumerate(taus):
            v = w0.copy()
            g_sum = np.zeros_like(w0)
            for _ in range(t):
                g = A[i] @ v - b[i] + 0.01 * v
                g_sum += g
                v = v - 0.1 * g
            step += rho[i] * g_sum
        np.testing.assert_allclose(np.load(res.run_dir / "model.npy"), w0 - 0.1 * step, rtol=1e-6, atol=1e-7)
        assert abs(rho.sum() - 1) < 1e-12


def test_t16_theorem4_corrected_bound():
    """Identical quadratic clients F = 1/2 w'Aw, A = diag(linspace(.5, 4, 10)), N = 20,
    tau ~ U{1..5}, DMS with s = 0.01: (1/T) sum ||grad F(w^t)||^2 <= 2 F(w^0) / (T eta (2 - eta L))."""
    A = np.diag(np.linspace(0.5, 4, 10))
    L = 4.0
    rng = np.random.default_rng(0)
    for eta in (0.1, 0.3, 0.45):
        for Tn in (5, 20, 100):
            w = np.ones(10)
            F0 = 0.5 * w @ A @ w
            tot = 0.0
            for _ in range(Tn):
                tot += float(np.sum((A @ w) ** 2))
                tau = rng.integers(1, 6, 20)
                K, H, P = T.dms_filter_probs(tau)
                beta = rng.random(20) >= P
                rho = dms_weights(tau, beta, 0.01)
                locals_ = []
                for t in tau:
                    v = w.copy()
                    for _ in range(t):
                        v = v - eta * (A @ v)
                    locals_.append(v)
                w = np.sum(rho[:, None] * np.array(locals_), axis=0)
            assert tot / Tn <= 2 * F0 / (Tn * eta * (2 - eta * L)) + 1e-12


def test_t22_records_and_laziness(run_in):
    groups = [{"name": "a", "count": 5, "compute": {"model": "iterations", "fixed": 1}, "network": "instant"},
              {"name": "b", "count": 5, "compute": {"model": "iterations", "fixed": 4}, "network": "instant"}]
    res = run_in(interval_scenario(groups, "dms", rounds=8))
    c = pd.read_csv(res.run_dir / "clients.csv")
    for r, g in c.groupby("round"):
        assert abs(g["weight"].sum() - 1) < 1e-12
        assert ((g["weight"] == 0) == ((g["dms_beta"] == 0) | g["dropped"])).all()
    # the clients DMS filtered out were never trained for real
    filtered_steps = int(c.loc[c["dms_beta"] == 0, "steps"].sum())
    assert filtered_steps > 0
    assert res.summary["grad_steps_skipped"] == filtered_steps


def test_t9_theorem2_consistency():
    rho = T.theorem2_weights([1, 2, 3, 4, 4], eta=0.01, L=3, theta=1, G2=2, sigma2=0.5, N=5, H=4,
                             Gamma=0.3, D=1.7, F_hat=0.9)
    s = T.slope(0.01, 3, 2, 0.5, 5, 4)
    assert np.allclose(np.diff(rho), [0.036, 0.036, 0.036, 0], atol=1e-12)
    assert np.allclose(np.diff(rho), s * np.diff([1, 2, 3, 4, 4]), atol=1e-12)


def test_t21_model_sizes():
    from emulator.workloads import models as M
    count = lambda name, shape: M.count_params(M.__dict__[name](None, M.ModelContext(shape, 10)))  # noqa: E731
    assert M.count_params(M.cnn_mnist(scenario.member("model", "cnn_mnist"), M.ModelContext((1, 28, 28), 10))) == 21_840
    assert count("vgg11", (3, 32, 32)) == 9_231_114
    assert count("cnn_fmnist", (1, 28, 28)) == 297_962
    assert count("resnet18", (3, 32, 32)) == 11_173_962


def test_batchnorm_models_are_refused_clearly():
    from emulator.compute.flat import FlatModel
    from emulator.workloads import models as M
    with pytest.raises(ValueError, match="BatchNorm"):
        FlatModel(M.vgg11(None, M.ModelContext((3, 32, 32), 10)), torch.device("cpu"), torch.float32)


# --------------------------------------------------------------------------- Case 3 (tsfl.md 6.3)
def case3_scenario(rounds=40, redraw="per_interval", algo="fedavg"):
    """Case 3 on digits, scaled: pools 30..90 (client i mod 5), per-interval sizes
    floor(N(m_g, s_g)), tau quarters floor(N(2,.4)) ... floor(N(5,1))."""
    sc = tiny(**{"run.rounds": rounds, "run.eval_every": rounds})
    sc["workload"]["partition"] = {"name": "dirichlet", "alpha": 0.5, "sizes": {"pattern": [30, 45, 60, 75, 90]}}
    sc["workload"]["batch_size"] = 8
    sc["clients"] = {"count": 20, "groups": [
        {"name": f"tau{m}", "count": 5, "compute": {"model": "iterations", "mean": m, "std": 0.2 * m},
         "network": "instant"} for m in (2, 3, 4, 5)]}
    sc["protocol"] = {"name": "intervals", "interval": 1.0, "iteration": "epoch",
                      "data_sizes": {"mean": [19, 28, 38, 47, 57], "std": [3.7, 5.5, 7.4, 9.2, 11.1],
                                     "redraw": redraw}}
    sc["algorithm"] = {"name": algo, "lr": 0.05}
    return sc


def test_case3_time_varying_data_and_tau(run_in):
    res = run_in(case3_scenario())
    c = pd.read_csv(res.run_dir / "clients.csv")
    c = c[c["round"] > 0]
    pools = np.array([30, 45, 60, 75, 90])
    g = c["client"] % 5
    assert (c["n_samples"] >= 1).all() and (c["n_samples"] <= pools[g]).all()
    # the floor lowers each mean by ~0.5; 4 clients per group x 40 intervals
    means = c.groupby(g)["n_samples"].mean().to_numpy()
    assert np.allclose(means, np.array([19, 28, 38, 47, 57]) - 0.5, atol=1.5), means
    sizes = c.pivot(index="round", columns="client", values="n_samples")
    assert sizes.nunique().min() > 3                      # redrawn every interval
    # an epoch is a pass over this interval's subset: sgd_steps = tau * ceil(n / B)
    assert (c["sgd_steps"] == c["steps"] * np.ceil(c["n_samples"] / 8)).all()
    # FedAvg weighs by |D_i^t| (T-SFL fn. 3)
    for _, r in c.groupby("round"):
        up = r[r["weight"] > 0]
        assert np.allclose(up["weight"], up["n_samples"] / up["n_samples"].sum())
    # tau quarters: means 1.5, 2.5, 3.5, 4.5 after the floor; delta ~ 1.85 (tsfl.md 6.3)
    taus = c.groupby(c["client"] // 5)["steps"].mean().to_numpy()
    assert np.allclose(taus, [1.5, 2.5, 3.5, 4.5], atol=0.25), taus
    delta = res.metrics["heterogeneity"].dropna().mean()
    assert 1.5 < delta < 2.2, delta
    # once: one subset for the whole run
    res = run_in(case3_scenario(rounds=5, redraw="once"), "once")
    c = pd.read_csv(res.run_dir / "clients.csv")
    c = c[c["round"] > 0]
    assert (c.groupby("client")["n_samples"].nunique() == 1).all()
