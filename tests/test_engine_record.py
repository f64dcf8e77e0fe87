"""Engine equivalence on one recorder: the same scenarios through `engine: process` and
`engine: vector` write the same clients.csv and metrics.csv (less wall_time), byte for byte
(both engines' outcomes reach the round log through `outcome.record_outcomes`, docs/engine.md)."""
import io

import numpy as np
import pandas as pd
import pytest

from conftest import tiny


def scenario(wait, broadcast="unicast", stuck=False):
    sc = tiny(**{"clients.count": 6, "run.rounds": 3, "protocol.select": {"model": "uniform", "k": 4},
                 "protocol.wait": wait, "protocol.broadcast": broadcast})
    g = {k: v for k, v in sc["clients"]["groups"][0].items() if k != "fraction"}
    link = {"latency": 0.01, "up_mbps": 1, "down_mbps": 3, "jitter": 0.1}
    sc["clients"]["groups"] = [
        dict(g, name="fast", count=3, network=link),
        dict(g, name="slow", count=3, compute={"model": "lognormal", "mean_step_time": 0.2, "sigma": 0.5},
             network=link)]
    if stuck:          # a client whose steps never end (0 iterations per period): the round never closes
        sc["protocol"]["select"] = {"model": "all"}
        sc["clients"]["groups"][1]["compute"] = {"model": "iterations", "fixed": 0}
        sc["clients"]["groups"][1]["count"] = 1
        sc["clients"]["count"] = 4
    return sc


def written(run_in, sc, engine):
    res = run_in(dict(sc, protocol=dict(sc["protocol"], engine=engine)), engine)
    assert res.summary["engine"] == engine
    d = res.run_dir
    metrics = pd.read_csv(d / "metrics.csv").drop(columns=["wall_time"])
    buf = io.StringIO()
    metrics.to_csv(buf, index=False)
    work = {k: res.summary[k] for k in ("jobs_submitted", "grad_steps_virtual", "jobs_computed", "grad_steps_computed")}
    return (d / "clients.csv").read_bytes(), buf.getvalue(), res.summary["status"], res.summary["virtual_time"], work


