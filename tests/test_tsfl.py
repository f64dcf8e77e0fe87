"""T-SFL (docs/algorithms/tsfl.md section 9): the reference functions, DMS statistics, interval
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
from emulator.scenario import schema as scenario
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
def make_dms(seed=0, n_clients=4, constants=None, **kw):
    p = scenario.member("algorithm", "dms", lr=0.1, constants=constants or {"mode": "proportional"}, **kw)
    ctx = AlgoContext(0, 2, n_clients, np.ones(n_clients), torch.zeros(2, dtype=torch.float64),
                      np.random.default_rng(seed))
    return T.DMS(p, ctx)


def cands(tau, ids=None, vectors=False):
    """Candidate arrivals (client ids default 0..n-1, in the given order); with `vectors`,
    client i uploads the float64 vector [i, 1] so an aggregate can run."""
    ids = range(len(tau)) if ids is None else ids
    return [Arrival(int(i), 0, [torch.tensor([float(i), 1.0], dtype=torch.float64)] if vectors else None,
                    10, 1, 0.0, meta={"tau": int(t)}) for i, t in zip(ids, tau)]


def within(x, p, n, k=4.5):
    """|x - p| within k binomial standard errors sqrt(p (1 - p) / n)."""
    return abs(x - p) <= k * math.sqrt(p * (1 - p) / n)


@pytest.mark.slow
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
    assert within(keep1, 0.625, 10 * len(S)) and all(set(range(10, 20)) <= set(s) for s in S)


@pytest.mark.slow
def test_t6_case2_keep_rates():
    """Case 2 (quarters tau = 1, 2, 3, 4): K = 2.5, H = 4, P = .375, .125, 0, 0, so the keep
    rates are 0.625 / 0.875 / 1 / 1 and E|S| = 17.5 (docs/algorithms/tsfl.md 4.2 facts, T6). 40,000
    intervals = 200,000 draws per quarter: the 0.005 tolerance is >= 4.6 standard errors,
    the 0.05 on the mean |S| (sd sqrt(1.71875)) about 7.6."""
    dms = make_dms(7, n_clients=20)
    tau = [1] * 5 + [2] * 5 + [3] * 5 + [4] * 5
    arr = cands(tau)
    n = 40_000
    kept, sizes = np.zeros(20), np.zeros(n)
    for r in range(n):
        S = dms.reads(r, arr)
        kept[S] += 1
        sizes[r] = len(S)
    keep = kept.reshape(4, 5).sum(1) / (5 * n)
    for g, p in enumerate((0.625, 0.875, 1.0, 1.0)):
        assert abs(keep[g] - p) < 0.005, (g, keep[g])
        assert within(keep[g], p, 5 * n), (g, keep[g])
    assert keep[2] == 1 and keep[3] == 1                      # tau >= K: never dropped, exactly
    var_S = 5 * 0.375 * 0.625 + 5 * 0.125 * 0.875              # sum of the Bernoulli variances
    assert abs(sizes.mean() - 17.5) < 0.05
    assert abs(sizes.mean() - 17.5) <= 4.5 * math.sqrt(var_S / n)
    assert sizes.var() == pytest.approx(var_S, rel=0.05)


@pytest.mark.slow
def test_t7_survivors_never_empty():
    dms = make_dms(2)
    rng = np.random.default_rng(3)
    for _ in range(10_000):
        tau = rng.integers(0, 7, 20)
        K, H, P = T.dms_filter_probs(tau)
        assert (P >= 0).all() and (P < 1).all()
        S = dms.reads(0, cands(tau))
        assert S and int(np.argmax(tau)) in S


@pytest.mark.parametrize("zero_tau", ["include", "exclude"])
def test_t7_one_uniform_per_candidate_in_id_order(zero_tau):
    """D4 / A12: per interval the algorithm stream gives exactly n_U uniforms, one per
    candidate in ascending client id (whatever the arrival order), drawn even when every P
    is 0 or the client is excluded; u < P drops. After each interval (reads + aggregate) the
    stream's state equals a fresh generator from the same seed advanced by rng.random(n_U)
    per interval; the survivors and weights follow from those uniforms."""
    seed = 12
    dms = make_dms(seed, n_clients=40, zero_tau=zero_tau)
    ref = np.random.default_rng(seed)
    pick = np.random.default_rng(13)
    cases = [[3] * 6, [0] * 4, [5], [0, 0, 7]]               # all P = 0, H = 0, n_U = 1, zeros
    cases += [list(pick.integers(0, 7, int(pick.integers(1, 21)))) for _ in range(300)]
    for t, tau in enumerate(cases):
        ids = pick.choice(40, len(tau), replace=False)
        order = pick.permutation(len(tau))                    # arrival order is not id order
        arr = cands(np.asarray(tau)[order], ids[order], vectors=True)
        S = dms.reads(t, arr)
        agg = dms.aggregate(t, arr)
        rho = agg.weights
        srt = np.argsort(ids)
        sid, stau = ids[srt], np.asarray(tau, np.int64)[srt]
        u = ref.random(len(tau))                              # exactly n_U uniforms
        assert dms.ctx.rng.bit_generator.state == ref.bit_generator.state, t
        K, H, P = T.dms_filter_probs(stau)
        beta = u >= P
        if zero_tau == "exclude":
            beta &= stau > 0
        assert S == [int(c) for c in sid[beta]], t
        assert np.array_equal([agg.client_cols["dms_beta"][int(c)] for c in sid], beta.astype(int))
        got = np.array([rho[int(c)] for c in sid])
        if beta.any():
            s = 1.0 / stau[beta].sum() if stau[beta].sum() > 0 else 0.0      # proportional mode
            np.testing.assert_allclose(got, dms_weights(stau, beta, s), atol=1e-12)
        else:
            assert zero_tau == "exclude" and (got == 0).all()


def test_t19_zero_tau_modes():
    K, H, P = T.dms_filter_probs([0, 2, 4])
    assert (K, H) == (2, 4) and np.allclose(P, [0.5, 0, 0])
    dms = make_dms(4, zero_tau="exclude")
    assert all(0 not in dms.reads(0, cands([0, 2, 4])) for _ in range(200))
    # exclude forces beta = 0 on tau = 0 but changes nothing else (docs/algorithms/tsfl.md 4.3, A11): the
    # zero client still counts in K = 2, H = 4, n_U = 3 (inside the slope) and keeps P = 0.5
    fixed = {"mode": "fixed", "L": 4.0, "G2": 2.0, "sigma2": 0.5}
    info = {}
    for mode in ("include", "exclude"):
        dms = make_dms(5, constants=fixed, zero_tau=mode)
        for t in range(50):
            arr = cands([0, 2, 4], vectors=True)
            dms.reads(t, arr)
            agg = dms.aggregate(t, arr)
            rho, ri, ci = agg.weights, agg.round_cols, agg.client_cols
            assert (ri["K"], ri["H"]) == (2, 4)
            assert ri["slope"] == pytest.approx(T.slope(0.1, 4.0, 2.0, 0.5, 3, 4), abs=1e-15)
            assert ci["dms_p"] == {0: 0.5, 1: 0.0, 2: 0.0}
            assert ci["dms_beta"][1] == ci["dms_beta"][2] == 1
            if mode == "exclude":
                assert ci["dms_beta"][0] == 0 and rho[0] == 0 and ri["survivors"] == 2
            info.setdefault(mode, []).append(ci["dms_beta"][0])
    assert 0 < np.mean(info["include"]) < 1                   # include: the zero client is a coin flip


@pytest.mark.slow
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


@pytest.mark.slow
def test_t12_case3_sampler():
    """floor(N(m, s)) of the iterations compute model, std reading (docs/algorithms/tsfl.md 6.3, T12): 100,000
    draws per group. Group 1: P(1) = P(2) = 0.4938 +- 0.007, P(0) = P(3) = 0.0062 +- 0.002; group
    means 1.5, 2.5, 3.5, 4.5 +- 0.015 (= m - 1/2 exactly, by symmetry about an integer). The
    exact probabilities Phi((k + 1 - m)/s) - Phi((k - m)/s) are checked to 4.5 standard errors."""
    from devices.compute import IterationsCompute
    Phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))             # noqa: E731
    n = 100_000
    for g, (m, sd) in enumerate(((2, .4), (3, .6), (4, .8), (5, 1.0))):
        model = IterationsCompute(mean=m, std=sd)
        rng = np.random.default_rng(50 + g)
        tau = np.array([model.iterations(0, r, rng) for r in range(n)])
        assert (tau >= 0).all()
        assert abs(tau.mean() - (m - 0.5)) < 0.015, (g, tau.mean())
        assert abs(tau.mean() - (m - 0.5)) <= 4.5 * tau.std() / math.sqrt(n)
        freq = np.bincount(tau, minlength=12) / n
        for k in range(12):
            p = Phi((k + 1 - m) / sd) - Phi((k - m) / sd)
            assert within(freq[k], p, n) if p > 0 else freq[k] == 0, (g, k, freq[k], p)
        if g == 0:
            assert abs(freq[1] - 0.4938) < 0.007 and abs(freq[2] - 0.4938) < 0.007
            assert abs(freq[0] - 0.0062) < 0.002 and abs(freq[3] - 0.0062) < 0.002
            assert freq[4:].sum() == 0
    # one draw per (client, round), cached: asking again gives the same tau
    model, rng = IterationsCompute(mean=3, std=0.6), np.random.default_rng(0)
    first = [model.iterations(c, 7, rng) for c in range(5)]
    assert [model.iterations(c, 7, rng) for c in range(5)] == first


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
    # the function's defaults are the scenario's (Xie et al.: a = 0.5, hinge threshold b = 4)
    from emulator.algorithms.fedasync import StalenessParams
    d = StalenessParams()
    assert (d.a, d.b) == (0.5, 4.0)
    assert staleness_weight(3, "polynomial") == staleness_weight(3, "polynomial", d.a, d.b) == 0.5
    assert staleness_weight(5, "hinge") == staleness_weight(5, "hinge", d.a, d.b) == 1 / 1.5

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
            ws.append(w.round_cols["staleness"])
        assert tuple(ws) == expect


def test_fedasync_defaults_bounds_and_protocol():
    """FedAsync's documented defaults (Xie et al.: alpha 0.6, rho 0.005, polynomial s with
    a = 0.5; hinge b = 4), the edges its options accept and refuse, and `async` only."""
    from pydantic import ValidationError

    from emulator.errors import ScenarioError
    p = scenario.member("algorithm", "fedasync", lr=0.1)
    assert (p.alpha, p.prox_rho, p.buffer, p.buffer_mode, p.server_lr, p.staleness_offset) == (0.6, 0.005, 1, "model", 1.0, 0)
    assert (p.staleness.function, p.staleness.a, p.staleness.b) == ("polynomial", 0.5, 4.0)
    edge = scenario.member("algorithm", "fedasync", lr=0.1, alpha=1.0, prox_rho=0.0, buffer=1,
                           staleness={"a": 0.5, "b": 0.0})
    assert (edge.alpha, edge.prox_rho, edge.staleness.a, edge.staleness.b) == (1.0, 0.0, 0.5, 0.0)
    for bad in ({"alpha": 1.5}, {"alpha": 0.0}, {"buffer": 0}, {"server_lr": 0.0}, {"staleness": {"a": 0.0}},
                {"staleness": {"b": -1.0}}, {"prox_rho": -0.1}):
        with pytest.raises(ValidationError):
            scenario.member("algorithm", "fedasync", lr=0.1, **bad)
    with pytest.raises(ValidationError, match="lr"):
        scenario.member("algorithm", "fedasync")
    with pytest.raises(ScenarioError, match="fedasync' does not run under protocol.name 'rounds'; it supports: async"):
        scenario.load(tiny(**{"algorithm": {"name": "fedasync", "lr": 0.1}}))


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
    ma, mc = (pd.read_csv(r.run_dir / "metrics.csv").set_index("round") for r in (ra, rc))
    # a merges at 0.3, 0.6, 0.9 (three tied each time), b's three at 1.05. Unbuffered: version
    # = merges so far; staleness = merges since the client's download (b downloaded version 0)
    assert ma.loc[1:, "version"].tolist() == list(range(1, 13))
    assert ma.loc[1:, "staleness"].tolist() == [0, 1, 2, 2, 2, 2, 2, 2, 2, 9, 10, 11]
    # buffer 3: the model (and its version) moves only at every third merge, 12 / 3 = 4 versions
    assert mc.loc[1:, "version"].tolist() == [r // 3 for r in range(1, 13)]
    assert mc.loc[1:, "staleness"].tolist() == [0, 0, 0, 1, 1, 0, 1, 1, 0, 3, 3, 3]
    loss = mc["test_loss"].to_numpy()
    for r in range(12):                  # evaluated after every merge: constant inside a block
        assert (loss[r + 1] == loss[r]) == ((r + 1) % 3 != 0), r
    # the first applied buffer differs from FedAsync's three single merges
    assert loss[3] != ma.loc[3, "test_loss"]
    assert not np.array_equal(np.load(ra.run_dir / "model.npy"), np.load(rc.run_dir / "model.npy"))


def test_async_staleness_of_a_real_run(run_in):
    """Two clients with dyadic cycles: a every 1.0 s, b every 2.25 s (instant network).
    Merges at 1, 2, 2.25 (b), 3, 4, 4.5 (b), 5, 6; staleness = merges since the client's
    download: a's download at 2 saw version 2 and merges at 3 after b's: 1; b's first
    job trained version 0 and lands after two merges: 2. metrics.csv's staleness and
    clients.csv's weight alpha (k + 1)^-1/2 follow; and in general, staleness = merge
    index - 1 - the merges at or before the job's start (merge time - compute - comm)."""
    sc = tiny(**{"run.rounds": 8, "clients.count": 2})
    sc["protocol"] = {"name": "async", "local_steps": 4}
    sc["clients"]["groups"] = [
        {"name": "a", "count": 1, "compute": {"model": "constant", "step_time": 0.25}, "network": "instant"},
        {"name": "b", "count": 1, "compute": {"model": "constant", "step_time": 0.5625}, "network": "instant"}]
    sc["algorithm"] = {"name": "fedasync", "lr": 0.1, "alpha": 0.6}
    res = run_in(sc)
    m = pd.read_csv(res.run_dir / "metrics.csv").set_index("round").loc[1:]
    c = pd.read_csv(res.run_dir / "clients.csv").set_index("round")
    assert m["virtual_time"].tolist() == [1.0, 2.0, 2.25, 3.0, 4.0, 4.5, 5.0, 6.0]
    assert c["client"].tolist() == [0, 0, 1, 0, 0, 1, 0, 0]
    k = [0, 0, 2, 1, 0, 2, 1, 0]
    assert m["staleness"].tolist() == k
    np.testing.assert_allclose(c["weight"], 0.6 * (np.array(k) + 1.0) ** -0.5, rtol=1e-15)
    times = m["virtual_time"].to_numpy()
    start = times - c.loc[m.index, "compute_time"].to_numpy() - c.loc[m.index, "comm_time"].to_numpy()
    seen = np.array([(times[: i] <= s).sum() for i, s in enumerate(start)])
    assert (m["staleness"].to_numpy() == np.arange(8) - seen).all()


