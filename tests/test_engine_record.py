"""Engine equivalence on one recorder: the same scenarios through `engine: process` and
`engine: vector` write the same clients.csv and metrics.csv (less wall_time), byte for byte
(both engines' outcomes reach the round log through `outcome.record_outcomes`, docs/engine.md)."""
import io

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
    return (d / "clients.csv").read_bytes(), buf.getvalue(), res.summary["status"], res.summary["virtual_time"]


CASES = {
    "deadline": ({"mode": "deadline", "seconds": 1.2}, "unicast", False),
    "deadline-multicast": ({"mode": "deadline", "seconds": 1.2}, "multicast", False),
    "first_k": ({"mode": "first_k", "k": 2}, "unicast", False),
    "stuck-all": ("all", "unicast", True),
    "stuck-all-multicast": ("all", "multicast", True),
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
    if stuck:                                      # the round never closed: the run stalled
        assert proc[2] == "stalled" and len(c) == 4 and (c["bytes_up"] > 0).sum() == 3
        assert (c["bytes_down"] > 0).sum() == (1 if broadcast == "multicast" else 4)
    else:                                          # not vacuous: someone was late, someone arrived
        assert proc[2] == "complete" and (c["drop_reason"] == "late").any() and (c["bytes_up"] > 0).any()
        if broadcast == "multicast":               # one broadcast's bytes per round
            assert ((c.groupby("round")["bytes_down"].apply(lambda b: (b > 0).sum())) == 1).all()