CASES = {
    "deadline": ({"mode": "deadline", "seconds": 1.2}, "unicast", False),
    "deadline-multicast": ({"mode": "deadline", "seconds": 1.2}, "multicast", False),
    "first_k": ({"mode": "first_k", "k": 2}, "unicast", False),
    "stuck-all": ("all", "unicast", True),
    "stuck-all-multicast": ("all", "multicast", True),
    # rounds that close without the stuck client: at the 3rd upload (all the finite ones) or
    # at the deadline; the stuck client is late every round and the run completes
    "stuck-first_k": ({"mode": "first_k", "k": 3}, "unicast", True),
    "stuck-deadline": ({"mode": "deadline", "seconds": 1.2}, "unicast", True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_both_engines_write_the_same_files(run_in, case):
    wait, broadcast, stuck = CASES[case]
    sc = scenario(wait, broadcast, stuck)
    proc, vec = written(run_in, sc, "process"), written(run_in, sc, "vector")
    assert proc[0] == vec[0]                       # clients.csv, byte for byte
    assert proc[1] == vec[1]                       # metrics.csv less wall_time
    assert proc[2:] == vec[2:]                     # status, virtual time
    c = pd.read_csv(io.BytesIO(proc[0]))
    if stuck and wait == "all":                    # the round never closed: the run stalled
        assert proc[2] == "stalled" and len(c) == 4 and (c["bytes_up"] > 0).sum() == 3
        assert (c["bytes_down"] > 0).sum() == (1 if broadcast == "multicast" else 4)
    elif stuck:                                    # every round closed without the stuck client
        assert proc[2] == "complete" and len(c) == 12 and (c["bytes_up"] > 0).sum() == 9
        assert (c.loc[c["drop_reason"] == "late", "client"] == 3).sum() == 3 and c["dropped"].sum() == 3
    else:                                          # not vacuous: someone was late, someone arrived
        assert proc[2] == "complete" and (c["drop_reason"] == "late").any() and (c["bytes_up"] > 0).any()
        if broadcast == "multicast":               # one broadcast's bytes per round
            assert ((c.groupby("round")["bytes_down"].apply(lambda b: (b > 0).sum())) == 1).all()


def test_process_engine_rows_are_the_outcome_formulas(run_in, tmp_path):
    """A round only the process engine can run (continuous-time availability): one client goes
    offline mid-computation, one arrives, one is late at the deadline. Its clients.csv rows are
    what `record_outcomes` makes of the sheet's ends, to the last bit: comm_time = download
    (+ upload), a stopped computation's elapsed seconds and floor(steps x elapsed / duration)
    steps, bytes of what arrived, the drop reasons."""
    trace = tmp_path / "online.csv"
    trace.write_text("client,start,end\n0,0,0.5\n1,0,100\n")     # client 0 leaves at 0.5 s
    link = {"latency": 0.05, "up_mbps": 8, "down_mbps": 8}
    avail = {"model": "trace", "path": str(trace), "repeat": False}
    sc = tiny(**{"clients.count": 3, "run.rounds": 1, "protocol.select": {"model": "all"}, "protocol.local_steps": 10,
                 "protocol.wait": {"mode": "deadline", "seconds": 1.5}})
    sc["clients"]["groups"] = [
        {"name": "fast", "count": 2, "compute": {"model": "constant", "step_time": 0.1}, "network": link,
         "availability": avail},
        {"name": "slow", "count": 1, "compute": {"model": "constant", "step_time": 0.2}, "network": link}]
    res = run_in(sc)
    assert res.summary["engine"] == "process"
    c = pd.read_csv(res.run_dir / "clients.csv").set_index("client")
    down, up = int(c.loc[1, "bytes_down"]), int(c.loc[1, "bytes_up"])
    assert down > 0 and up > 0
    d, u = 0.05 + down * 8 / 8e6, 0.05 + up * 8 / 8e6           # each transfer: latency + bytes / rate
    offline_s, late_s = 0.5 - d, 1.5 - d                         # computing since the download ended
    want = {   # client: (steps, compute_time, comm_time, bytes_down, bytes_up, drop_reason)
        0: (int(10 * offline_s / 1.0 + 1e-9), offline_s, d, down, 0, "offline"),
        1: (10, 1.0, d + u, down, up, np.nan),
        2: (int(10 * late_s / 2.0 + 1e-9), late_s, d, down, 0, "late")}
    for cid, (steps, compute, comm, bd, bu, reason) in want.items():
        row = c.loc[cid]
        assert (row["steps"], row["bytes_down"], row["bytes_up"]) == (steps, bd, bu), cid
        assert row["compute_time"] == pytest.approx(compute, abs=1e-12) and row["comm_time"] == pytest.approx(comm, abs=1e-12)
        assert row["dropped"] == isinstance(reason, str) and (row["drop_reason"] == reason or not isinstance(reason, str))
    assert (c.loc[0, "steps"], c.loc[2, "steps"]) == (4, 7)     # not vacuous: both stopped part-way
    m = pd.read_csv(res.run_dir / "metrics.csv").set_index("round")
    assert (m.loc[1, "bytes_down"], m.loc[1, "bytes_up"], m.loc[1, "dropped"]) == (3 * down, up, 2)


def test_background_work_is_recorded_at_the_close_and_again_when_it_stops(run_in):
    """FedUMF's unselected clients train in the background: their downloads end before the
    round's 0.3 s deadline (their bytes count in the round's metrics row), their computations
    are cut at the run's end after it (recorded again: the partial steps; each message once,
    or the post-run invariants fail)."""
    sc = tiny(**{"run.rounds": 1, "protocol.select": {"model": "uniform", "k": 2},
                 "protocol.wait": {"mode": "deadline", "seconds": 0.3}})
    sc["algorithm"] = {"name": "fedumf", "lr": 0.1, "alpha": 1.0}
    res = run_in(sc)
    assert res.summary["status"] == "empty" and "bytes" in res.summary["invariants_checked"]   # nobody met the 0.3 s deadline: no aggregation (docs/reliability.md)
    c = pd.read_csv(res.run_dir / "clients.csv").set_index("client")
    m = pd.read_csv(res.run_dir / "metrics.csv").set_index("round")
    down = int(c["bytes_down"].max())
    d = 0.01 + down * 8 / 10e6                                   # latency + bytes / rate
    assert (m.loc[1, "bytes_down"], m.loc[1, "bytes_up"]) == (6 * down, 0)   # 2 late participants, 4 in the background
    bg = c[~c["selected"]]
    assert len(bg) == 4 and (bg["background_stop"] == "run_end").all() and not bg["dropped"].any()
    assert (bg["steps"] == int(5 * (0.3 - d) / 0.5 + 1e-9)).all() and (bg["steps"] == 2).all()
    assert np.allclose(bg["compute_time"], 0.3 - d, rtol=0, atol=1e-12) and np.allclose(bg["comm_time"], d, rtol=0, atol=1e-12)
    assert (c.loc[c["selected"], "drop_reason"] == "late").all()


@pytest.mark.parametrize("budget", [2.0, 2.4])
def test_a_round_cut_by_the_virtual_time_budget_is_recorded_alike(run_in, budget):
    """`run.virtual_time` ends the run inside round 2 (2.0 s) or exactly at its deadline close
    (2.4 s = 2 x 1.2 s: the budget's instant comes first, so the round never closes): both
    engines record the cut round's finished pieces (and submit its jobs) alike."""
    sc = scenario({"mode": "deadline", "seconds": 1.2})
    sc["run"] = dict(sc["run"], rounds=None, virtual_time=budget)
    proc, vec = written(run_in, sc, "process"), written(run_in, sc, "vector")
    assert proc == vec
    c = pd.read_csv(io.BytesIO(proc[0]))
    m = pd.read_csv(io.StringIO(proc[1]))
    assert list(m["round"]) == [0, 1] and proc[3] == budget           # round 2 was not aggregated
    cut = c[c["round"] == 2]
    assert (cut["bytes_down"] > 0).sum() == 4 and (cut["steps"] > 0).any()   # its finished pieces
    assert not cut["dropped"].any() and (cut["weight"] == 0).all()


ALGOS = {"cohort": {"name": "fedavg", "lr": 0.1},           # one cohort job a round
         "client-by-client": {"name": "scaffold", "lr": 0.1}}  # client state: a job per client


@pytest.mark.parametrize("algo", list(ALGOS))
def test_a_budget_at_the_instant_computations_end(run_in, algo):
    """Instant links, 5 steps of 0.1 s, `run.virtual_time: 0.5`: every computation ends exactly
    at the budget (it began before: it ran) and the upload that would begin then never runs;
    the round never closes. Both engines: 5 steps, 0.5 s of compute, no upload, no aggregation,
    the same jobs submitted and computed (on the cohort path and client by client)."""
    sc = tiny(**{"run.rounds": None, "run.virtual_time": 0.5, "protocol.wait": "all", "algorithm": ALGOS[algo]})
    sc["clients"]["groups"][0]["network"] = "instant"
    proc, vec = written(run_in, sc, "process"), written(run_in, sc, "vector")
    assert proc == vec
    c = pd.read_csv(io.BytesIO(proc[0]))
    part = c[c["selected"]]
    assert len(part) == 3 and (part["steps"] == 5).all() and (part["compute_time"] == 0.5).all()
    assert (part["bytes_down"] > 0).all() and (part["bytes_up"] == 0).all()
    assert list(pd.read_csv(io.StringIO(proc[1]))["round"]) == [0]


@pytest.mark.parametrize("algo", list(ALGOS))
@pytest.mark.parametrize("budget", [0.125, 0.25])
def test_a_budget_at_the_instant_a_download_or_an_upload_ends(run_in, budget, algo):
    """Exact binary times, no latency: each download and upload of logreg's 2,600 B takes
    0.125 s at 0.1664 Mbit/s (SCAFFOLD's 5,200 B at twice the rate), the computation none (`instant`). At a 0.125 s budget the
    downloads end at it (they ran) and the computations that would begin then never run: 0
    steps, no upload. At 0.25 s the uploads end at it (they began before it: they arrived),
    though the round never closes. Both engines record it alike and submit (as each download
    ends) and compute the same jobs, on the cohort path and client by client."""
    sc = tiny(**{"run.rounds": None, "run.virtual_time": budget, "protocol.wait": "all", "algorithm": ALGOS[algo]})
    nbytes = 2600 if algo == "cohort" else 5200                  # SCAFFOLD: the model and a control variate
    rate = 0.1664 * nbytes / 2600
    sc["clients"]["groups"][0]["network"] = {"latency": 0.0, "up_mbps": rate, "down_mbps": rate}
    sc["clients"]["groups"][0]["compute"] = {"model": "instant"}
    proc, vec = written(run_in, sc, "process"), written(run_in, sc, "vector")
    assert proc == vec
    c = pd.read_csv(io.BytesIO(proc[0]))
    part = c[c["selected"]]
    assert len(part) == 3 and (part["bytes_down"] == nbytes).all() and (part["comm_time"] == budget).all()
    assert (part["steps"] == (0 if budget == 0.125 else 5)).all()
    assert (part["bytes_up"] == (0 if budget == 0.125 else nbytes)).all() and not part["dropped"].any()
    assert proc[4]["jobs_submitted"] == 3          # each job is submitted as its download ends
    assert list(pd.read_csv(io.StringIO(proc[1]))["round"]) == [0] and proc[3] == budget
