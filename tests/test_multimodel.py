"""Multi-model FL (docs/algorithms/multimodel.md section 7): the MFA-RR and MFA-Rand assignments
alone, participation, the quadratic against the NumPy reference on recorded assignments, the
gain on hand-made curves, M = 1 equivalence, and a two-model run in which both models train."""
import copy

import numpy as np
import pandas as pd
import pytest
import torch

from devices.assignment import MfaRand, MfaRR, Sequential
from emulator.measures import gain as G
from emulator.scenario import schema as scenario
from emulator.errors import ScenarioError
from emulator.sim.world import World

from conftest import tiny


# --------------------------------------------------------------------------- T1, T2, T3
@pytest.mark.parametrize("M", [1, 2, 3, 4, 5, 12])
def test_T1_mfa_rr_frames_are_latin_squares_with_the_papers_mapping(M):
    N = 2 * M
    rr, rng = MfaRR(M), np.random.default_rng(0)
    everyone = np.arange(N)
    frames = []
    for f in range(3):
        table = np.zeros((M, M), dtype=int)      # [group j, round u] -> model (1-based)
        groups = None
        for u in range(1, M + 1):
            t = f * M + u
            sets = rr.assign(t, everyone, rng)
            if u == 1:
                groups = [g.copy() for g in rr.groups]
                frames.append(groups)
            assert [list(g) for g in rr.groups] == [list(g) for g in groups]     # fixed inside a frame
            for m, s in enumerate(sets):
                j = next(i for i, g in enumerate(groups) if np.array_equal(np.sort(g), s))
                table[j, u - 1] = m + 1
        for j in range(M):
            for u in range(M):
                assert table[j, u] == MfaRR.model_of(j + 1, u + 1, M) == ((j + 1 + u + 1 - 2) % M) + 1
        assert all(sorted(table[j]) == list(range(1, M + 1)) for j in range(M))       # every model once
        assert all(sorted(table[:, u]) == list(range(1, M + 1)) for u in range(M))    # M distinct per round
    if M > 1:
        assert any(not np.array_equal(a[0], b[0]) for a, b in zip(frames, frames[1:]))  # new partition per frame


def test_T1_table_3_of_the_paper():
    """M = 3: model 1 uses S_1, S_3, S_2; model 2 S_2, S_1, S_3; model 3 S_3, S_2, S_1."""
    want = {1: [1, 3, 2], 2: [2, 1, 3], 3: [3, 2, 1]}
    for m, groups in want.items():
        assert [next(j for j in (1, 2, 3) if MfaRR.model_of(j, u, 3) == m) for u in (1, 2, 3)] == groups


def test_T2_mfa_rand_assignment_statistics():
    rand, rng = MfaRand(6), np.random.default_rng(1)
    for t in range(1, 50):
        sets = rand.assign(t, np.arange(24), rng)
        assert [len(s) for s in sets] == [4] * 6
        assert sorted(np.concatenate(sets)) == list(range(24))
    rand, rng = MfaRand(4), np.random.default_rng(2)
    on = np.zeros((20_000, 8, 4), dtype=bool)
    for t in range(20_000):
        for m, s in enumerate(rand.assign(t + 1, np.arange(8), rng)):
            on[t, s, m] = True
    # client 0 not on model 0 for 4 consecutive rounds: (3/4)^4 (Remark 1)
    off = ~on[:, 0, 0]
    runs = np.lib.stride_tricks.sliding_window_view(off, 4).all(1)
    assert abs(runs.mean() - 0.31640625) < 0.01
    assert np.abs(on.mean(0) - 0.25).max() < 0.01