def test_t17_fedprox_step():
    from emulator.compute.sgd import sgd_update
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


def test_t11_undeliverable_not_in_K(run_in):
    """The same three clients under DMS: the undeliverable client b is outside U^t, so
    K = (4 + 0)/2 = 2 (not 4/3), H = 4, n_U = 2; the delivered tau = 0 client is filtered with
    P = K/H = 0.5 (include), b has no P at all (docs/algorithms/tsfl.md 2.3, 4.3)."""
    groups = [
        {"name": "a", "count": 1, "compute": {"model": "constant", "step_time": 2.0}, "network": link_for(0.5, 1.0)},
        {"name": "b", "count": 1, "compute": {"model": "constant", "step_time": 1.0}, "network": link_for(6.0, 5.0)},
        {"name": "c", "count": 1, "compute": {"model": "constant", "step_time": 3.0}, "network": link_for(4.0, 4.0)},
    ]
    res = run_in(interval_scenario(groups, "dms", rounds=6, interval=10.0))
    m = res.metrics[res.metrics["round"] > 0]
    assert (m["K"] == 2.0).all() and (m["H"] == 4).all()
    assert (m["n_candidates"] == 2).all() and (m["tau_mean"] == 2.0).all()
    assert (m["heterogeneity"] == 4.0).all()                 # var([4, 0])
    c = pd.read_csv(res.run_dir / "clients.csv", keep_default_na=False)
    c = c[c["round"] > 0]
    b = c[c["client"] == 1]
    assert (b["drop_reason"] == "undeliverable").all() and (b["weight"] == 0).all() and (b["steps"] == 0).all()
    assert (b["dms_p"] == "").all() and (b["dms_beta"] == "").all()       # never a candidate
    a, z = c[c["client"] == 0], c[c["client"] == 2]
    assert (a["dms_p"].astype(float) == 0).all() and (a["dms_beta"].astype(float) == 1).all()
    assert (z["dms_p"].astype(float) == 0.5).all() and (z["steps"] == 0).all()
    assert (a["weight"] > 0).all()
    # proportional constants: rho ~ tau on the survivors, so a gets everything, kept or not
    assert (a["weight"] == 1).all() and (z["weight"] == 0).all()
    assert set(z["dms_beta"].astype(float)) == {0.0, 1.0}    # the tau = 0 client is a coin flip


