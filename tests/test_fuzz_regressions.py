"""Bugs the scenario generator (tests/test_fuzz.py, `make fuzz`) found, each as a plain test:
the smallest scenario that showed it, and what must hold instead."""

import numpy as np
import pandas as pd
import pytest

from emulator.scenario import schema as scenario
from emulator.errors import ScenarioError

from conftest import tiny


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # conftest.py


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
    """docs/algorithms/multimodel.md A5: M not dividing K is a validation error unless allow_unequal_groups;
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


@pytest.fixture
def deadline():
    """Fail (instead of hanging the suite) when a run takes longer than `seconds` of wall time:
    the bugs below were infinite loops."""
    import signal

    class TooLong(Exception):
        pass

    def arm(seconds):
        def ring(*_):
            raise TooLong(f"still running after {seconds} s: an infinite loop")
        signal.signal(signal.SIGALRM, ring)
        signal.alarm(seconds)
    yield arm
    signal.alarm(0)


def _instant(sc):
    for g in sc["clients"]["groups"]:
        g["compute"], g["network"] = {"model": "instant"}, {"model": "instant"}
    return sc


@pytest.mark.parametrize("protocol, algorithm, multi", [
    ({"name": "rounds", "local_steps": 1}, "fedavg", False),
    ({"name": "async", "local_steps": 1}, "fedasync", False),
    ({"name": "multi_model", "local_steps": 1, "assignment": "mfa_rand"}, "fedavg", True),
])
@pytest.mark.slow
def test_zero_time_rounds_under_a_virtual_time_budget_stall(run_in, deadline, protocol, algorithm, multi):
    """Every step and transfer instant and only `run.virtual_time` given: time never passes, so
    the budget is never reached; the run used to loop forever. It stalls after 1,000
    aggregations at one virtual time, keeping what it recorded."""
    sc = _instant(tiny(**{"clients.count": 2, "protocol": protocol, "algorithm": {"name": algorithm, "lr": 0.1},
                          "run": {"virtual_time": 5.0, "eval_every": 10**6}}))
    if multi:
        sc["workloads"] = [sc.pop("workload")] * 2
    deadline(300)   # a hang guard, not a speed bound: generous for a loaded machine
    res = run_in(sc)
    s = res.summary
    assert s["status"] == "stalled" and "virtual time" in s["message"] and s["virtual_time"] == 0.0
    assert 1000 <= s["rounds"] <= 1001
    assert res.metrics["virtual_time"].max() == 0.0


def test_rounds_wait_in_time_only_for_clients_whose_availability_is_in_time(run_in, deadline, tmp_path):
    """A per-round group offline this round next to a continuous-time group offline now: the
    round used to wait forever at one instant (the per-round group answered `next online: now`).
    It waits for the continuous-time client, then runs rounds nobody joins once it is gone."""
    trace = tmp_path / "online.csv"
    trace.write_text("client,start,end\n0,0.5,0.58\n")
    sc = tiny(**{"clients.count": 3, "protocol.select": {"model": "all"}})
    g = {k: v for k, v in sc["clients"]["groups"][0].items() if k != "fraction"}
    sc["clients"]["groups"] = [
        dict(g, name="per_round", count=2, availability={"model": "bernoulli", "p": 0.0}),
        dict(g, name="in_time", count=1, network={"model": "instant"}, compute={"model": "constant", "step_time": 0.01},
             availability={"model": "trace", "path": str(trace), "repeat": False})]
    deadline(300)   # a hang guard, not a speed bound: generous for a loaded machine
    res = run_in(sc)
    assert res.summary["status"] == "complete" and res.summary["rounds"] == 3
    m = res.metrics.set_index("round")
    assert m.loc[1, "virtual_time"] == pytest.approx(0.55) and m.loc[1, "participants"] == 1
    assert m.loc[2, "virtual_time"] == pytest.approx(0.58) and m.loc[2, "participants"] == 0   # went offline
    assert m.loc[3, "participants"] == 0 and m.loc[3, "virtual_time"] == m.loc[2, "virtual_time"]


@pytest.mark.parametrize("wait, status", [("all", "stalled"), ({"mode": "deadline", "seconds": 1.0}, "complete")])
def test_a_client_that_completes_no_step_never_finishes_its_round(run_in, deadline, wait, status):
    """`iterations` with 0 per period outside `intervals`: each step takes forever. The compute
    used to be a SimPy timeout at t = inf (virtual time and compute_time became inf). Now the
    client is busy for good: waiting for it stalls the run, a deadline drops it as late."""
    sc = tiny(**{"clients.count": 2, "protocol.select": {"model": "all"}, "protocol.wait": wait,
                 "run.rounds": 2})
    g = {k: v for k, v in sc["clients"]["groups"][0].items() if k != "fraction"}
    sc["clients"]["groups"] = [dict(g, name="ok", count=1),
                               dict(g, name="stuck", count=1, compute={"model": "iterations", "fixed": 0})]
    deadline(300)   # a hang guard, not a speed bound: generous for a loaded machine
    res = run_in(sc)
    s = res.summary
    assert s["status"] == status and np.isfinite(s["virtual_time"])
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert np.isfinite(c["compute_time"]).all()
    stuck = c[c["client"] == 1]
    assert (stuck["steps"] == 0).all() and (stuck["weight"] == 0).all()
    if status == "stalled":
        assert s["rounds"] == 0 and "nothing left to happen" in s["message"]
    else:
        assert s["rounds"] == 2 and (stuck["drop_reason"] == "late").all()


def test_async_clients_all_waiting_for_a_merge_stall(run_in, deadline):
    """Per-round availability under async: an offline client retries at the next merge. With every
    client offline at its first try nobody works towards a merge; SimPy used to raise 'No
    scheduled events left' (a crash). The run stalls."""
    sc = tiny(**{"clients.count": 2, "protocol": {"name": "async", "local_steps": 1},
                 "algorithm": {"name": "fedasync", "lr": 0.1}})
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": 0.0}
    deadline(300)   # a hang guard, not a speed bound: generous for a loaded machine
    res = run_in(sc)
    s = res.summary
    assert (s["status"], s["rounds"], s["virtual_time"]) == ("stalled", 0, 0.0)
    assert s["message"].startswith("nothing left to happen at virtual time 0: every client waits")
    assert list(res.metrics["round"]) == [0] and res.metrics["bytes_down"].tolist() == [0]
    assert len(pd.read_csv(res.run_dir / "clients.csv")) == 0            # nobody ever took part