def test_T3_partial_participation_and_sequential():
    rr, rng = MfaRR(4, K=8), np.random.default_rng(3)
    for f in range(5):
        first = None
        for u in range(1, 5):
            sets = rr.assign(f * 4 + u, np.arange(20), rng)
            ids = set(np.concatenate(sets).tolist())
            assert len(ids) == 8 and all(len(s) == 2 for s in sets)
            first = ids if first is None else first
            assert ids == first                                   # the same K clients all frame
    rand = MfaRand(4, K=8)
    seen = [set(np.concatenate(rand.assign(t, np.arange(20), rng)).tolist()) for t in range(1, 6)]
    assert all(len(s) == 8 for s in seen) and len({frozenset(s) for s in seen}) > 1
    seq = Sequential(3, 4, K=5)
    for t in range(1, 13):
        sets = seq.assign(t, np.arange(20), rng)
        assert [len(s) for s in sets] == [5 if m == (t - 1) // 4 else 0 for m in range(3)]
    with pytest.raises(ValueError, match="equal groups"):
        MfaRand(4, K=6, allow_unequal=False).assign(1, np.arange(20), rng)


# --------------------------------------------------------------------------- T4 quadratic
def quad(N=24, p=4, mu=2e-4):
    d = N * p + 1
    lap = 2 * np.eye(p + 1) - np.eye(p + 1, k=1) - np.eye(p + 1, k=-1)
    lap[0, 0] = lap[p, p] = 1
    A = np.zeros((N, d, d))
    b = np.zeros((N, d))
    for k in range(N):
        A[k, k * p:k * p + p + 1, k * p:k * p + p + 1] = lap
    A[0, 0, 0] += 1
    A[N - 1, d - 1, d - 1] += 1
    b[0, 0] = 1
    return A, b, mu, np.linalg.solve(A.sum(0) + N * mu * np.eye(d), b.sum(0))


def F(w, A, b, mu):
    return (w @ A.sum(0) @ w - 2 * b.sum(0) @ w) / (2 * len(A)) + mu / 2 * (w @ w)


def fedavg_round(w, clients, A, b, mu, eta, E):
    out = np.zeros_like(w)
    for k in clients:
        v = w.copy()
        for _ in range(E):
            v = v - eta * (A[k] @ v - b[k] + mu * v)
        out += v
    return out / len(clients)


def mm_scenario(M=2, assignment="mfa_rr", rounds=10, lr=0.1, offset=None, executor="sequential"):
    wl = {"dataset": {"name": "quadratic", "block": 4, "mu": 2e-4}, "model": {"name": "quadratic"}, "batch_size": "full"}
    return {"name": "mm", "seed": 4, "workloads": [copy.deepcopy(wl) for _ in range(M)],
            "clients": {"count": 24, "groups": [{"name": "g", "fraction": 1.0,
                                                  "compute": {"model": "constant", "step_time": 0.01},
                                                  "network": "instant"}]},
            "protocol": {"name": "multi_model", "assignment": assignment, "local_steps": 5,
                         "gain": {"metric": "log10_gap", "eps": -2.5}},
            "algorithm": {"name": "fedavg", "lr": lr, **({"lr_offset": offset} if offset else {})},
            "run": {"rounds": rounds}, "executor": {"name": executor, "dtype": "float64"}}


def test_T4_reference_fixed_case():
    """The spec's fixed case: M = 2, S_1 = clients 0..11, S_2 = 12..23, MFA-RR rotation."""
    A, b, mu, ws = quad()
    groups = [np.arange(12), np.arange(12, 24)]
    w = [np.zeros(97), np.zeros(97)]
    gaps = [[], []]
    for t in range(1, 11):
        u0 = (t - 1) % 2
        w = [fedavg_round(w[m], groups[(m - u0) % 2], A, b, mu, 0.1, 5) for m in range(2)]
        for m in range(2):
            gaps[m].append(np.log10(F(w[m], A, b, mu) - F(ws, A, b, mu)))
    np.testing.assert_allclose([gaps[0][0], gaps[0][1], gaps[0][9]], [-1.7381317503, -1.7381290535, -1.8357174590], atol=1e-9)
    np.testing.assert_allclose([gaps[1][0], gaps[1][1], gaps[1][9]], [-1.7113241091, -1.7381317503, -1.8357301512], atol=1e-9)
    assert np.linalg.norm(w[0]) == pytest.approx(0.1335312250812, abs=1e-12)


@pytest.mark.parametrize("assignment, lr, offset", [("mfa_rr", 0.1, None), ("mfa_rand", 30.0, 100.0)])
def test_T4_emulator_equals_the_reference_on_recorded_assignments(assignment, lr, offset):
    """Every model's w_t equals the NumPy replay of the recorded client sets (float64)."""
    w = World(scenario.load(mm_scenario(2, assignment, 10, lr, offset)))
    w.run()
    A, b, mu, ws = quad()
    c = w.recorder.clients_frame()
    m = pd.DataFrame(w.recorder.metrics)
    ref = [np.zeros(97), np.zeros(97)]
    for t in range(1, 11):
        eta = lr / (offset + t) if offset else lr
        for model in range(2):
            sets = c.loc[(c["round"] == t) & (c["model"] == model), "client"].to_numpy()
            assert len(sets) == 12
            ref[model] = fedavg_round(ref[model], sets, A, b, mu, eta, 5)
            got = m[(m["round"] == t) & (m["model"] == model)]["log10_gap"].iloc[0]
            assert got == pytest.approx(np.log10(F(ref[model], A, b, mu) - F(ws, A, b, mu)), abs=1e-10)
    for model in range(2):
        np.testing.assert_allclose(w.tasks[model].algorithm.x.numpy(), ref[model], rtol=1e-10, atol=1e-13)
    # every client trained exactly one model each round (idle rows: model -1, none here)
    assert (c.groupby(["round", "client"]).size() == 1).all() and set(c["model"]) == {0, 1}


# --------------------------------------------------------------------------- T5 gain
def test_T5_gain_on_hand_made_curves():
    t = np.arange(1, 200)
    T1 = G.first_hit(t, 0.9 ** t, 0.1, True)
    series = [(t, r ** t) for r in (0.95, 0.94, 0.96)]
    hits = [G.first_hit(*s, 0.1, True) for s in series]
    TP = G.joint_hit(series, [0.1] * 3, "simultaneous", True)
    assert (T1, hits, TP) == (22, [45, 38, 57], 57)
    assert G.gain(3, T1, TP) == pytest.approx(1.157894737)
    r = np.arange(1, 9)
    A = [.30, .40, .45, .51, .52, .49, .48, .55]
    B = [.40, .50, .60, .65, .69, .71, .72, .73]
    acc = [(r, A), (r, B)]
    assert G.joint_hit(acc, [0.50, 0.70], "simultaneous", False) == 8
    assert G.gain(2, 4, 8) == 1.0
    assert G.joint_hit(acc, [0.50, 0.70], "max_first_hit", False) == 6
    assert G.gain(2, 4, 6) == pytest.approx(1.333333, abs=1e-6)
    assert G.joint_hit(acc, [0.50, 0.70], "first_model", False) == 4
    assert G.gain(9, 50, 117) == pytest.approx(3.846154, abs=1e-6) and G.gain(2, 100, 142) == pytest.approx(1.408451, abs=1e-6)


@pytest.mark.slow
def test_T5_gain_in_a_run_against_a_sequential_run():
    """MFA-RR (M = 2, E = 5, eta 0.1) reaches gap <= -2.5 for both models in 170 rounds; the
    sequential baseline needs T_1 = 171 rounds per model (spec section 5): gain 2 x 171 / 170."""
    seq = World(scenario.load(dict(mm_scenario(2, "sequential", 400))))
    seq.run()
    s = seq.protocol.summary()["multi_model"]
    assert s["T1"] == {"0": 171, "1": 171} and s["T1_total"] == 342
    sc = mm_scenario(2, "mfa_rr", 300)
    sc["protocol"]["gain"].update(T1=171, tau1=s["tau1_total"], stop_at_target=True)
    rr = World(scenario.load(sc))
    rr.run()
    r = rr.protocol.summary()["multi_model"]
    assert r["T_P"] == 170 and rr.rounds_done == 170
    assert r["gain"] == pytest.approx(2 * 171 / 170)
    assert r["gain_time"] == pytest.approx(s["tau1_total"] / r["tau_P"])


# --------------------------------------------------------------------------- T7, two models
@pytest.mark.parametrize("resample", ["frame", "round"])
def test_mfa_rr_with_one_model_and_partial_participation_draws_every_round(run_in, resample):
    """M = 1: every round is a frame start ((t - 1) mod 1 = 0), so K = 6 of the 24 clients are
    drawn afresh each round (the paper's literal `t mod M = 1` never holds for M = 1 and would
    keep round 1's clients for good): 8 rounds, 8 different sets of 6 in clients.csv."""
    sc = mm_scenario(1, "mfa_rr", 8)
    sc["protocol"].update(k=6, rr_resample=resample)
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    sets = [frozenset(g.loc[g["selected"] & (g["model"] == 0), "client"]) for _, g in c.groupby("round")]
    assert len(sets) == 8 and all(len(s) == 6 for s in sets)
    assert len(set(sets)) == 8


@pytest.mark.parametrize("assignment", ["mfa_rand", "mfa_rr"])
def test_T7_one_model_is_fedavg_bit_identical(assignment):
    sc = mm_scenario(1, assignment, 15)
    mm = World(scenario.load(sc))
    mm.run()
    single = copy.deepcopy(sc)
    single["workload"] = single.pop("workloads")[0]
    single["protocol"] = {"name": "rounds", "local_steps": 5}
    one = World(scenario.load(single))
    one.run()
    assert torch.equal(mm.tasks[0].algorithm.x, one.tasks[0].algorithm.x)


def test_two_different_models_both_train_with_their_own_lr_and_step_times(run_in):
    """logreg on synthetic and cnn_mnist-sized work on digits: both models' accuracy rises (the
    silent model-0-only failure cannot come back); each model's group takes its own time
    (FLOP-based step times) and the round lasts as long as the slower model."""
    sc = tiny(**{"run.rounds": 6, "clients.count": 8})
    wl = sc.pop("workload")
    sc["workloads"] = [{"dataset": {"name": "synthetic", "alpha": 0.5, "beta": 0.5}, "model": {"name": "logreg"},
                        "batch_size": 10, "algorithm": {"lr": 0.05}},
                       dict(wl, model={"name": "mlp", "hidden": 64}, algorithm={"lr": 0.2})]
    sc["clients"]["groups"][0]["compute"] = {"model": "flops", "gflops": 0.01}
    sc["protocol"] = {"name": "multi_model", "assignment": "mfa_rr", "local_steps": 5}
    res = run_in(sc)
    m = res.metrics
    for model in (0, 1):
        acc = m[m["model"] == model]["test_acc"].to_numpy()
        assert len(acc) == 7 and acc[-1] > acc[0] + 0.05, (model, acc)
    assert set(m["lr"].dropna().round(3)) == {0.05, 0.2}
    # Alg. 1 line 1 (A17, init auto): logistic regression starts at 0 (uniform softmax: loss
    # ln 10), the MLP at the framework's random init
    r0 = m[m["round"] == 0].set_index("model")["test_loss"]
    assert r0[0] == pytest.approx(np.log(10), abs=1e-6) and abs(r0[1] - np.log(10)) > 1e-3
    per = m[m["round"] >= 1].pivot(index="round", columns="model", values="model_time")
    assert (per[1] > 5 * per[0]).all()                     # the MLP steps cost more FLOPs
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert (c.groupby(["round", "client"]).size() == 1).all() and set(c["model"]) == {0, 1}
    assert len(res.summary["models"]) == 2 and res.summary["models"][1]["final_test_acc"] > 0.3
    # analysis (flemu compare / report / curves) shows every model, not model 0
    import analysis
    from analysis import metrics as AM, plots as AP
    st = analysis.load(res.run_dir)
    cmp = AM.compare(st)
    assert list(cmp["model"]) == [0, 1]
    finals = m[m["round"] == 6].set_index("model")["test_acc"]
    assert cmp.set_index("model")["final_acc_mean"].to_dict() == pytest.approx(finals.to_dict())
    curves = AP.curve_frame(st, x="round")
    assert curves["model"].nunique() == 2 and curves.iloc[:, 3].nunique() == 2


def test_workload_overrides_are_validated_with_their_path():
    sc = mm_scenario(2)
    sc["workloads"][1]["algorithm"] = {"lr": -1}
    with pytest.raises(ScenarioError) as e:
        scenario.load(sc)
    assert e.value.problems[0][0] == "workloads[1].algorithm.lr"


def test_identical_workloads_share_their_client_data_but_not_their_init():
    """`workloads` with the same dataset and partition are the same task (A20): the same
    client data; a different dataset block draws its own; each model its own init."""
    sc = tiny(**{"clients.count": 5})
    wl = sc.pop("workload")
    wl["partition"] = {"name": "dirichlet", "alpha": 0.3}
    wl["dataset"] = {"name": "synthetic", "alpha": 1.0, "beta": 1.0}
    other = dict(wl, dataset={"name": "synthetic", "alpha": 0.5, "beta": 1.0})
    sc["workloads"] = [wl, copy.deepcopy(wl), other]
    sc["protocol"] = {"name": "multi_model", "assignment": "mfa_rr", "local_steps": 1, "allow_unequal_groups": True,
                      "init": "framework"}
    w = World(scenario.load(sc))
    a, b, c = (t.data for t in w.tasks)
    assert np.array_equal(a.x_train, b.x_train) and all(np.array_equal(p, q) for p, q in zip(a.client_indices, b.client_indices))
    assert a.x_train.shape != c.x_train.shape or not np.array_equal(a.x_train, c.x_train)
    assert not torch.equal(w.tasks[0].algorithm.x, w.tasks[1].algorithm.x)
