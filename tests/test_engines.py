"""The two engines of `rounds` (docs/architecture.md section 3): `process` (a SimPy process per
participant) and `vector` (NumPy over the round, one timeout) give identical clients.csv and
metrics.csv (but for the measured wall time) for the same seed, over every wait mode, compute
model and link model the vector engine applies to; `auto` picks vector there and process
where something can interrupt a client mid-round."""
import itertools

import numpy as np
import pandas as pd
import pytest

from emulator.scenario import schema as scenario
from emulator.errors import ScenarioError
from emulator.sim.world import World

from conftest import tiny

COMPUTE = {
    "constant": {"model": "constant", "step_time": 0.1},
    "instant": {"model": "instant"},
    "lognormal": {"model": "lognormal", "mean_step_time": 0.1, "sigma": 0.5},
    "lognormal_step": {"model": "lognormal", "mean_step_time": 0.1, "sigma": 0.5, "redraw": "step"},
    "normal_client": {"model": "normal", "mean_step_time": 0.1, "std": 0.05, "redraw": "client"},
    "uniform": {"model": "uniform", "low": 0.05, "high": 0.2},
    "exponential": {"model": "exponential", "mean_step_time": 0.1},
    "flops": {"model": "flops", "gflops": 0.002},
    "trace": "TRACE",
}
LINKS = {
    "link": {"latency": 0.01, "up_mbps": 2, "down_mbps": 5},
    "jitter_spread": {"latency": 0.01, "up_mbps": 2, "down_mbps": 5, "jitter": 0.05, "spread": 0.5},
    "uniform_jitter": {"latency": 0.02, "up_mbps": 2, "down_mbps": 5, "jitter": 0.05, "jitter_dist": "uniform"},
    "instant": "instant",
    "link_trace": "LINKS",
}
WAITS = {"all": "all", "deadline": {"mode": "deadline", "seconds": 0.6}, "first_k": {"mode": "first_k", "k": 3}}


def files(tmp_path):
    trace = tmp_path / "steps.csv"
    # step times that change within a download (0.01-0.05 s after a round starts): a clock started
    # at the wrong time gives other compute times
    trace.write_text("client,start,step_time\n0,0,0.05\n0,0.012,0.3\n0,0.7,0.1\n0,0.72,0.02\n"
                     "1,0,0.2\n1,0.015,0.02\n1,1.2,0.3\n")
    links = tmp_path / "links.csv"
    links.write_text("client,up_mbps,down_mbps\n0,1,4\n1,8,20\n2,0.5,2\n")
    return {"TRACE": {"model": "trace", "path": str(trace)},
            "LINKS": {"model": "link_trace", "path": str(links), "latency": 0.01}}


def run_both(sc, tmp_path, name):
    out = {}
    for engine in ("process", "vector"):
        s = dict(sc, protocol=dict(sc["protocol"], engine=engine))
        w = World(scenario.load(s))
        w.run()
        assert w.status == "complete" and w.protocol.engine == engine
        from emulator.runs import runner
        m = w.recorder.metrics_frame()
        runner.add_delay_metrics(w, m)
        c = w.recorder.clients_frame()
        # the step-time floor behind clients.csv (invariants: steps x floor <= compute_time)
        c["min_compute"] = np.concatenate([rl.min_compute for rl in w.recorder.rounds])
        out[engine] = (m.drop(columns=["wall_time"]), c)
    return out


def scenario_for(compute, link, wait, avail, tmp_path):
    f = files(tmp_path)
    pick = lambda v: f[v] if isinstance(v, str) and v in f else v   # noqa: E731
    sc = tiny(**{"run.rounds": 4, "clients.count": 9, "protocol.select": {"model": "uniform", "k": 5}})
    g = sc["clients"]["groups"][0]
    sc["clients"]["groups"] = [
        dict(g, name="a", fraction=None, count=5, compute=pick(COMPUTE[compute]),
             network=pick(LINKS[link]), availability=avail),
        dict(g, name="b", fraction=None, count=4, compute={"model": "lognormal", "mean_step_time": 0.15, "sigma": 0.3},
             network={"latency": 0.03, "up_mbps": 1, "down_mbps": 3, "jitter": 0.02}, availability=avail)]
    for grp in sc["clients"]["groups"]:
        grp.pop("fraction")
    sc["protocol"]["wait"] = WAITS[wait]
    return sc


CASES = ([(c, "jitter_spread", "deadline") for c in COMPUTE]                  # every compute model
         + [("lognormal", ln, "deadline") for ln in LINKS if ln != "jitter_spread"]   # every link model
         + [(c, "link", w) for c in ("constant", "lognormal_step") for w in ("all", "first_k")])   # every wait mode


@pytest.mark.parametrize("compute, link, wait", CASES)
def test_process_and_vector_engines_give_identical_records(compute, link, wait, tmp_path):
    sc = scenario_for(compute, link, wait, {"model": "bernoulli", "p": 0.8}, tmp_path)
    out = run_both(sc, tmp_path, f"{compute}-{link}-{wait}")
    (mp, cp), (mv, cv) = out["process"], out["vector"]
    pd.testing.assert_frame_equal(cp, cv, check_exact=True)
    pd.testing.assert_frame_equal(mp, mv, check_exact=True)
    if wait != "all":          # the case is not vacuous: someone was late
        assert cp["dropped"].any() or compute == "instant" or link == "instant"