@pytest.mark.parametrize("proto", [
    {"assignment": "mfa_rand", "allow_unequal_groups": True},    # one client, two models, one round
    {"assignment": "sequential"},                                 # model 1's turn never comes
])
def test_a_multi_model_run_too_short_to_train_every_model_is_no_invariant_violation(run_in, proto):
    """The invariant 'every model was aggregated' raised on runs where a model could not have
    been trained (fewer clients than models in every round, or a sequential run shorter than
    the first model's rounds). It now asks it of the models the protocol assigned clients to."""
    sc = _mm(1, **proto)
    sc["run"] = {"rounds": 1}
    sc["protocol"]["rounds_per_model"] = 2
    res = run_in(sc)
    assert res.summary["status"] == "complete" and res.summary["rounds"] == 1
    m = res.metrics[res.metrics["round"] >= 1]
    assert m["model"].tolist() == [0] and m["participants"].tolist() == [1]   # model 0's one round; model 1 none
    assert (res.metrics["model"] == 1).sum() == 1                              # model 1: only its round 0


def test_a_multi_model_round_cut_by_the_time_budget_owes_no_aggregation(run_in):
    """The models due an aggregation were counted when the round assigned them clients; a round
    cut short by run.virtual_time then raised 'model 0 was never aggregated'. A model is due once
    its round has ended."""
    sc = _mm(2)
    sc["workloads"] = sc["workloads"][:1]
    sc["run"] = {"rounds": 1, "virtual_time": 0.01}           # the 0.1 s of local steps never end in time
    res = run_in(sc)
    assert res.summary["status"] == "empty" and res.summary["rounds"] == 0   # nothing aggregated: an empty run
    assert list(res.metrics["round"]) == [0]


def test_the_run_directory_check_forgives_a_model_whose_only_round_the_budget_cut(run_in):
    """The generator's own run-directory check (tests/fuzz/checks.py) said 'model 0 was assigned
    clients but never aggregated' of a one-client, two-model run whose only local step ends
    exactly on run.virtual_time: the emulator (rightly) owes that model nothing. The check now
    forgives a model whose every assigned round is the last one of a run the budget ended."""
    from fuzz import checks
    sc = _mm(1, allow_unequal_groups=True)
    sc["protocol"]["local_steps"] = 1
    sc["clients"]["groups"][0]["compute"] = {"model": "constant", "step_time": 0.01}
    sc["run"] = {"rounds": 1, "virtual_time": 0.01}           # the step ends on the budget
    res = run_in(sc)
    assert res.summary["status"] == "empty" and res.summary["rounds"] == 0   # nothing aggregated: an empty run
    clients = pd.read_csv(res.run_dir / "clients.csv")
    assert list(clients["model"]) == [0]                     # model 0 was given the client
    assert checks.check_all(res.run_dir) == []
    sc["run"] = {"rounds": 1}                                 # without the budget it is aggregated
    res = run_in(sc, "whole")
    assert res.summary["rounds"] == 1 and checks.check_all(res.run_dir) == []


