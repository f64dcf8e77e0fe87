"""secure_aggregation (docs/algorithms/secagg.md): the extra bytes and seconds of SecAgg and
SecAgg+ on hand-computed rounds, the unmasking phase a dropout triggers, values unchanged,
and bad input."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from conftest import tiny

from emulator.sim.protocols.secagg import neighbours, setup_bytes, unmask_bytes
from emulator.scenario.secure_aggregation import SecureAggregationParams

LAT, UP, DOWN = 0.01, 1e6, 2e6          # every link: 10 ms, 1 Mbit/s up, 2 Mbit/s down


def leg(nbytes, bps):
    return LAT + nbytes * 8.0 / bps


def scenario(secure=None, slow_steps=None, deadline=None, engine="auto"):
    """4 clients, all selected each round; with slow_steps, client 3 is slow (and late at the deadline)."""
    link = {"latency": LAT, "up_mbps": UP / 1e6, "down_mbps": DOWN / 1e6}
    groups = [{"name": "fast", "fraction": 0.75, "compute": {"model": "constant", "step_time": 0.1}, "network": link},
              {"name": "slow", "fraction": 0.25, "compute": {"model": "constant", "step_time": slow_steps or 0.1},
               "network": link}]
    sc = tiny(**{"clients": {"count": 4, "groups": groups}, "run.rounds": 2,
                 "protocol": {"name": "rounds", "select": {"model": "all"}, "local_steps": 5, "engine": engine,
                              **({"wait": {"mode": "deadline", "seconds": deadline}} if deadline else {})}})
    if secure is not None:
        sc["secure_aggregation"] = secure
    return sc


@pytest.mark.parametrize("engine", ["vector", "process"])
def test_secagg_bytes_and_seconds_on_a_hand_computed_round(run_in, engine):
    """n = 4, k = 3, P 33, H 32, I 4, A 28, no overhead: R0 70 up / 210 down, R1 300 / 300,
    R4 12 down / 108 up; each phase the slowest leg (here all links alike)."""
    plain = run_in(scenario(engine=engine), name="plain")
    sa = run_in(scenario({"protocol": "secagg"}, engine=engine), name="sa")
    assert sa.summary["status"] == "complete", sa.summary.get("message")   # the bytes invariant holds
    setup = leg(70, UP) + leg(210, DOWN) + leg(300, UP) + leg(300, DOWN)
    unmask = leg(12, DOWN) + leg(108, UP)
    m, p = sa.metrics[sa.metrics["round"] > 0], plain.metrics[plain.metrics["round"] > 0]
    assert m["secagg_seconds"].tolist() == pytest.approx([setup + unmask] * 2, rel=1e-12)
    assert (m["round_time"].to_numpy() - p["round_time"].to_numpy()) == pytest.approx([setup + unmask] * 2, rel=1e-9)
    assert (m["bytes_up"].to_numpy() - p["bytes_up"].to_numpy()).tolist() == [4 * (70 + 300 + 108)] * 2
    assert (m["bytes_down"].to_numpy() - p["bytes_down"].to_numpy()).tolist() == [4 * (210 + 300 + 12)] * 2
    assert m["secagg_bytes_up"].tolist() == [4 * 478] * 2
    ca, cp = pd.read_csv(sa.run_dir / "clients.csv"), pd.read_csv(plain.run_dir / "clients.csv")
    assert ((ca["bytes_up"] - cp["bytes_up"]) == 478).all() and ((ca["bytes_down"] - cp["bytes_down"]) == 522).all()
    # values unchanged: the sum is exact
    assert np.array_equal(np.load(sa.run_dir / "model.npy"), np.load(plain.run_dir / "model.npy"))
    assert sa.metrics["test_acc"].tolist() == plain.metrics["test_acc"].tolist()


@pytest.mark.parametrize("engine", ["vector", "process"])
def test_a_dropout_costs_the_survivors_the_unmasking_exchange(run_in, engine):
    """unmask: on_dropout, deadline 2 s: client 3 (50 s of steps) is late every round, so each
    round is setup + 2 s + the survivors' round 4 with one share each (s = min(k, |D|) = 1:
    12 bytes down, 36 up); without the slow client no round 4 runs."""
    sa = {"protocol": "secagg", "unmask": "on_dropout"}
    late = run_in(scenario(sa, slow_steps=10.0, deadline=2.0, engine=engine), name="late")
    ontime = run_in(scenario(sa, deadline=2.0, engine=engine), name="ontime")
    for r in (late, ontime):
        assert r.summary["status"] == "complete", r.summary.get("message")
    setup = leg(70, UP) + leg(210, DOWN) + leg(300, UP) + leg(300, DOWN)
    unmask = leg(12, DOWN) + leg(36, UP)
    m = late.metrics[late.metrics["round"] > 0]
    assert m["participants"].tolist() == [3, 3]
    assert m["secagg_seconds"].tolist() == pytest.approx([setup + unmask] * 2, rel=1e-12)
    assert m["round_time"].tolist() == pytest.approx([setup + 2.0 + unmask] * 2, rel=1e-12)
    assert m["secagg_bytes_up"].tolist() == [4 * 370 + 3 * 36] * 2
    assert m["secagg_bytes_down"].tolist() == [4 * 510 + 3 * 12] * 2
    o = ontime.metrics[ontime.metrics["round"] > 0]
    assert o["secagg_seconds"].tolist() == pytest.approx([setup] * 2, rel=1e-12)
    cl = pd.read_csv(late.run_dir / "clients.csv")
    assert cl[cl["client"] == 3]["bytes_up"].tolist() == [370, 370]         # setup only: its upload never came


def test_secagg_plus_has_log_n_neighbours():
    p, plus = SecureAggregationParams(), SecureAggregationParams(protocol="secagg_plus")
    assert [neighbours(p, n) for n in (1, 2, 100, 1000)] == [0, 1, 99, 999]
    assert [neighbours(plus, n) for n in (2, 8, 100, 1000)] == [1, 6, 14, 20]     # min(n-1, 2 ceil(log2 n))
    assert neighbours(SecureAggregationParams(protocol="secagg_plus", neighbours=5), 100) == 5
    up0, down0, up1, down1 = setup_bytes(plus, 14, overhead=10)
    assert (up0, down0, up1, down1) == (80, 14 * 70 + 10, 14 * 100 + 10, 14 * 100 + 10)
    assert unmask_bytes(plus, 14, dropped=3, overhead=0) == (56, 14 * 36)
    on = SecureAggregationParams(unmask="on_dropout")
    assert unmask_bytes(on, 14, dropped=3, overhead=0) == (56, 3 * 36)
    assert math.ceil(math.log2(1000)) == 10


@pytest.mark.parametrize("over, says", [
    ({"protocol": {"name": "async", "local_steps": 5}, "algorithm": {"name": "fedasync", "lr": 0.1}},
     "protocol.name 'rounds' only"),
    ({"network": {"server_link": {"up_mbps": 10, "down_mbps": 10}}}, "dedicated client links"),
])
def test_secure_aggregation_refused_where_it_is_not_modelled(over, says, tmp_path):
    import emulator
    sc = {**scenario({"protocol": "secagg"}), **over}
    with pytest.raises(emulator.ScenarioError) as e:
        emulator.run(sc, out=tmp_path / "x")
    assert "secure_aggregation: " in str(e.value) and says in str(e.value)
    assert not (tmp_path / "x").exists()


def test_bad_secure_aggregation_block_names_its_path(tmp_path):
    import emulator
    with pytest.raises(emulator.ScenarioError) as e:
        emulator.run(scenario({"protocol": "secagg_pluss"}), out=tmp_path / "x")
    assert "secure_aggregation.protocol" in str(e.value)
