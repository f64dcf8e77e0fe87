"""The example plugins in examples/, each run from its scenario file and held to a number:
the server optimisers (FedAvgM, FedAdam, FedYogi) and FedNova against NumPy references on
the quadratic (full-batch gradients, float64: 1e-9 relative on the objective every round), the
own dataset and nn.Module against an accuracy bound, the night-charging availability and the
step-time function against their closed forms in clients.csv."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import emulator
from emulator.workloads.datasets import quadratic_problem_dense
from registry_snapshot import registry_snapshot

pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny models: one thread is fastest


@pytest.fixture(autouse=True)
def registry_restored():
    with registry_snapshot():
        yield

EX = Path(__file__).resolve().parent.parent / "examples"
N, MU = 6, 0.01


def local_gd(A, b, w, k, steps, lr):
    v = w.copy()
    for _ in range(steps):
        v = v - lr * (A[k] @ v - b[k] + MU * v)
    return v


def server_reference(rule, rounds, steps, lr, **p):
    """Every client runs `steps` GD steps from x_t; the server applies `rule` to the mean."""
    A, b, _, _, F = quadratic_problem_dense(N, 4, MU)
    x = np.zeros(A.shape[1])
    state = {"m": np.zeros_like(x), "v": np.full_like(x, p.get("tau", 0.0) ** 2), "mom": np.zeros_like(x)}
    losses = []
    for _ in range(rounds):
        avg = np.mean([local_gd(A, b, x, k, steps, lr) for k in range(N)], axis=0)
        x = rule(x, avg, state, **p)
        losses.append(F(x))
    return x, np.array(losses)


def adam(x, avg, s, server_lr, beta1, beta2, tau, yogi=False):
    d = avg - x
    s["m"] = beta1 * s["m"] + (1 - beta1) * d
    s["v"] = s["v"] - (1 - beta2) * d * d * np.sign(s["v"] - d * d) if yogi else beta2 * s["v"] + (1 - beta2) * d * d
    return x + server_lr * s["m"] / (np.sqrt(s["v"]) + tau)


def momentum(x, avg, s, server_lr, beta):
    s["mom"] = beta * s["mom"] + (x - avg)
    return x - server_lr * s["mom"]


@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "fedavgm"])
def test_server_optimisers_match_numpy(tmp_path, name):
    if name == "fedavgm":
        res = emulator.run(EX / "fedavgm.yaml", out=tmp_path / name)
        x, f = server_reference(momentum, 20, 5, 0.1, server_lr=1.0, beta=0.5)
    else:
        res = emulator.run(EX / "fedadam.yaml", overrides=[f"algorithm.name={name}"], out=tmp_path / name)
        x, f = server_reference(lambda *a, **k: adam(*a, **k, yogi=name == "fedyogi"), 20, 5, 0.1,
                                server_lr=0.05, beta1=0.9, beta2=0.99, tau=1e-3)
    m = res.metrics
    np.testing.assert_allclose(m.loc[m["round"] >= 1, "test_loss"].to_numpy(), f, rtol=1e-9)
    np.testing.assert_allclose(np.load(res.run_dir / "model.npy"), x, rtol=1e-6, atol=1e-7)   # float32 file


def test_fednova_matches_numpy_under_intervals(tmp_path):
    res = emulator.run(EX / "fednova.yaml", out=tmp_path / "nova")
    clients = pd.read_csv(res.run_dir / "clients.csv")
    # examples/step_time.py: client c steps 0.1 (1 + c % 3) s, so 10, 5, 3 steps fit in 1 s
    st = 0.1 * (1 + clients["client"] % 3)
    np.testing.assert_array_equal(clients["steps"], [{1: 10, 2: 5, 3: 3}[k] for k in 1 + clients["client"] % 3])
    np.testing.assert_allclose(clients["compute_time"], clients["steps"] * st, rtol=1e-12)
    A, b, _, _, F = quadratic_problem_dense(N, 4, MU)
    x = np.zeros(A.shape[1])
    losses = []
    for t in range(1, 31):
        rows = clients[(clients["round"] == t) & (clients["steps"] > 0)]
        tau = rows["steps"].to_numpy(float)
        p = np.full(len(rows), 1 / len(rows))
        tau_eff = p @ tau
        d = [(x - local_gd(A, b, x, k, int(s), 0.05)) / s for k, s in zip(rows["client"], tau)]
        x = x - tau_eff * np.sum([pi * di for pi, di in zip(p, d)], axis=0)
        losses.append(F(x))
        np.testing.assert_allclose(rows["weight"], tau_eff * p / tau, rtol=1e-12)
    m = res.metrics
    np.testing.assert_allclose(m.loc[m["round"] >= 1, "test_loss"].to_numpy(), losses, rtol=1e-9)


def test_own_dataset_and_module(tmp_path):
    res = emulator.run(EX / "own_data.yaml", out=tmp_path / "own")
    assert res.summary["dataset"] == "blobs" and res.summary["params"] == 8 * 16 + 16 + 16 * 4 + 4
    assert res.summary["final_test_acc"] >= 0.95         # four well-separated blobs, 200 test points
    from emulator import registry
    assert registry.get("dataset", "blobs").origin == str(EX / "own_data.py")


def test_night_charging_availability_closed_form(tmp_path):
    """day 40 s, night 20 s, two zones: zone 0 (even clients) online in [0, 20), zone 1 in
    [20, 40). Rounds of 3 one-second steps start at 0, 3, ..., 18: the round starting at 18
    ends at 21, so zone 0 is interrupted at 20 (all four dropped) and zone 1 takes over."""
    res = emulator.run(EX / "night_charging.yaml", out=tmp_path / "night")
    m, c = res.metrics, pd.read_csv(res.run_dir / "clients.csv")
    starts = m["virtual_time"].to_numpy()[:-1]
    for t, start in zip(range(1, 13), starts):
        rows = c[c["round"] == t]
        want = ((start + (rows["client"] % 2) * 20.0) % 40.0) < 20.0
        np.testing.assert_array_equal(rows["available"].to_numpy(), want.to_numpy(), err_msg=f"round {t}")
    assert m["virtual_time"].tolist() == [0, 3, 6, 9, 12, 15, 18, 20, 23, 26, 29, 32, 35]
    assert m["dropped"].tolist() == [0] * 7 + [4] + [0] * 5
    assert m["participants"].tolist() == [0] + [4] * 6 + [0] + [4] * 5


@pytest.mark.slow
def test_fast_first_selector_plugin(tmp_path):
    """examples/fast_first.py from the command line: the fast group (clients 0-5) takes every
    round, three at a time in turns ([0, 1, 2], [3, 4, 5], ...); the slow group never runs.
    Each round lasts a fast client's round: download + 5 steps of 0.1 s + upload."""
    import subprocess
    import sys
    out = tmp_path / "ff"
    r = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(EX / "fast_first.yaml"), "--out", str(out),
                        "--quiet"], capture_output=True, text=True, cwd=EX.parent)
    assert r.returncode == 0, r.stderr
    c, m = pd.read_csv(out / "clients.csv"), pd.read_csv(out / "metrics.csv")
    picked = c[c["selected"]].groupby("round")["client"].apply(list).tolist()
    assert picked == [[0, 1, 2], [3, 4, 5]] * 3
    nb_down, nb_up = c[c["selected"]]["bytes_down"].iloc[0], c[c["selected"]]["bytes_up"].iloc[0]
    one = (0.01 + nb_down * 8 / 10e6) + 5 * 0.1 + (0.01 + nb_up * 8 / 10e6)
    assert m["round_time"].dropna().to_numpy() == pytest.approx([one] * 6, rel=1e-12)