def test_a_summary_figure_at_minus_infinity_replays_equal(run_in):
    """make fuzz (200 examples) drew a multi-model run whose client_quadratic model starts at
    its exact minimiser (c_std 0, no local steps): final_log10_gap = -inf, correctly. The
    replay check compared -inf with -inf by subtraction (nan) and called it a difference."""
    from fuzz import checks
    sc = _mm(1, allow_unequal_groups=True)
    sc["workloads"] = [{"dataset": {"name": "quadratic"}, "model": {"name": "quadratic"}},
                       {"dataset": {"name": "client_quadratic", "dim": 1, "c_std": 0.0}, "model": {"name": "quadratic"}}]
    sc["protocol"]["local_steps"] = 0
    sc["clients"]["groups"][0]["compute"] = {"model": "constant", "step_time": 0.001}
    sc["run"] = {"rounds": 1, "virtual_time": 0.01}
    a = run_in(sc, "a")
    assert a.summary["models"][1]["final_log10_gap"] == -np.inf
    b = run_in(a.run_dir / "config.yaml", "b")
    assert checks.compare(a.run_dir, b.run_dir) == []


@pytest.mark.parametrize("cap", [None, 0.6])
def test_dms_weights_stay_exact_under_a_huge_slope(cap):
    """make fuzz drew DMS on clients of one sample each: the probes' sigma^2 is 0, floored at
    1e-12, so s ~ 1e12 and c + s tau_i cancelled two numbers of that order: the weights summed
    to 1.00003 (post-run invariant). s tau_i is now taken relative to its largest value."""
    from emulator.algorithms.tsfl import capped_waterfill, waterfill
    s = 0.123456789e12
    tau = [2, 2, 2, 1]                                   # the old code: sum off by 3e-5
    rho = waterfill(tau, s) if cap is None else capped_waterfill(tau, s, cap)
    assert rho.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(rho, [1 / 3, 1 / 3, 1 / 3, 0.0], atol=1e-12)


def test_an_empty_multi_model_round_counts_without_a_metrics_row(run_in):
    """make fuzz drew a one-workload multi-model run whose only client is never online: the
    round runs (summary rounds 1), nobody trains, so no model has a metrics row for it. The
    generator's file check treated a one-workload multi-model run as a single-model protocol
    (which records every round) and called it three inconsistencies."""
    from fuzz import checks
    sc = _mm(1)
    sc["workloads"] = sc["workloads"][:1]
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": 0.0}
    sc["run"] = {"rounds": 1}
    res = run_in(sc)
    assert res.summary["rounds"] == 1 and list(res.metrics["round"]) == [0]
    clients = pd.read_csv(res.run_dir / "clients.csv")
    assert list(clients["model"]) == [-1]
    assert checks.check_all(res.run_dir) == []


@pytest.mark.parametrize("path, value, where, says", [
    ("workload.dataset", 17, "workload.dataset", "expected a mapping, got 17"),
    ("clients.groups.0.compute", [1], "clients.groups[0].compute", "expected a mapping, got [1]"),
    ("protocol", 17, "protocol", "expected a mapping, got 17"),
    ("protocol.wait", {"seconds": 1.0}, "protocol.wait.mode", "missing `mode`; one of: all, deadline, first_k"),
    # make fuzz: a mode without its value was located at the tag pydantic inserts
    # (protocol.wait.deadline.seconds), a path no user writes
    ("protocol.wait", {"mode": "deadline"}, "protocol.wait.seconds", "required field missing"),
    ("protocol.wait", {"mode": "first_k"}, "protocol.wait.k", "required field missing"),
])
def test_a_component_block_that_is_no_mapping_or_lacks_its_mode_is_reported_where_it_is(path, value, where, says):
    """A number where a component's mapping goes was reported as `<path>.name: missing name`;
    a wait block without `mode` as `protocol.wait.name: missing name; one of:` (nothing)."""
    sc = tiny()
    node = sc
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    with pytest.raises(ScenarioError) as e:
        scenario.load(sc)
    assert e.value.problems == [(where, says)]
