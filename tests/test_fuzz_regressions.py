"""Bugs the scenario generator (tests/test_fuzz.py, `make fuzz`) found, each as a plain test:
the smallest scenario that showed it, and what must hold instead."""
import copy

import numpy as np
import pandas as pd
import pytest

from emulator import scenario
from emulator.errors import ScenarioError

from conftest import tiny


def _one_thread():
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    return n


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models: one torch thread is fastest, and never oversubscribes the cores."""
    import torch
    n = _one_thread()
    yield
    torch.set_num_threads(n)


def test_a_device_group_that_rounds_to_no_client_is_empty_not_a_crash(run_in):
    """Fractions 0.5 / 0.5 of one client give the second group no client (largest remainder):
    the run used to die building the world (IndexError in World.__init__)."""
    sc = tiny(**{"clients.count": 1, "protocol.select": {"model": "all"}})
    g = sc["clients"]["groups"][0]
    sc["clients"]["groups"] = [dict(g, name="a", fraction=0.5), dict(g, name="b", fraction=0.5,
                                                                     availability={"model": "bernoulli", "p": 0.5})]
    res = run_in(sc)
    assert res.summary["status"] == "complete" and res.summary["rounds"] == 3
    clients = pd.read_csv(res.run_dir / "clients.csv")
    assert set(clients["client"]) == {0} and len(clients) == 3
    part = pd.read_csv(res.run_dir / "partition.csv")
    assert part["group"].tolist() == ["a"]


@pytest.mark.parametrize("protocol", [
    {"name": "async", "local_steps": 2},
    {"name": "multi_model", "assignment": "mfa_rand", "local_steps": 2},
])
def test_energy_is_summed_per_group_under_sparse_client_logs(run_in, protocol):
    """Async logs one client per job and multi-model one group per model: summing energy per
    device group used a mask of all N clients on a log of fewer rows (IndexError)."""
    sc = tiny(**{"clients.count": 4, "protocol": protocol, "run.rounds": 3})
    if protocol["name"] == "multi_model":
        sc["workloads"] = [sc.pop("workload")] * 2
    sc["algorithm"] = {"name": "fedasync" if protocol["name"] == "async" else "fedavg", "lr": 0.1}
    g = {k: v for k, v in sc["clients"]["groups"][0].items() if k != "fraction"}
    sc["clients"]["groups"] = [dict(g, name="a", count=1, energy={"compute_watts": 2.0, "transmit_watts": 1.0}),
                               dict(g, name="b", count=3, energy={"compute_watts": 5.0, "transmit_watts": 1.0})]
    res = run_in(sc)
    clients = pd.read_csv(res.run_dir / "clients.csv")
    group = np.where(clients["client"] == 0, "a", "b")
    want = {k: float(clients["energy_j"][group == k].sum()) for k in ("a", "b")}
    assert res.summary["energy_j_by_group"] == pytest.approx(want)
    assert res.summary["energy_j_total"] == pytest.approx(sum(want.values())) and want["b"] > 0


def _mm(n=4, **proto):
    sc = tiny(**{"clients.count": n, "run.rounds": 3})
    sc["workloads"] = [sc.pop("workload")] * 2
    sc["protocol"] = {"name": "multi_model", "local_steps": 2, "assignment": "mfa_rand", **proto}
    return sc


@pytest.mark.parametrize("n, proto, path", [
    (3, {}, "clients.count"),                              # every client, 3 of them, for 2 models
    (4, {"k": 3}, "protocol.k"),
    (4, {"k": 3, "assignment": "mfa_rr"}, "protocol.k"),
])
def test_models_that_cannot_get_equal_groups_are_a_validation_error(n, proto, path):
    """multimodel.md A5: M not dividing K is a validation error unless allow_unequal_groups;
    it used to validate and then die mid-run (ValueError in devices/assignment.split)."""
    with pytest.raises(ScenarioError) as e:
        scenario.load(_mm(n, **proto))
    assert len(e.value.problems) == 1 and e.value.problems[0][0] == path
    assert "allow_unequal_groups" in e.value.problems[0][1]
    scenario.load(_mm(n, allow_unequal_groups=True, **proto))            # allowed when asked for
    scenario.load(_mm(n, **{**proto, "assignment": "sequential"}))       # one model at a time: no split


def test_fewer_clients_online_than_split_equally_sit_the_remainder_out(run_in):
    """K = every available client, N = 4 divisible by M = 2, but availability leaves an odd
    number online: the equal split takes the largest multiple of M (the rest are idle, model -1)
    instead of dying mid-run."""
    sc = _mm(4)
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": 0.6}
    sc["run"]["rounds"] = 8
    res = run_in(sc)
    assert res.summary["status"] == "complete"
    c = pd.read_csv(res.run_dir / "clients.csv")
    trained = c[c["model"] >= 0].groupby(["round", "model"]).size().unstack(fill_value=0)
    assert (trained[0] == trained[1]).all()                     # equal groups every round
    odd = c[c["available"]].groupby("round").size() % 2 == 1
    assert odd.any()                                            # the case did occur
    for r in odd[odd].index:
        idle = c[(c["round"] == r) & (c["model"] == -1) & c["available"]]
        assert len(idle) == 1                                   # one online client sat it out