@pytest.mark.parametrize("avail", [{"model": "always"}, {"model": "markov", "p_on_off": 0.3, "p_off_on": 0.5},
                                   {"model": "sine", "p": 0.7, "amplitude": 0.3, "period": 3}])
def test_engines_agree_under_per_round_availability_and_multicast(avail, tmp_path):
    sc = scenario_for("uniform", "jitter_spread", "deadline", avail, tmp_path)
    sc["protocol"]["broadcast"] = "multicast"
    out = run_both(sc, tmp_path, "avail")
    pd.testing.assert_frame_equal(out["process"][1], out["vector"][1], check_exact=True)
    pd.testing.assert_frame_equal(out["process"][0], out["vector"][0], check_exact=True)


def test_deadline_round_closes_at_its_last_upload_when_nobody_is_late(run_in, tmp_path):
    """A 50 s deadline nobody comes near: in both engines every round lasts until its last
    upload (max over participants of comm + compute time, read from clients.csv), not the
    deadline, and the run directories agree."""
    sc = scenario_for("constant", "link", "deadline", {"model": "always"}, tmp_path)
    sc["protocol"]["wait"] = {"mode": "deadline", "seconds": 50.0}
    for engine in ("process", "vector"):
        res = run_in(dict(sc, protocol=dict(sc["protocol"], engine=engine)), engine)
        c = pd.read_csv(res.run_dir / "clients.csv")
        m = pd.read_csv(res.run_dir / "metrics.csv").set_index("round").loc[1:]
        assert res.summary["rounds"] == 4 and not c["dropped"].any() and c["selected"].sum() == 20
        busy = (c["comm_time"] + c["compute_time"]).groupby(c["round"]).max()
        np.testing.assert_allclose(m["round_time"], busy.loc[m.index], rtol=0, atol=1e-12)
        assert (m["round_time"] < 2.0).all()
        np.testing.assert_allclose(m["virtual_time"], np.cumsum(busy.loc[m.index]), rtol=0, atol=1e-12)


def test_auto_picks_the_engine_and_vector_refuses_what_it_cannot_do():
    sc = tiny()
    assert World(scenario.load(sc)).protocol.engine == "vector"
    timed = tiny()
    timed["clients"]["groups"][0]["availability"] = {"model": "markov_time", "mean_on": 5, "mean_off": 1}
    assert World(scenario.load(timed)).protocol.engine == "process"
    timed["protocol"]["engine"] = "vector"
    with pytest.raises(ScenarioError) as e:
        World(scenario.load(timed))
    assert e.value.problems[0][0] == "protocol.engine" and "continuous time" in e.value.problems[0][1]
    umf = tiny(**{"algorithm": {"name": "fedumf", "lr": 0.1}})
    assert World(scenario.load(umf)).protocol.engine == "process"


def test_equal_time_uploads_are_aggregated_in_simpys_order(tmp_path):
    """Uploads landing at the same instant are aggregated in the order SimPy processes them:
    the one whose computation ended first (here the higher ids, group b) comes first. Times
    are exact binary fractions: a (ids 0-3) downloads 0.125 s, computes 0.25 s, uploads
    0.125 s; b (ids 4-7) 0.125, 0.125, 0.25: both land at 0.5 s."""
    sc = tiny(**{"run.rounds": 3, "clients.count": 8, "protocol.select": {"model": "all"}, "protocol.local_steps": 1})
    sc["workload"]["partition"] = {"name": "dirichlet", "alpha": 0.5}        # unequal weights
    g = sc["clients"]["groups"][0]
    g.pop("fraction")
    sc["clients"]["groups"] = [
        dict(g, name="a", count=4, compute={"model": "constant", "step_time": 0.25},
             network={"latency": 0.0, "up_mbps": 0.1664, "down_mbps": 0.1664}),
        dict(g, name="b", count=4, compute={"model": "constant", "step_time": 0.125},
             network={"latency": 0.0, "up_mbps": 0.0832, "down_mbps": 0.1664})]
    out = run_both(sc, tmp_path, "ties")
    (mp, cp), (mv, cv) = out["process"], out["vector"]
    assert (mp["round_time"].dropna() == 0.5).all()
    pd.testing.assert_frame_equal(mp, mv, check_exact=True)
    pd.testing.assert_frame_equal(cp, cv, check_exact=True)


