"""Network: exact seconds for one flow, shared flows, a flow joining half-way, max-min
rates on a 3-node topology with a bottleneck; and through the emulator with a shared
server link."""

import numpy as np
import pytest
import simpy

from devices.network import FlowNetwork, Link, build_topology, max_min_rates, route


def run_flows(capacity, specs):
    """specs: (start, path, bits, latency) -> finish times."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity)
    done = {}

    def one(i, start, path, bits, lat):
        yield env.timeout(start)
        tr = net.send(path, bits, lat)
        yield tr.event
        done[i] = env.now

    for i, s in enumerate(specs):
        env.process(one(i, *s))
    env.run()
    return [done[i] for i in range(len(specs))]


def test_one_flow_latency_plus_size_over_bandwidth():
    link = Link(latency=0.05, up_mbps=2, down_mbps=8)
    assert link.transfer_time(250_000, "up") == pytest.approx(0.05 + 2e6 / 2e6, abs=1e-12)
    assert link.transfer_time(250_000, "down") == pytest.approx(0.05 + 0.25, abs=1e-12)
    (t,) = run_flows({"L": 2e6}, [(0.0, ["L"], 2e6, 0.05)])
    assert t == pytest.approx(1.05, abs=1e-12)


def test_two_equal_flows_take_twice_as_long():
    t = run_flows({"L": 1e6}, [(0.0, ["L"], 1e6, 0.0), (0.0, ["L"], 1e6, 0.0)])
    assert t == pytest.approx([2.0, 2.0], abs=1e-12)


def test_flow_joining_half_way():
    # A: 1 Mbit on 1 Mbit/s starts at 0; B: 1 Mbit joins at 0.5 (A half done).
    # 0.5..1.5: both at 0.5 Mbit/s -> A finishes at 1.5; B has 0.5 Mbit left, alone at 1 Mbit/s -> 2.0
    t = run_flows({"L": 1e6}, [(0.0, ["L"], 1e6, 0.0), (0.5, ["L"], 1e6, 0.0)])
    assert t == pytest.approx([1.5, 2.0], abs=1e-12)


def test_three_node_bottleneck_max_min():
    # a - b (10 Mbit/s), b - c (4 Mbit/s). Flows: f1 a->c, f2 b->c, f3 a->b.
    # b-c is the bottleneck shared by f1, f2: 2 each; f3 gets the rest of a-b: 10 - 2 = 8.
    g = build_topology(["a", "b", "c"], [{"a": "a", "b": "b", "mbps": 10}, {"a": "b", "b": "c", "mbps": 4}])
    cap = {(u, v): g.edges[u, v]["mbps"] * 1e6 for u, v in g.edges}
    cap.update({(v, u): c for (u, v), c in list(cap.items())})
    flows = {"f1": route(g, "a", "c")[0], "f2": route(g, "b", "c")[0], "f3": route(g, "a", "b")[0]}
    rates = max_min_rates(flows, cap)
    assert rates == pytest.approx({"f1": 2e6, "f2": 2e6, "f3": 8e6})
    # f3 ends first (8 Mbit at 8 Mbit/s = 1 s); f1, f2: 4 Mbit at 2 Mbit/s = 2 s
    t = run_flows(cap, [(0, flows["f1"], 4e6, 0), (0, flows["f2"], 4e6, 0), (0, flows["f3"], 8e6, 0)])
    assert t == pytest.approx([2.0, 2.0, 1.0], abs=1e-12)


def test_routing_prefers_low_latency():
    g = build_topology(["s", "x", "y", "t"], [
        {"a": "s", "b": "x", "mbps": 1, "latency": 0.01}, {"a": "x", "b": "t", "mbps": 1, "latency": 0.01},
        {"a": "s", "b": "y", "mbps": 1, "latency": 0.001}, {"a": "y", "b": "t", "mbps": 1, "latency": 0.001}])
    edges, lat = route(g, "s", "t")
    assert edges == [("s", "y"), ("y", "t")] and lat == pytest.approx(0.002)


def test_cancelled_flow_frees_its_share():
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": 1e6})
    a = net.send(["L"], 1e6)
    b = net.send(["L"], 1e6)

    def cancel():
        yield env.timeout(0.5)
        b.cancel()
    env.process(cancel())
    env.run(until=a.event)
    # 0..0.5 at 0.5 Mbit/s (0.25 Mbit), then alone: 0.75 Mbit more at 1 Mbit/s -> 1.25
    assert env.now == pytest.approx(1.25, abs=1e-12) and not b.event.triggered


def test_shared_server_link_in_a_run(run_in):
    """Two identical clients upload through a shared 1 Mbit/s server link: their uploads
    overlap fully and each takes twice its solo time."""
    from test_timing import two_clients
    sc = two_clients(rounds=1)
    for g in sc["clients"]["groups"]:
        g["compute"] = {"model": "constant", "step_time": 0.1}
        g["network"] = {"latency": 0.0, "up_mbps": 100, "down_mbps": 100}
    sc["network"]["server_link"] = {"up_mbps": 1, "down_mbps": 1000}
    res = run_in(sc)
    # 2,700 B = 21,600 bit; down: own 100 Mbit/s shared 1000 -> 0.000216 s each (own link binds)
    # up: two flows on 1 Mbit/s -> 0.5 Mbit/s each: 0.0432 s
    import pandas as pd
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert np.allclose(c["comm_time"], 21600 / 100e6 + 21600 / 0.5e6, atol=1e-12)
    assert res.metrics["round_time"].iloc[-1] == pytest.approx(21600 / 100e6 + 0.4 + 21600 / 0.5e6, abs=1e-12)