GUARD_DELTAS = (1, 0.3, 0.7, 3.3, 7, 10)


def guard_scenario(delta):
    """docs/algorithms/tsfl.md 2.3 paper cases: c = delta / tau, d = u = 0, one client per tau = 1..49."""
    sc = quad_intervals("fedavg", list(range(1, 50)), rounds=1)
    sc["workload"]["dataset"]["block"] = 1                 # d = 50: training stays cheap
    sc["run"]["eval_every"] = 10
    sc["protocol"]["interval"] = delta
    for g in sc["clients"]["groups"]:
        g["compute"]["period"] = delta
    return sc


@pytest.fixture(scope="module")
def guard_runs(tmp_path_factory):
    import emulator
    out = tmp_path_factory.mktemp("guard")
    runs = {}
    for delta in GUARD_DELTAS:
        res = emulator.run(guard_scenario(delta), out=out / str(delta))
        c = pd.read_csv(res.run_dir / "clients.csv", keep_default_na=False)
        runs[delta] = c[c["round"] == 1].set_index("client")
    return runs


def guard_sensitive_cases():
    """(delta, tau) where the float product tau * (delta / tau) exceeds delta: without the
    relative guard one iteration is lost there."""
    return [(d, t) for d in GUARD_DELTAS for t in range(1, 50) if t * (d / t) > d]