def test_steps_beyond_the_bulk_draw_come_from_the_clients_round_stream():
    """`redraw: step`: the round's bulk draw gives the planned steps' times; any further step
    (a T-SFL interval fit) is drawn from the client's stream ("compute", id, round), which is
    created only when such a step is asked for."""
    import numpy as np
    from devices.compute import LognormalCompute
    from emulator.rng import Streams
    from emulator.sim.client import Client

    made = []

    class Counting(Streams):
        def keyed(self, name, *keys):
            made.append((name, *keys))
            return super().keyed(name, *keys)
    streams = Counting(7)
    model = LognormalCompute(mean_step_time=0.2, sigma=0.5, redraw="step")
    c = Client(3, "g", 0, model, None, None, streams)
    bulk = [0.25, 0.5]
    clk = c.clock(4, 0.0, 0, bulk)
    assert clk.time(2) == 0.75 and made == []             # the bulk draw only: no stream made
    more = model.draw(Streams(7).keyed("compute", 3, 4), 16)
    assert clk.time(5) == 0.75 + more[0] + more[1] + more[2]
    assert made == [("compute", 3, 4)]


@pytest.mark.parametrize("compute, link", [("lognormal", "jitter_spread"), ("lognormal_step", "link_trace"),
                                           ("normal_client", "uniform_jitter"), ("trace", "link"),
                                           ("flops", "instant"), ("constant", "jitter_spread")])
def test_planned_round_equals_each_clients_own_pieces(compute, link, tmp_path, monkeypatch):
    """The process engine plans a round's download, compute and upload seconds in NumPy
    (`Protocol.planned_seconds`, dedicated links); it records exactly what each client's own pieces
    (its link's transfer time, its step clock) give, under time availability too."""
    from emulator.sim.protocols.base import Protocol
    avail = {"model": "markov_time", "mean_on": 2.0, "mean_off": 0.5}
    sc = scenario_for(compute, link, "deadline", avail, tmp_path)
    sc["protocol"]["engine"] = "process"
    out = {}
    for planned in (True, False):
        with monkeypatch.context() as m:
            if not planned:
                m.setattr(Protocol, "planned_seconds", lambda self, *a: None)
            w = World(scenario.load(sc))
            w.run()
        c = w.recorder.clients_frame()
        c["min_compute"] = np.concatenate([rl.min_compute for rl in w.recorder.rounds])
        out[planned] = (w.recorder.metrics_frame().drop(columns=["wall_time"]), c)
    pd.testing.assert_frame_equal(out[True][0], out[False][0], check_exact=True)
    pd.testing.assert_frame_equal(out[True][1], out[False][1], check_exact=True)
    assert (out[True][1]["drop_reason"] == "offline").any()      # someone went offline mid-round


def test_a_multicast_download_ending_at_the_deadline_carries_the_broadcast(tmp_path):
    """Exact binary times: group a downloads in 0.125 s, group b in 0.25 s; the 0.125 s
    deadline closes each round as a's downloads end. A download ending at the close has
    arrived (as an upload at the deadline counts), so one of a's carries the broadcast's
    2,600 bytes (650 parameters x 4 B); both engines agree; nobody uploads."""
    sc = tiny(**{"run.rounds": 2, "clients.count": 4, "protocol.select": {"model": "all"},
                 "protocol.local_steps": 1, "protocol.broadcast": "multicast",
                 "protocol.wait": {"mode": "deadline", "seconds": 0.125}})
    g = sc["clients"]["groups"][0]
    g.pop("fraction")
    sc["clients"]["groups"] = [
        dict(g, name="a", count=2, network={"latency": 0.0, "up_mbps": 0.1664, "down_mbps": 0.1664}),
        dict(g, name="b", count=2, network={"latency": 0.0, "up_mbps": 0.1664, "down_mbps": 0.0832})]
    out = run_both(sc, tmp_path, "multicast_deadline")
    (mp, cp), (mv, cv) = out["process"], out["vector"]
    pd.testing.assert_frame_equal(cp, cv, check_exact=True)
    pd.testing.assert_frame_equal(mp, mv, check_exact=True)
    assert cp.groupby("round")["bytes_down"].sum().tolist() == [2600, 2600]
    assert cp.loc[cp["bytes_down"] > 0, "client"].isin([0, 1]).all() and cp["bytes_up"].sum() == 0


@pytest.mark.parametrize("algo, network", [("fedavg", None), ("scaffold", "instant")])
def test_a_round_of_one_participant_closes_at_its_upload(algo, network, tmp_path):
    """One client a round (`k: 1`): each round lasts that client's download, 5 steps and
    upload, and both engines agree (a round of one is no round of none). With SCAFFOLD (a job
    per client, no cohort) over instant links the upload arrives as the computation ends, at
    the close itself: its upload is asked for and aggregated."""
    sc = tiny(**{"run.rounds": 3, "protocol.select": {"model": "uniform", "k": 1},
                 "algorithm": {"name": algo, "lr": 0.1}})
    if network:
        sc["clients"]["groups"][0]["network"] = network
    out = run_both(sc, tmp_path, "one")
    (mp, cp), (mv, cv) = out["process"], out["vector"]
    pd.testing.assert_frame_equal(cp, cv, check_exact=True)
    pd.testing.assert_frame_equal(mp, mv, check_exact=True)
    part = cp[cp["selected"]]
    assert len(part) == 3 and (part["bytes_up"] > 0).all() and (part["steps"] == 5).all()
    np.testing.assert_allclose(mp["round_time"].dropna(), (part["comm_time"] + part["compute_time"]).to_numpy(),
                               rtol=0, atol=1e-12)
