"""FedAvg and FedProx on the quadratic with full-batch gradients equal a NumPy reference
written here, with the same participation, to 1e-6 relative after 20 rounds."""
import numpy as np
import pandas as pd
import pytest

from emulator.workloads.datasets import quadratic_problem_dense as quadratic_problem
from conftest import quadratic_scenario


def reference(A, b, mu, rounds, steps, lr, participants, prox_mu=0.0, server_lr=1.0, momentum=0.0,
              weight_decay=0.0, lr_decay=1.0):
    """Plain NumPy FedAvg / FedProx: every participant runs `steps` full-gradient steps
    from w_t on F_k(w) = 1/2 w'A_k w - b_k'w + mu/2 |w|^2 (+ prox/2 |w - w_t|^2), with
    PyTorch-SGD momentum (buf = m buf + g, w -= lr buf; a fresh buffer per round) and weight
    decay (g += wd w), lr_t = lr * lr_decay^(t-1); the server averages the participants' models
    with equal weights (one sample per client) and moves w_t by server_lr toward the average."""
    w = np.zeros(A.shape[1])
    out = []
    for t in range(rounds):
        eta = lr * lr_decay ** t
        locals_ = []
        for k in participants[t]:
            v = w.copy()
            buf = None
            for _ in range(steps):
                g = A[k] @ v - b[k] + mu * v + prox_mu * (v - w) + weight_decay * v
                buf = g.copy() if buf is None else momentum * buf + g
                v = v - eta * (buf if momentum else g)
            locals_.append(v)
        w = w + server_lr * (np.mean(locals_, axis=0) - w)
        out.append(w.copy())
    return out


@pytest.mark.parametrize("extra", [{"server_lr": 1.7}, {"momentum": 0.9}, {"weight_decay": 0.05},
                                   {"lr_decay": 0.9}, {"momentum": 0.5, "weight_decay": 0.01, "server_lr": 0.5}])
def test_fedavg_options_match_numpy_reference(run_in, extra):
    n, rounds, steps, lr = 6, 12, 5, 0.05
    sc = quadratic_scenario(n=n, rounds=rounds, steps=steps, lr=lr, algo="fedavg", k=3, **extra)
    sc["executor"] = {"name": "sequential", "dtype": "float64"}
    res = run_in(sc)
    clients = pd.read_csv(res.run_dir / "clients.csv")
    parts = [sorted(g.loc[g.selected, "client"]) for _, g in clients.groupby("round")]
    A, b, _, _, F = quadratic_problem(n, 4, 0.01)
    ws = reference(A, b, 0.01, rounds, steps, lr, parts, **extra)
    np.testing.assert_allclose(np.load(res.run_dir / "model.npy"), ws[-1], rtol=1e-10, atol=1e-12)
    f_emu = res.metrics.loc[res.metrics["round"] >= 1, "test_loss"].to_numpy()     # float64 run
    np.testing.assert_allclose(f_emu, [F(w) for w in ws], rtol=1e-9)


@pytest.mark.parametrize("algo,extra,k", [("fedavg", {}, None), ("fedprox", {"mu": 0.5}, None),
                                            ("fedavg", {}, 3), ("fedprox", {"mu": 0.2}, 2)])
def test_matches_numpy_reference(run_in, algo, extra, k):
    n, rounds, steps, lr = 6, 20, 5, 0.1
    res = run_in(quadratic_scenario(n=n, rounds=rounds, steps=steps, lr=lr, algo=algo, k=k, **extra))
    clients = pd.read_csv(res.run_dir / "clients.csv")
    parts = [sorted(g.loc[g.selected, "client"]) for _, g in clients.groupby("round")]
    assert len(parts) == rounds
    if k is None:
        assert all(len(p) == n for p in parts)
    else:
        assert all(len(p) == k for p in parts)
    A, b, _, _, F = quadratic_problem(n, 4, 0.01)
    ws = reference(A, b, 0.01, rounds, steps, lr, parts, prox_mu=extra.get("mu", 0.0))
    w_emu = np.load(res.run_dir / "model.npy")  # saved in the run's dtype, float64
    assert w_emu.dtype == np.float64
    np.testing.assert_allclose(w_emu, ws[-1], rtol=1e-10, atol=1e-12)
    # the recorded objective after every round equals F of the reference iterate
    f_ref = np.array([F(w) for w in ws])
    f_emu = res.metrics.loc[res.metrics["round"] >= 1, "test_loss"].to_numpy()
    np.testing.assert_allclose(f_emu, f_ref, rtol=1e-9)