@pytest.mark.slow
def test_t11_float_guard_exact_tau(guard_runs, monkeypatch, run_in):
    """c = delta/tau, d = u = 0, tau in 1..49, delta in {1, .3, .7, 3.3, 7, 10}: exactly tau
    iterations (T11). The check is sensitive: on the cases listed by guard_sensitive_cases the
    clock without its guard fits tau - 1 (shown below), and the emulator then records tau - 1."""
    import devices.clocks
    import devices.compute as dc
    sensitive = guard_sensitive_cases()
    assert len(sensitive) >= 5 and {d for d, _ in sensitive} >= {0.3, 3.3, 7}
    for delta, c in guard_runs.items():
        assert c["steps"].tolist() == list(range(1, 50)), delta
        assert (c["compute_time"] <= delta * (1 + 1e-9)).all()
    for d in GUARD_DELTAS:
        for t in range(1, 50):
            assert dc.FixedClock(d / t).fit(d) == t
    monkeypatch.setattr(devices.clocks, "FIT_EPS", 0.0)
    for d, t in sensitive:
        assert dc.FixedClock(d / t).fit(d) == t - 1
    res = run_in(guard_scenario(3.3), "noguard")          # the emulator, unguarded
    c = pd.read_csv(res.run_dir / "clients.csv")
    c = c[c["round"] == 1].set_index("client")
    lost = [t for d, t in sensitive if d == 3.3]
    assert [int(c.loc[t - 1, "steps"]) for t in lost] == [t - 1 for t in lost]


