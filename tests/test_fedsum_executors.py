"""The FedSUM family and SCAFFOLD through both executors, and the stochastic test T12.

- Sequential and batched executors give the same iterates on `cnn_mnist` for every method
  whose clients train with a correction vector (FedSUM, FedSUM-CR, SCAFFOLD) or read the mean
  raw gradient at a fixed point (FedSUM-B: learning rate 0), float64 as in test_batched.py
  (in float32 the two executors can break max-pool ties differently: see docs/fedsum_results.md).
- T12 (docs/algorithms/fedsum.md 8), adapted to flemu's stochastic quadratic (`client_quadratic` with a
  centred finite sum of gradient noise, mini-batches of 8): N = 10, d = 5, heterogeneous
  centres, independent participation p_i = 0.1 + 0.8 i / 9, K = 5, 20 rounds, 3 seeds: the
  median over seeds of f(x^T) - f* of each FedSUM variant is below 0.02 x FedAvg's (the spec
  asks 0.5x; measured 0.002x, and 0.5x still passes with gamma^t missing its K); the same seed
  gives an identical metrics.csv, and the sequential executor the same gaps."""
import numpy as np
import pandas as pd
import pytest

from reference.fedsum_harness import run_world


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A small 28 x 28 10-class image set (class prototypes + noise) as a user .npz."""
    rng = np.random.default_rng(0)
    proto = rng.normal(0, 1, (10, 28, 28))
    y = rng.integers(0, 10, 200)
    x = (proto[y] + rng.normal(0, 1.0, (200, 28, 28))).astype(np.float32)
    path = tmp_path_factory.mktemp("data") / "imgs.npz"
    np.savez(path, x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:])
    return str(path)


def cnn_scenario(path, algo, executor):
    return {"name": "ex", "seed": 1,
            "workload": {"dataset": {"name": "npz", "path": path},
                         "partition": {"name": "dirichlet", "alpha": 0.3, "min_size": 8},
                         "model": {"name": "cnn_mnist"}, "batch_size": 8},
            "clients": {"count": 6, "groups": [{"name": "g", "fraction": 1.0,
                                                "compute": {"model": "constant", "step_time": 0.1},
                                                "network": "instant", "availability": {"model": "bernoulli", "p": 0.7}}]},
            "protocol": {"name": "rounds", "select": {"model": "all"}, "local_steps": 2},
            "algorithm": dict(algo), "run": {"rounds": 2},
            "executor": {"name": executor, "dtype": "float64"}}


@pytest.mark.parametrize("algo", [{"name": "fedsum_b", "lr": 0.05}, {"name": "fedsum", "lr": 0.05},
                                  {"name": "fedsum_cr", "lr": 0.05, "lr_schedule": "inv_sqrt"},
                                  {"name": "scaffold", "lr": 0.05}], ids=lambda a: a["name"])
@pytest.mark.slow
def test_sequential_and_batched_agree_on_cnn_mnist(images, algo):
    runs = {}
    for ex in ("sequential", "batched"):
        states = []
        xs, w = run_world(cnn_scenario(images, algo, ex),
                          each=lambda a, row: states.append({k: a.states.table(k).clone() for k in a.states.kinds()}))
        runs[ex] = (np.array(xs), states, w.executor.stats)
    (xs, ss, st_s), (xb, sb, st_b) = runs["sequential"], runs["batched"]
    assert st_s == st_b and st_s.jobs_computed >= 6                    # same jobs, several stacked a round
    for t in range(1, len(xs)):
        step = np.linalg.norm(xs[t] - xs[0])
        assert step > 1e-3                                              # the model moves
        assert np.linalg.norm(xb[t] - xs[t]) <= 1e-5 * np.linalg.norm(xs[t])
        assert np.linalg.norm(xb[t] - xs[t]) <= 1e-9 * step            # float64: far tighter than 1e-5
        for kind, tab in ss[t].items():                                 # per-client state (y_i, c_i, x_hat_i)
            assert float((sb[t][kind] - tab).norm()) <= 1e-9 * max(float(tab.norm()), 1e-12)


# --------------------------------------------------------------------------- T12
def t12_scenario(algo, seed, executor="batched", rounds=20):
    return {"name": "t12", "seed": seed,
            "workload": {"dataset": {"name": "client_quadratic", "dim": 5, "c_std": 2.0, "a_range": [0.5, 2.0],
                                     "grad_noise": 2.0, "noise_samples": 50},
                         "model": {"name": "quadratic"}, "batch_size": 8},
            "clients": {"count": 10, "groups": [{"name": "g", "fraction": 1.0,
                                                 "compute": {"model": "constant", "step_time": 0.1},
                                                 "network": "instant", "availability": {
                                                     "model": "bernoulli", "p": [0.1 + 0.8 * i / 9 for i in range(10)]}}]},
            "protocol": {"name": "rounds", "select": {"model": "all"}, "local_steps": 5},
            "algorithm": {"name": algo, "lr": 0.05}, "run": {"rounds": rounds, "eval_every": 10},
            "executor": {"name": executor, "dtype": "float64"}}


@pytest.mark.slow
def test_t12_family_beats_fedavg_under_heterogeneous_participation(run_in):
    med = {}
    for algo in ("fedavg_active", "fedsum_b", "fedsum", "fedsum_cr"):
        gaps = []
        for seed in range(3):
            res = run_in(t12_scenario(algo, seed), f"{algo}_{seed}")
            gaps.append(float(res.metrics["gap"].iloc[-1]))
        med[algo] = np.median(gaps)
    for algo in ("fedsum_b", "fedsum", "fedsum_cr"):
        assert med[algo] < 0.02 * med["fedavg_active"], med
    again = run_in(t12_scenario("fedsum", 0), "again")                   # same seed: identical metrics.csv
    first = pd.read_csv(again.run_dir.parent / "fedsum_0" / "metrics.csv").drop(columns="wall_time")
    pd.testing.assert_frame_equal(first, pd.read_csv(again.run_dir / "metrics.csv").drop(columns="wall_time"))
    seq = run_in(t12_scenario("fedsum", 0, "sequential"), "seq")
    np.testing.assert_allclose(seq.metrics["gap"], again.metrics["gap"], rtol=1e-9, atol=1e-12)
