"""Regression tests for runs that used to finish `complete` with wrong numbers (issue
"Honest results and open seams", section 1), each failing on the code before the fix."""
import json

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis import metrics as AM
from emulator.scenario import schema as scenario
from emulator.algorithms.fedavg import FedAvg
from emulator.errors import InvariantError, ScenarioError

from conftest import tiny


def problems_of(sc, overrides=()):
    with pytest.raises(ScenarioError) as e:
        scenario.load(sc, overrides)
    return e.value.problems


# --------------------------------------------------------------------------- several models
@pytest.mark.parametrize("proto", [
    {"name": "rounds", "local_steps": 2},
    {"name": "intervals", "interval": 1.0},
    {"name": "async", "local_steps": 2},
])
def test_workloads_under_a_single_model_protocol_is_refused(proto):
    sc = tiny()
    wl = sc.pop("workload")
    sc["workloads"] = [wl, dict(wl, model={"name": "mlp", "hidden": 8})]
    sc["protocol"] = proto
    if proto["name"] == "async":
        sc["algorithm"] = {"name": "fedasync", "lr": 0.1}
    (path, msg), = problems_of(sc)
    assert path == "workloads"
    assert "protocol.name" in msg and repr(proto["name"]) in msg and "2 workloads" in msg
    assert msg.endswith("protocols that train several models: multi_model")   # those declaring multi_model


# --------------------------------------------------------------------------- async with dropouts
def async_dropout_scenario(merges=25):
    sc = tiny(**{"run.rounds": merges, "clients.count": 8})
    sc["clients"]["groups"][0]["availability"] = {"model": "markov_time", "mean_on": 0.8, "mean_off": 0.6}
    sc["protocol"] = {"name": "async", "local_steps": 5}
    sc["algorithm"] = {"name": "fedasync", "lr": 0.1}
    return sc


def test_async_lost_work_is_recorded_without_creating_aggregations(run_in):
    res = run_in(async_dropout_scenario())
    c = pd.read_csv(res.run_dir / "clients.csv")
    m = pd.read_csv(res.run_dir / "metrics.csv")
    s = json.loads((res.run_dir / "summary.json").read_text())
    merged, lost = c[c["weight"] > 0], c[c["dropped"]]
    assert len(lost) >= 5 and (lost["drop_reason"] == "offline").all() and (lost["weight"] == 0).all()
    # one row per client job; one row per (round, client) among merges; one merge per round
    assert not c.duplicated(["client", "job"]).any()
    assert not merged.duplicated(["round", "client"]).any()
    assert sorted(merged["round"]) == list(range(1, 26)) and len(c) == 25 + len(lost)
    # the delay metrics of the merges alone (each merge aggregates one client)
    from emulator.measures.participation import delay_metrics
    want = delay_metrics([merged.loc[merged["round"] == r, "client"].to_numpy() for r in range(1, 26)], 8)
    assert m["tau"].iloc[1:].astype(int).tolist() == want["tau"].tolist()
    assert s["delay"]["0"]["tau_max"] == want["tau_max"] == m["tau"].max()
    assert s["delay"]["0"]["tau_avg"] == pytest.approx(want["tau_avg"])
    # analysis / `flemu report` compute the same from the same run
    per_run = AM.run_metrics(analysis.load(res.run_dir))
    assert per_run["tau_max"].iloc[0] == want["tau_max"]
    assert per_run["tau_avg"].iloc[0] == pytest.approx(want["tau_avg"])
    # availability is not recorded per merge under async: the figure is left out, not 1/N
    assert np.isnan(per_run["availability_mean"].iloc[0])
    assert s["rounds"] == 25


# --------------------------------------------------------------------------- counts and files
def test_select_k_larger_than_the_fleet_is_a_scenario_error():
    (path, msg), = problems_of(tiny(**{"protocol.select": {"model": "uniform", "k": 7}}))
    assert path == "protocol.select.k" and "7" in msg and "clients.count is 6" in msg
    (path, msg), = problems_of(tiny(**{"protocol.wait": {"mode": "first_k", "k": 9}}))
    assert path == "protocol.wait.k"
    (path, _), = problems_of(tiny(**{"protocol.select": {"model": "biased", "p": [0.5] * 5}}))
    assert path == "protocol.select.p"


def test_k_larger_than_the_available_clients_takes_them_all(run_in):
    sc = tiny(**{"run.rounds": 6, "protocol.select": {"model": "uniform", "k": 5}})
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": 0.4}
    c = pd.read_csv(run_in(sc).run_dir / "clients.csv")
    per = c.groupby("round")[["available", "selected"]].sum()
    assert (per["selected"] == per["available"].clip(upper=5)).all()
    assert (per["available"] < 5).any()           # the legal case did happen


def test_empty_scenario_file_says_so(tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("# nothing yet\n")
    with pytest.raises(ScenarioError) as e:
        scenario.load(f)
    (path, msg), = e.value.problems
    assert "the file is empty" in msg and "NoneType" not in str(e.value)


# --------------------------------------------------------------------------- aggregation result
def test_rounds_records_the_algorithms_round_and_client_columns(run_in, monkeypatch):
    """An algorithm's per-round and per-client columns reach metrics.csv and clients.csv
    under `rounds` (the protocol used to drop them)."""
    real = FedAvg.aggregate

    def aggregate(self, t, arrivals):
        agg = real(self, t, arrivals)
        agg.round_cols["seen"] = 10 * t + len(arrivals)
        agg.client_cols["doubled"] = {a.client: 2.0 * a.client for a in arrivals}
        return agg
    monkeypatch.setattr(FedAvg, "aggregate", aggregate)
    monkeypatch.setattr(FedAvg, "cohort_path", False)     # declared: aggregate is not the cohort rule now
    res = run_in(tiny())
    m = pd.read_csv(res.run_dir / "metrics.csv")
    assert m["seen"].iloc[1:].tolist() == [13.0, 23.0, 33.0]
    c = pd.read_csv(res.run_dir / "clients.csv")
    sel = c[c["weight"] > 0]
    assert (sel["doubled"] == 2.0 * sel["client"]).all() and c.loc[c["weight"] == 0, "doubled"].isna().all()


def test_message_sizes_are_declared_once_and_checked(run_in, monkeypatch):
    """Bytes follow the declared vectors per message; an upload that disagrees with the
    declaration is a flemu bug, stopped at once."""
    res = run_in(tiny(), "one")
    dim = 64 * 10 + 10
    c = pd.read_csv(res.run_dir / "clients.csv")
    sel = c[c["selected"]]
    assert (sel["bytes_up"] == dim * 4).all() and (sel["bytes_down"] == dim * 4).all()
    monkeypatch.setattr(FedAvg, "up_vectors", 2)
    with pytest.raises(InvariantError, match="declares"):
        run_in(tiny(), "two")