@pytest.mark.slow
def test_t11_float_guard_uploads_delivered(guard_runs):
    """The tau fitted under the guard is also delivered: every client is in U^t, weight 1/49."""
    bad = {d: [int(i) + 1 for i in c.index[(c["drop_reason"] != "") | (c["weight"] <= 0)]]
           for d, c in guard_runs.items()}
    assert all(not v for v in bad.values()), bad
    for c in guard_runs.values():
        np.testing.assert_allclose(c["weight"].astype(float), 1 / 49, atol=1e-12)


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
    assert (m.loc[1:, "n_candidates"] == 2).all() and (m.loc[1:, "K"] == 4).all() and (m.loc[1:, "H"] == 5).all()
    assert (r1.loc[[0, 1], "weight"] == 0).all() and r1.loc[[0, 1], "dms_p"].isna().all()
    assert abs(r1.loc[[2, 3], "weight"].sum() - 1) < 1e-12 and r1.loc[3, "weight"] > 0
    # the filtered clients' work is never computed
    assert res.summary["grad_steps_computed"] <= 2 * (3 + 5)
    # m = 4, tau = [1, 2, 3, 5]: U = {3} only (strict tau > m), K = H = 5, P = 0, weight 1
    res = run_in(interval_scenario(groups, "dms", rounds=2, min_iterations=4), "m4")
    c = pd.read_csv(res.run_dir / "clients.csv")
    for r in (1, 2):
        g = c[c["round"] == r].set_index("client")
        assert list(g["drop_reason"].fillna("")) == ["min_iterations"] * 3 + [""]
        assert g["weight"].tolist() == [0, 0, 0, 1] and g.loc[3, "dms_p"] == 0 and g.loc[3, "dms_beta"] == 1
        assert g["steps"].tolist() == [1, 2, 3, 5]
    m = res.metrics[res.metrics["round"] > 0]
    assert (m["n_candidates"] == 1).all() and (m["K"] == 5).all() and (m["H"] == 5).all()
    assert (m["survivors"] == 1).all() and (m["slope"] == 0.2).all()          # proportional: 1/5
    assert res.summary["grad_steps_computed"] == 2 * 5
    # m = 4 with tau = [1, 2, 3, 4]: nobody uploads, w^{t+1} = w^t
    groups[3]["compute"]["fixed"] = 4
    res = run_in(interval_scenario(groups, "dms", rounds=2, min_iterations=4), "empty")
    assert np.allclose(res.metrics["test_loss"], res.metrics["test_loss"].iloc[0])
    assert res.summary["grad_steps_computed"] == 0
    m = res.metrics[res.metrics["round"] > 0]
    assert (m["n_candidates"] == 0).all() and (m["participants"] == 0).all()
    assert (m["test_loss"] == res.metrics["test_loss"].iloc[0]).all()           # exactly w^0
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert (c["weight"] == 0).all() and (c.loc[c["round"] > 0, "drop_reason"] == "min_iterations").all()
    # on the quadratic (w^0 = 0) the final model is exactly w^0
    sc = quad_intervals("dms", [1, 2, 3, 4], rounds=3, constants={"mode": "proportional"})
    sc["protocol"]["min_iterations"] = 4
    res = run_in(sc, "empty_quad")
    assert (np.load(res.run_dir / "model.npy") == 0).all()


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
    from emulator.workloads.datasets import quadratic_problem_dense as quadratic_problem
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