def test_float32_default_precision_close(run_in):
    """The default float32 path stays within float32 round-off of the float64 reference."""
    sc = quadratic_scenario(rounds=20)
    sc["executor"] = {"name": "sequential"}
    res = run_in(sc)
    A, b, _, _, _ = quadratic_problem(6, 4, 0.01)
    ws = reference(A, b, 0.01, 20, 5, 0.1, [list(range(6))] * 20)
    w = np.load(res.run_dir / "model.npy")
    assert w.dtype == np.float32                     # a float32 run saves float32
    np.testing.assert_allclose(w, ws[-1], rtol=1e-5, atol=1e-6)


def test_one_local_step_is_gradient_descent(run_in):
    """With E = 1 and full participation FedAvg is gradient descent on F = (1/N) sum F_k:
    F(w_t) decreases monotonically (lr < 2/L) and w_t matches GD exactly."""
    res = run_in(quadratic_scenario(rounds=30, steps=1, lr=0.5))
    gap = res.metrics["gap"].to_numpy()
    assert gap[0] > 0 and (np.diff(gap) < 0).all()
    A, b, w_star, f_star, F = quadratic_problem(6, 4, 0.01)
    N = 6
    w = np.zeros(A.shape[1])
    for _ in range(30):
        w = w - 0.5 * ((A.sum(0) @ w - b.sum(0)) / N + 0.01 * w)
    np.testing.assert_allclose(gap[-1], F(w) - f_star, rtol=1e-8)


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_fedavg_weights_recorded_per_client(run_in, weighting):
    """clients.csv `weight`: n_k / m_t (McMahan Alg. 1) or 1/|S_t|, on unbalanced clients."""
    from conftest import tiny
    sc = tiny(**{"workload.partition": {"name": "lognormal", "sigma": 1.0, "min_size": 5},
                 "algorithm": {"name": "fedavg", "lr": 0.1, "weighting": weighting}})
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    sizes = pd.read_csv(res.run_dir / "partition.csv").set_index("client")["samples"]
    assert sizes.nunique() > 3
    for _, g in c[c["selected"]].groupby("round"):
        n = sizes.loc[g["client"]].to_numpy()
        expect = n / n.sum() if weighting == "samples" else np.full(len(g), 1 / len(g))
        np.testing.assert_allclose(g["weight"].to_numpy(), expect, rtol=1e-12)


def test_client_quadratic_given_and_drawn(run_in):
    """client_quadratic: f_i = 1/2 (w - c_i)^T diag(a_i) (w - c_i); FedAvg with full-batch
    gradients equals the NumPy recursion to 1e-10 (float64); the loss is f itself."""
    a = [[1.0, 2.0], [2.0, 1.0], [1.0, 1.0]]
    c = [[1.0, 0.0], [0.0, 1.0], [2.0, 3.0]]
    sc = quadratic_scenario(n=3, rounds=6, steps=3, lr=0.1)
    sc["workload"]["dataset"] = {"name": "client_quadratic", "a": a, "c": c, "init": [0.5, -1.0]}
    res = run_in(sc)
    A, C = np.array(a), np.array(c)
    x = np.array([0.5, -1.0])
    f = lambda w: np.mean(0.5 * (A * (w - C) ** 2).sum(1))          # noqa: E731
    xs = [x]
    for _ in range(6):
        ups = []
        for i in range(3):
            z = x.copy()
            for _ in range(3):
                z = z - 0.1 * A[i] * (z - C[i])
            ups.append(z)
        x = np.mean(ups, axis=0)
        xs.append(x)
    m = res.metrics
    np.testing.assert_allclose(np.load(res.run_dir / "model.npy"), xs[-1], rtol=1e-12)
    wstar = (A * C).sum(0) / A.sum(0)
    assert np.allclose(wstar, [0.75, 1.0])
    np.testing.assert_allclose(m["test_loss"].to_numpy(), [f(v) for v in xs], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m["gap"].to_numpy(), [f(v) - f(wstar) for v in xs], rtol=1e-9, atol=1e-12)
    # the recorded training loss is f_i at the clients' iterates: it includes 1/2 c^T A c
    assert m["train_loss"].iloc[1] > 0
    sc["workload"]["dataset"] = {"name": "client_quadratic", "dim": 5}
    drawn = run_in(sc, "drawn")
    assert drawn.summary["status"] == "complete" and len(np.load(drawn.run_dir / "model.npy")) == 5
