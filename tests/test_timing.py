"""Exact virtual seconds and bytes for hand-computed rounds (two clients, logreg on digits).

Message: logreg on 8x8 digits has 64*10 + 10 = 650 parameters -> 650 * 4 + 100 overhead
= 2,700 bytes = 21,600 bits each way.
Client A: 4 steps x 0.1 s; latency 0.01 s, down 2 Mbit/s, up 1 Mbit/s
  down 0.01 + 21600/2e6 = 0.0208; compute 0.4; up 0.01 + 21600/1e6 = 0.0316 -> 0.4524
Client B: 4 steps x 0.25 s; latency 0.05 s, down 4 Mbit/s, up 0.5 Mbit/s
  down 0.05 + 21600/4e6 = 0.0554; compute 1.0; up 0.05 + 21600/5e5 = 0.0932 -> 1.1486
"""
import numpy as np
import pandas as pd


def two_clients(wait="all", rounds=3):
    return {
        "name": "two", "seed": 1,
        "workload": {"dataset": {"name": "digits"}, "partition": {"name": "iid"},
                     "model": {"name": "logreg"}, "batch_size": 8},
        "clients": {"count": 2, "groups": [
            {"name": "A", "count": 1, "compute": {"model": "constant", "step_time": 0.1},
             "network": {"latency": 0.01, "up_mbps": 1, "down_mbps": 2}},
            {"name": "B", "count": 1, "compute": {"model": "constant", "step_time": 0.25},
             "network": {"latency": 0.05, "up_mbps": 0.5, "down_mbps": 4}}]},
        "protocol": {"name": "rounds", "select": {"model": "all"}, "local_steps": 4, "wait": wait},
        "algorithm": {"name": "fedavg", "lr": 0.1},
        "run": {"rounds": rounds},
        "network": {"overhead_bytes": 100},
    }


def test_wait_all_exact_seconds_and_bytes(run_in):
    res = run_in(two_clients())
    m = res.metrics
    r = m[m["round"] >= 1]
    assert np.allclose(r["round_time"], 1.1486, rtol=0, atol=1e-12)
    assert np.allclose(r["virtual_time"], [1.1486, 2.2972, 3.4458], rtol=0, atol=1e-12)
    assert (r["bytes_up"] == 5400).all() and (r["bytes_down"] == 5400).all()
    c = pd.read_csv(res.run_dir / "clients.csv")
    a, b = c[c.client == 0], c[c.client == 1]
    assert np.allclose(a["comm_time"], 0.0208 + 0.0316, atol=1e-12)
    assert np.allclose(b["comm_time"], 0.0554 + 0.0932, atol=1e-12)
    assert np.allclose(a["compute_time"], 0.4) and np.allclose(b["compute_time"], 1.0)
    assert (c["steps"] == 4).all() and (c["bytes_up"] == 2700).all() and (c["bytes_down"] == 2700).all()
    assert not c["dropped"].any()
    # sample-weighted FedAvg: weights n_k / (n_A + n_B) from the partition
    n = pd.read_csv(res.run_dir / "partition.csv")["samples"].to_numpy()
    assert abs(int(n[0]) - int(n[1])) <= 1
    assert np.allclose(a["weight"], n[0] / n.sum()) and np.allclose(b["weight"], n[1] / n.sum())
    assert res.summary["bytes_up"] == 3 * 5400


def test_deadline_drops_the_late_client(run_in):
    res = run_in(two_clients({"mode": "deadline", "seconds": 1.0}))
    r = res.metrics[res.metrics["round"] >= 1]
    assert np.allclose(r["round_time"], 1.0) and np.allclose(r["virtual_time"], [1.0, 2.0, 3.0])
    assert (r["participants"] == 1).all() and (r["dropped"] == 1).all() and (r["bytes_up"] == 2700).all()
    c = pd.read_csv(res.run_dir / "clients.csv", keep_default_na=False)
    b = c[c.client == 1]
    assert b["dropped"].all() and (b["drop_reason"] == "late").all() and (b["weight"] == 0).all()
    # B stopped 1.0 - 0.0554 s into its 1.0 s of compute: 3 of 4 steps done, nothing uploaded
    assert np.allclose(b["compute_time"], 1.0 - 0.0554, atol=1e-12)
    assert (b["steps"] == 3).all() and (b["bytes_up"] == 0).all()
    assert np.allclose(c[c.client == 0]["weight"], 1.0)


def test_first_k_closes_at_the_kth_arrival(run_in):
    res = run_in(two_clients({"mode": "first_k", "k": 1}, rounds=2))
    r = res.metrics[res.metrics["round"] >= 1]
    assert np.allclose(r["round_time"], 0.4524, atol=1e-12)
    c = pd.read_csv(res.run_dir / "clients.csv")
    b = c[c.client == 1]
    assert np.allclose(b["compute_time"], 0.4524 - 0.0554, atol=1e-12)
    assert (b["steps"] == 1).all() and b["dropped"].all()
    # the dropped client's work is never computed for real: 4 steps virtual time each round
    s = res.summary
    assert s["grad_steps_computed"] == 2 * 4
    assert s["grad_steps_virtual"] == 2 * 4 + 2 * 1
    assert s["grad_steps_skipped"] == 2


def test_explicit_instant_network_takes_no_time(run_in):
    sc = two_clients()
    for g in sc["clients"]["groups"]:
        g["network"] = "instant"
    res = run_in(sc)
    assert np.allclose(res.metrics[res.metrics["round"] >= 1]["round_time"], 1.0)