def random_tau_scenario(m, rounds=30):
    """8 clients, tau quarters floor(N(2, .4)) .. floor(N(5, 1)) (two clients each), DMS,
    only tau > m uploads (docs/algorithms/tsfl.md 5.2)."""
    groups = [{"name": f"m{mu}", "count": 2, "compute": {"model": "iterations", "mean": mu, "std": 0.2 * mu},
               "network": "instant"} for mu in (2, 3, 4, 5)]
    return interval_scenario(groups, "dms", rounds=rounds, min_iterations=m)


def test_t22_weights_min_iterations_and_empty_intervals(run_in):
    """T22 with client selection (m = 4, so some intervals have U^t = {}): per interval the
    weights over U^t sum to 1, or are all 0 when there is no aggregation (and then the model,
    hence test_loss, is unchanged); weight = 0 iff DMS-dropped, not delivered or filtered by m."""
    res = run_in(random_tau_scenario(4))
    c = pd.read_csv(res.run_dir / "clients.csv")
    c = c[c["round"] > 0]
    m = res.metrics.set_index("round")
    empty = full = 0
    for r, g in c.groupby("round"):
        by_m = g["drop_reason"] == "min_iterations"
        assert (by_m == (g["steps"] <= 4)).all()                       # strict tau > m uploads
        assert (g.loc[by_m, "weight"] == 0).all() and g.loc[by_m, "dms_p"].isna().all()
        U = g[~g["dropped"]]
        assert m.loc[r, "n_candidates"] == len(U)
        if len(U) == 0:
            empty += 1
            assert (g["weight"] == 0).all() and g["weight"].sum() == 0
            assert m.loc[r, "survivors"] == 0 and m.loc[r, "participants"] == 0
            assert m.loc[r, "test_loss"] == m.loc[r - 1, "test_loss"]          # w^{t+1} = w^t
        else:
            full += 1
            assert abs(U["weight"].sum() - 1) < 1e-12
            assert ((g["weight"] == 0) == ((g["dms_beta"] == 0) | g["dropped"])).all()
    assert empty >= 3 and full >= 3, (empty, full)


def test_t7_algorithm_stream_through_the_emulator(run_in):
    """D4 / A12 end to end: the `algorithm` stream (Streams(seed).generator("algorithm", 0))
    gives exactly n_U uniforms per interval, in client-id order over U^t, none when U^t = {},
    and beta = (u >= P): replaying a fresh stream reproduces every recorded dms_beta."""
    from emulator.rng import Streams
    sc = random_tau_scenario(2, rounds=40)
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    c = c[c["round"] > 0]
    g = Streams(sc["seed"]).generator("algorithm", 0)
    sizes, dropped = set(), 0
    for r, rows in c.groupby("round"):
        U = rows[rows["drop_reason"].isna()].sort_values("client")
        assert U["dms_p"].notna().all() and rows.loc[rows["drop_reason"].notna(), "dms_p"].isna().all()
        tau = U["steps"].to_numpy(np.int64)
        sizes.add(len(U))
        if len(U) == 0:
            continue
        K, H, P = T.dms_filter_probs(tau)
        np.testing.assert_allclose(U["dms_p"], P, atol=1e-12)
        beta = g.random(len(U)) >= P
        assert (U["dms_beta"].to_numpy() == beta.astype(int)).all(), r
        dropped += int((~beta).sum())
    assert len(sizes) >= 3 and dropped >= 3, (sizes, dropped)


# --------------------------------------------------------------------------- eval_every_seconds (async)
def async_eval_scenario(every, rounds=40):
    """FedAsync, 3 clients with job times 0.5, 0.75, 1.25 s (2 steps each, instant links):
    merges at multiples of those, with ties (e.g. 1.5 s, 2.5 s)."""
    sc = tiny(**{"run.rounds": rounds, "run.eval_every_seconds": every})
    sc["protocol"] = {"name": "async", "local_steps": 2}
    sc["algorithm"] = {"name": "fedasync", "lr": 0.1}
    sc["clients"] = {"count": 3, "groups": [
        {"name": f"g{i}", "count": 1, "compute": {"model": "constant", "step_time": st}, "network": "instant"}
        for i, st in enumerate((0.25, 0.375, 0.625))]}
    return sc


def expected_evaluated(times, every, last_round_index):
    """base.finish_aggregation / asynchronous.py docstring: a merge is evaluated iff it is the
    first merge at or after some grid point k * every (k >= 1) - i.e. some k * every lies in
    (previous merge's time, this merge's time] - or it is the run's last round."""
    out, prev, k = [], 0.0, 1
    for i, t in enumerate(times):
        while k * every <= prev:
            k += 1
        out.append(k * every <= t or i == last_round_index)
        prev = t
    return np.array(out)


@pytest.mark.parametrize("every", [1.0, 0.5, 2.25])
def test_async_eval_every_seconds_grid(run_in, every):
    """run.eval_every_seconds under async: test_acc is set exactly on the first merge at or after
    each multiple of `every` (a merge exactly on the grid counts; of tied merges only the first),
    plus the last round; NaN on every other merge. Dyadic times: no float rounding involved."""
    res = run_in(async_eval_scenario(every))
    mt = res.metrics
    assert mt["round"].tolist() == list(range(41)) and not np.isnan(mt["test_acc"].iloc[0])
    m = mt[mt["round"] > 0]
    times = m["virtual_time"].to_numpy()
    assert (np.diff(times) >= 0).all() and (np.diff(times) == 0).any()       # ties occur
    got = m["test_acc"].notna().to_numpy()
    exp = expected_evaluated(times, every, len(m) - 1)
    assert (got == exp).all(), list(zip(m["round"][got != exp], times[got != exp]))
    on_grid = [t for t in times if (t / every) == int(t / every)]
    assert on_grid                                                           # "at" is exercised
    assert m["test_loss"].notna().tolist() == got.tolist()
    if every == 1.0:      # by hand: merges at 1.0, 2.0, 3.0 (two tied), 4.0, 5.0 (two), 6.0 (two), 7.0
        assert m.loc[m["test_acc"].notna(), "round"].tolist()[:7] == [3, 7, 11, 16, 19, 23, 28]
        assert m.loc[m["round"].isin([11, 12]), "virtual_time"].tolist() == [3.0, 3.0]


def test_async_eval_every_seconds_no_drift(run_in):
    """Grid points k x 0.7 (not a running sum of 0.7): by hand, the first merges at or after
    0.7, 1.4, ..., 9.8 are at 0.75, 1.5, 2.25, 3.0, 3.5 (exactly on 5 x 0.7), 4.5, 5.0, 6.0,
    6.5, 7.0 (exactly on 10 x 0.7), 8.0, 8.5, 9.5, 10.0 (also the last round)."""
    res = run_in(async_eval_scenario(0.7))
    m = res.metrics[res.metrics["round"] > 0]
    times = m["virtual_time"].to_numpy()
    ev = m[m["test_acc"].notna()]
    assert ev["virtual_time"].tolist() == [0.75, 1.5, 2.25, 3.0, 3.5, 4.5, 5.0, 6.0, 6.5, 7.0, 8.0, 8.5, 9.5, 10.0]
    assert ev["round"].tolist() == [2, 5, 8, 11, 13, 17, 19, 23, 26, 28, 32, 34, 38, 40]
    got = m["test_acc"].notna().to_numpy()
    exp = expected_evaluated(times, 0.7, len(m) - 1)
    assert (got == exp).all(), list(zip(m["round"][got != exp], times[got != exp]))


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


# --------------------------------------------------------------------------- Case 3 (docs/algorithms/tsfl.md 6.3)
def case3_scenario(rounds=40, redraw="per_interval", algo="fedavg"):
    """Case 3 on digits, scaled: pools 30..90 (client i mod 5), per-interval sizes
    floor(N(m_g, s_g)), tau quarters floor(N(2,.4)) ... floor(N(5,1))."""
    sc = tiny(**{"run.rounds": rounds, "run.eval_every": rounds})
    sc["workload"]["partition"] = {"name": "dirichlet", "alpha": 0.5, "sizes": {"pattern": [30, 45, 60, 75, 90]}}
    sc["workload"]["batch_size"] = 32           # few SGD steps per epoch: the draws are what is tested
    sc["clients"] = {"count": 20, "groups": [
        {"name": f"tau{m}", "count": 5, "compute": {"model": "iterations", "mean": m, "std": 0.2 * m},
         "network": "instant"} for m in (2, 3, 4, 5)]}
    sc["protocol"] = {"name": "intervals", "interval": 1.0, "iteration": "epoch",
                      "data_sizes": {"mean": [19, 28, 38, 47, 57], "std": [3.7, 5.5, 7.4, 9.2, 11.1],
                                     "redraw": redraw}}
    sc["algorithm"] = {"name": algo, "lr": 0.05}
    return sc


@pytest.mark.slow
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
    assert (c["sgd_steps"] == c["steps"] * np.ceil(c["n_samples"] / 32)).all()
    assert (np.ceil(c["n_samples"] / 32) >= 2).any() and (np.ceil(c["n_samples"] / 32) == 1).any()
    # FedAvg weighs by |D_i^t| (T-SFL fn. 3)
    for _, r in c.groupby("round"):
        up = r[r["weight"] > 0]
        assert np.allclose(up["weight"], up["n_samples"] / up["n_samples"].sum())
    # tau quarters: means 1.5, 2.5, 3.5, 4.5 after the floor; delta ~ 1.85 (docs/algorithms/tsfl.md 6.3)
    taus = c.groupby(c["client"] // 5)["steps"].mean().to_numpy()
    assert np.allclose(taus, [1.5, 2.5, 3.5, 4.5], atol=0.25), taus
    delta = res.metrics["heterogeneity"].dropna().mean()
    assert 1.5 < delta < 2.2, delta
    # once: one subset for the whole run
    res = run_in(case3_scenario(rounds=5, redraw="once"), "once")
    c = pd.read_csv(res.run_dir / "clients.csv")
    c = c[c["round"] > 0]
    assert (c.groupby("client")["n_samples"].nunique() == 1).all()
