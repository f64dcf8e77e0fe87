"""Network: exact seconds for one flow, shared flows, a flow joining half-way, max-min
rates on a 3-node topology with a bottleneck; and through the emulator with a shared
server link."""

import math

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
    overlap fully and each takes twice its solo time. Every transfer first waits the client's
    own latency (0.02 s) plus the server link's (0.005 s)."""
    from test_timing import two_clients
    sc = two_clients(rounds=1)
    for g in sc["clients"]["groups"]:
        g["compute"] = {"model": "constant", "step_time": 0.1}
        g["network"] = {"latency": 0.02, "up_mbps": 100, "down_mbps": 100}
    sc["network"]["server_link"] = {"up_mbps": 1, "down_mbps": 1000, "latency": 0.005}
    res = run_in(sc)
    # 2,700 B = 21,600 bit; down: own 100 Mbit/s shared 1000 -> 0.000216 s each (own link binds)
    # up: two flows on 1 Mbit/s -> 0.5 Mbit/s each: 0.0432 s
    import pandas as pd
    c = pd.read_csv(res.run_dir / "clients.csv")
    lat = 0.02 + 0.005
    comm = 2 * lat + 21600 / 100e6 + 21600 / 0.5e6
    assert comm == pytest.approx(0.093416, abs=1e-15)
    assert np.allclose(c["comm_time"], comm, atol=1e-12)
    assert res.metrics["round_time"].iloc[-1] == pytest.approx(comm + 0.4, abs=1e-12)


# ============================================================================ topology end to end
def _topology_pair(step_b=0.1, compression=None):
    """Two one-client groups (A, B), one round, 4 local steps of 0.1 s (B: `step_b`), own links
    100/100 Mbit/s with no latency, 100 B overhead; both groups sit at access node `acc`,
    which reaches the server's node `srv` through `acc`-`core` (1 Mbit/s, 10 ms) and
    `core`-`srv` (1000 Mbit/s, no latency)."""
    from test_timing import two_clients
    sc = two_clients(rounds=1)
    for g in sc["clients"]["groups"]:
        g["compute"] = {"model": "constant", "step_time": 0.1}
        g["network"] = {"latency": 0.0, "up_mbps": 100, "down_mbps": 100}
    sc["clients"]["groups"][1]["compute"]["step_time"] = step_b
    sc["network"]["topology"] = {
        "nodes": ["acc", "core", "srv"],
        "links": [{"a": "acc", "b": "core", "mbps": 1, "latency": 0.01},
                  {"a": "core", "b": "srv", "mbps": 1000}],
        "server": "srv", "attach": {"A": "acc", "B": "acc"}}
    if compression is not None:
        sc["network"]["compression"] = compression
    return sc


# logreg on digits: 64 x 10 weights + 10 biases = 650 parameters; 4 B each + 100 B overhead
PARAMS = 650
MSG_BITS = (PARAMS * 4 + 100) * 8          # 2,700 B = 21,600 bit


def test_topology_run_two_flows_share_the_bottleneck(run_in):
    """Both clients download together and upload together: on every hop the 1 Mbit/s
    acc-core link binds (own links 100, core-srv 1000), max-min gives each 0.5 Mbit/s.
    down = up = 0.01 (path latency) + 21,600 / 0.5e6 = 0.0532 s; compute 4 x 0.1 = 0.4 s."""
    import pandas as pd
    res = run_in(_topology_pair())
    one_way = 0.01 + MSG_BITS / 0.5e6
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert len(c) == 2 and c["selected"].all() and not c["dropped"].any()
    assert np.allclose(c["compute_time"], 0.4, atol=1e-12)
    assert np.allclose(c["comm_time"], 2 * one_way, atol=1e-12)
    assert np.allclose(c["comm_time"], 0.1064, atol=1e-12)               # 2 x (0.01 + 0.0432)
    assert (c["bytes_up"] == 2700).all() and (c["bytes_down"] == 2700).all()
    m = res.metrics[res.metrics["round"] >= 1]
    assert len(m) == 1
    assert m["round_time"].iloc[0] == pytest.approx(one_way + 0.4 + one_way, abs=1e-12)   # 0.5064
    assert m["virtual_time"].iloc[0] == pytest.approx(0.5064, abs=1e-12)
    assert m["bytes_up"].iloc[0] == 5400 and m["bytes_down"].iloc[0] == 5400
    assert res.summary["bytes_up"] == 5400 and res.summary["params"] == PARAMS


def test_topology_run_upload_joins_half_way(run_in):
    """B computes 4 x 0.105 = 0.42 s, so its upload flow joins A's on acc-core 0.02 s late.
    A's flow starts at 0.0532 + 0.4 + 0.01 = 0.4632 alone at 1 Mbit/s; B's at 0.4832, when A has
    1,600 bit left: both at 0.5 Mbit/s, A ends at 0.4864; B has 20,000 bit left, alone at
    1 Mbit/s: ends at 0.5064. Uploads: A 0.4864 - 0.4532 = 0.0332, B 0.5064 - 0.4732 = 0.0332."""
    import pandas as pd
    res = run_in(_topology_pair(step_b=0.105))
    c = pd.read_csv(res.run_dir / "clients.csv").set_index("client")
    down = 0.01 + MSG_BITS / 0.5e6
    a_up = 0.01 + 20_000 / 1e6 + 1_600 / 0.5e6
    b_end = down + 0.42 + 0.01 + 1_600 / 0.5e6 + 20_000 / 1e6
    b_up = b_end - (down + 0.42)
    assert c.loc[0, "compute_time"] == pytest.approx(0.4, abs=1e-12)
    assert c.loc[1, "compute_time"] == pytest.approx(0.42, abs=1e-12)
    assert c.loc[0, "comm_time"] == pytest.approx(down + a_up, abs=1e-12)
    assert c.loc[1, "comm_time"] == pytest.approx(down + b_up, abs=1e-12)
    assert c.loc[0, "comm_time"] == pytest.approx(0.0864, abs=1e-12)
    assert res.metrics["round_time"].iloc[-1] == pytest.approx(b_end, abs=1e-12)
    assert res.metrics["round_time"].iloc[-1] == pytest.approx(0.5064, abs=1e-12)
    assert c.loc[1, "comm_time"] == pytest.approx(0.0864, abs=1e-12)   # both uploads 0.0332


# ============================================================================ compression
def test_upload_compression_halves_parameter_bytes_in_a_run(run_in):
    """network.compression.up = 0.5: uploads carry ceil(650 x 4 x 0.5) + 100 = 1,400 B, downloads
    stay 2,700 B; the upload's size term halves (11,200 bit at 0.5 Mbit/s = 0.0224 s)."""
    import pandas as pd
    res = run_in(_topology_pair(compression={"up": 0.5}))
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert (c["bytes_up"] == 1400).all() and (c["bytes_down"] == 2700).all()
    m = res.metrics[res.metrics["round"] >= 1]
    assert m["bytes_up"].iloc[0] == 2800 and m["bytes_down"].iloc[0] == 5400
    assert res.summary["bytes_up"] == 2800 and res.summary["bytes_down"] == 5400
    down = 0.01 + MSG_BITS / 0.5e6
    up = 0.01 + 1400 * 8 / 0.5e6
    assert np.allclose(c["comm_time"], down + up, atol=1e-12)                 # 0.0856
    assert m["round_time"].iloc[0] == pytest.approx(down + 0.4 + up, abs=1e-12)   # 0.4856


def test_message_bytes_formula():
    from devices.network import message_bytes
    assert message_bytes(650) == 2600
    assert message_bytes(650, 4, 100) == 2700
    assert message_bytes(650, 4, 100, 0.5) == 1400
    assert message_bytes(650, 2, 0, 0.25) == 325
    assert message_bytes(3, 4, 0, 0.5) == 6
    assert message_bytes(5, 1, 0, 0.5) == 3          # ceil(2.5)
    assert message_bytes(0, 4, 100) == 100


def test_message_bytes_ceil_is_not_fooled_by_float_noise():
    from devices.network import message_bytes
    assert message_bytes(650, 4, 0, 0.55) == 1430      # 2600 x 0.55 = 1430.0000000000002 in floats
    assert message_bytes(25, 4, 0, 0.07) == 7
    assert message_bytes(650, 4, 0, 0.5501) == 1431    # a real fraction still rounds up


def test_upload_compression_055_in_a_run(run_in):
    import pandas as pd
    res = run_in(_topology_pair(compression={"up": 0.55}))
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert (c["bytes_up"] == 1530).all()


# ============================================================================ jitter and spread
def test_jitter_mean_transfer_time_within_four_standard_errors():
    """jitter ~ Exponential(mean j) added to the latency: mean time = latency + j + bytes*8/bw,
    standard deviation j; never below latency + size term."""
    link = Link(latency=0.05, up_mbps=2, down_mbps=8, jitter=0.02)
    rng = np.random.default_rng(12345)
    n = 20_000
    t = np.array([link.transfer_time(250_000, "up", rng=rng) for _ in range(n)])
    size_term = 250_000 * 8 / 2e6                       # 1.0 s
    expected = 0.05 + 0.02 + size_term
    se = 0.02 / np.sqrt(n)
    assert abs(t.mean() - expected) < 4 * se
    assert t.min() >= 0.05 + size_term - 1e-12
    # exponential: sd = mean; sample sd within 10% for n = 20,000 (sd of the estimate ~ 1%)
    assert t.std() == pytest.approx(0.02, rel=0.1)
    # no jitter: exact and deterministic
    plain = Link(latency=0.05, up_mbps=2, down_mbps=8)
    assert plain.transfer_time(250_000, "up", rng=rng) == pytest.approx(1.05, abs=1e-12)
    assert plain.delay(rng) == 0.05


def test_spread_factors_scale_the_bandwidth_exactly():
    link = Link(latency=0.0, up_mbps=10, down_mbps=40, spread=0.5)
    f = link.spread_factors(5, np.random.default_rng(7))
    assert f.shape == (5,) and len(set(f.tolist())) == 5          # one draw per client
    assert np.array_equal(f, link.spread_factors(5, np.random.default_rng(7)))
    f3 = float(f[3])
    assert link.bandwidth_bps("up", 3, f3) == pytest.approx(10e6 * f3, rel=1e-15)
    assert link.bandwidth_bps("down", 3, f3) == pytest.approx(40e6 * f3, rel=1e-15)
    assert link.transfer_time(1_000_000, "up", 3, factor=f3) == pytest.approx(8e6 / (10e6 * f3), rel=1e-15)
    # the vector form gives the same seconds to the last bit
    jit = np.array([0.0, 0.01, 0.2, 0.0, 0.3])
    vec = link.transfer_times(1_000_000, "down", np.arange(5), jit, f)
    assert vec.tolist() == [link.transfer_time(1_000_000, "down", i, None, float(jit[i]), float(f[i])) for i in range(5)]
    assert np.array_equal(Link(0.0, 1, 1).spread_factors(4, None), np.ones(4))   # no spread: 1, nothing drawn


def test_spread_factor_distribution_matches_documentation():
    """factor ~ LogNormal(-s^2/2, s): mean 1, var exp(s^2) - 1; log-factor mean -s^2/2, sd s."""
    s, n = 0.5, 20_000
    link = Link(latency=0.0, up_mbps=1, down_mbps=1, spread=s)
    rng = np.random.default_rng(2024)
    f = link.spread_factors(n, rng)
    assert (f > 0).all()
    sd = np.sqrt(np.expm1(s ** 2))
    assert abs(f.mean() - 1.0) < 4 * sd / np.sqrt(n)
    lf = np.log(f)
    assert abs(lf.mean() + s ** 2 / 2) < 4 * s / np.sqrt(n)
    assert abs(lf.std() - s) < 4 * s / np.sqrt(2 * n)


def test_spread_in_a_run_is_fixed_across_rounds(run_in):
    """Own links only (no shared link), spread 0.5: every client's comm time is the same in every
    round (one factor per client for the run), and differs between clients."""
    import pandas as pd
    from test_timing import two_clients
    sc = two_clients(rounds=3)
    for g in sc["clients"]["groups"]:
        g["compute"] = {"model": "constant", "step_time": 0.1}
        g["network"] = {"latency": 0.0, "up_mbps": 100, "down_mbps": 100, "spread": 0.5}
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert len(c) == 6
    per = c.groupby("client")["comm_time"]
    assert (per.max() - per.min()).max() < 1e-12
    # comm = 2 x 21,600 / (100e6 x f): the implied factors are positive and distinct
    f = 2 * MSG_BITS / (100e6 * per.first())
    assert (f > 0).all() and abs(f.iloc[0] - f.iloc[1]) > 1e-6


# ============================================================================ no torch in devices
def test_devices_imports_neither_torch_nor_emulator():
    """Every module of `devices` imports in a fresh interpreter without pulling in torch, or any
    module of `emulator` or `analysis` (the arrows point one way)."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import devices\n"
        "names = [m.name for m in pkgutil.walk_packages(devices.__path__, 'devices.')]\n"
        "for n in names: importlib.import_module(n)\n"
        "from devices.network import build_topology, route\n"
        "route(build_topology(['a', 'b'], [{'a': 'a', 'b': 'b', 'mbps': 1}]), 'a', 'b')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'emulator', 'analysis'))\n"
        "print(json.dumps({'names': names, 'bad': bad}))\n")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert {"devices.network", "devices.compute", "devices.availability"} <= set(out["names"])
    assert out["bad"] == []


@pytest.mark.parametrize("dist, sd", [("exponential", 0.02), ("uniform", 0.04 / np.sqrt(12)),
                                      ("lognormal", 0.02 * np.sqrt(np.exp(0.5 ** 2) - 1))])
def test_jitter_distributions_have_the_configured_mean(dist, sd):
    """Every jitter distribution has mean `jitter` (mean within 4 standard errors) and its own
    spread; uniform stays in [0, 2 jitter]."""
    link = Link(latency=0.05, up_mbps=2, down_mbps=8, jitter=0.02, jitter_dist=dist, jitter_sigma=0.5)
    rng = np.random.default_rng(7)
    x = np.array([link.delay(rng) for _ in range(20_000)]) - 0.05
    assert abs(x.mean() - 0.02) < 4 * sd / np.sqrt(len(x))
    assert x.std() == pytest.approx(sd, rel=0.05)
    assert x.min() >= 0 and (dist != "uniform" or x.max() <= 0.04)


def test_unknown_jitter_distribution_is_a_scenario_error(run_in):
    from conftest import tiny
    from emulator.errors import ScenarioError
    sc = tiny()
    sc["clients"]["groups"][0]["network"]["jitter_dist"] = "pareto"
    with pytest.raises(ScenarioError, match=r"clients\.groups\[0\]\.network.*jitter_dist"):
        run_in(sc)


# ============================================================================ the survivors of `make mutate`
def test_message_bytes_rounds_to_nine_decimals_before_the_ceiling():
    """163,845 parameters x 4 B x 0.55 = 360,459 B exactly; in floats 360459.00000000006: the
    rounding to 1e-9 absorbs the noise (to 1e-10 it would not, and add a byte)."""
    from devices.network import message_bytes
    assert 163_845 * 4 * 0.55 != 360_459
    assert message_bytes(163_845, 4, 0, 0.55) == 360_459
    assert message_bytes(163_845, 4, 7, 0.55) == 360_466


def test_jitter_draw_shapes_defaults_and_unknown_distribution():
    from devices.network import JITTER_DISTS, jitter_draw
    one = jitter_draw(np.random.default_rng(3), 0.02)
    assert type(one) is float and one == np.random.default_rng(3).exponential(0.02)
    many = jitter_draw(np.random.default_rng(3), 0.02, size=4)
    assert many.shape == (4,) and np.array_equal(many, np.random.default_rng(3).exponential(0.02, 4))
    assert jitter_draw(None, 0.0) == 0.0 and np.array_equal(jitter_draw(None, 0.0, size=3), np.zeros(3))
    # lognormal's default log-space spread is 1: LogNormal(ln 0.02 - 1/2, 1)
    x = jitter_draw(np.random.default_rng(5), 0.02, "lognormal", size=4)
    assert np.array_equal(x, np.random.default_rng(5).lognormal(np.log(0.02) - 0.5, 1.0, 4))
    assert JITTER_DISTS == ("exponential", "uniform", "lognormal")
    with pytest.raises(ValueError, match=r"one of exponential, uniform, lognormal, got 'pareto'"):
        jitter_draw(np.random.default_rng(0), 0.02, "pareto")


def test_round_draws_are_one_bulk_draw_row_0_down_row_1_up():
    """A round's jitter of n clients: 2n draws from the round stream, the first n for the
    downloads, the next n for the uploads; none at all without jitter."""
    link = Link(latency=0.01, up_mbps=1, down_mbps=1, jitter=0.02)
    d = link.round_draws(3, np.random.default_rng(11))
    want = np.random.default_rng(11).exponential(0.02, 6)
    assert d.shape == (2, 3) and np.array_equal(d[0], want[:3]) and np.array_equal(d[1], want[3:])
    # a jitter under a second still draws; without jitter nothing is drawn (the stream is not read)
    assert Link(0.01, 1, 1, jitter=0.5).round_draws(2, np.random.default_rng(0)).shape == (2, 2)
    assert Link(0.01, 1, 1).round_draws(3, None) is None


def test_link_defaults_and_bad_values():
    link = Link(latency=0.01, up_mbps=2, down_mbps=8)
    assert link.bandwidth_bps("up") == 2e6 and link.bandwidth_bps("down") == 8e6   # factor 1
    # a lognormal jitter's default log-space spread is 1 (jitter_sigma)
    ln = Link(0.0, 1, 1, jitter=0.02, jitter_dist="lognormal")
    assert ln.jitter_sigma == 1.0
    assert ln.delay(np.random.default_rng(2)) == np.random.default_rng(2).lognormal(np.log(0.02) - 0.5, 1.0)
    for bad in (dict(latency=math.inf), dict(latency=-0.1), dict(latency=math.nan),
                dict(up_mbps=0), dict(down_mbps=0), dict(up_mbps=-1)):
        kw = dict(latency=0.0, up_mbps=1, down_mbps=1) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            Link(**kw)


def test_a_plugin_link_inherits_no_jitter_no_spread_and_exponential_jitter():
    """A LinkModel subclass that declares only its latency and bandwidth inherits the base's
    defaults: no jitter (delay = latency, no round draws), no spread (all factors 1, nothing
    drawn); given a jitter, it is Exponential(jitter), and lognormal's spread is 1."""
    from devices.network import LinkModel

    class Fixed(LinkModel):
        latency = 0.05

        def bandwidth_bps(self, direction, client=0, factor=1.0):
            return 1e6 * factor

        def transfer_times(self, nbytes, direction, clients, jitter, factor):
            return (self.latency + jitter) + nbytes * 8.0 / (1e6 * factor)

    p = Fixed()
    assert (p.jitter, p.spread, p.jitter_dist, p.jitter_sigma) == (0.0, 0.0, "exponential", 1.0)
    assert p.delay(None) == 0.05 and p.round_draws(4, None) is None
    assert np.array_equal(p.spread_factors(3, None), np.ones(3))
    assert p.transfer_time(125_000, "up", rng=None) == 0.05 + 1.0
    p.jitter = 0.02
    assert p.delay(np.random.default_rng(4)) == 0.05 + np.random.default_rng(4).exponential(0.02)
    p.jitter_dist = "lognormal"
    assert p.delay(np.random.default_rng(4)) == 0.05 + np.random.default_rng(4).lognormal(np.log(0.02) - 0.5, 1.0)


def test_instant_link_takes_no_time():
    from devices.network import InstantLink
    i = InstantLink()
    assert (i.latency, i.jitter) == (0.0, 0.0)
    assert i.bandwidth_bps("up") == math.inf and i.delay(None) == 0.0
    assert i.transfer_time(10**9, "down") == 0.0 and i.round_draws(5, None) is None
    assert np.array_equal(i.spread_factors(3, None), np.ones(3))
    assert np.array_equal(i.transfer_times(10**9, "up", np.arange(3), np.zeros(3), np.ones(3)), np.zeros(3))


def test_instant_network_in_a_run(run_in):
    """network: instant: every transfer takes 0 s, a round is its 5 steps of 0.1 s."""
    import pandas as pd
    from conftest import tiny
    sc = tiny()
    sc["clients"]["groups"][0]["network"] = {"model": "instant"}
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    sel = c[c["selected"]]
    assert len(sel) == 9 and (sel["comm_time"] == 0.0).all() and (sel["bytes_up"] == 2600).all()
    assert res.metrics[res.metrics["round"] >= 1]["round_time"].tolist() == pytest.approx([0.5] * 3, abs=1e-12)


def test_trace_link_maps_group_members_to_table_rows():
    """Members take the table's clients in id order (numeric ids sort by length first:
    2 before 10), wrapping; bandwidths in Mbit/s, no spread, the group's latency."""
    from devices.network import TraceLink
    t = TraceLink({"10": (3.0, 30.0), "2": (1.0, 10.0)}, [5, 7, 9], latency=0.02)
    assert t.bandwidth_bps("up", 5) == 1e6 and t.bandwidth_bps("down", 5) == 10e6
    assert t.bandwidth_bps("up", 7) == 3e6 and t.bandwidth_bps("down", 9) == 10e6
    assert np.array_equal(t.spread_factors(3, None), np.ones(3)) and t.round_draws(3, None) is None
    assert t.transfer_time(125_000, "up", 7) == 0.02 + 1e6 / 3e6
    for d in ("up", "down"):
        vec = t.transfer_times(125_000, d, np.array([5, 7, 9]), np.array([0.0, 0.1, 0.0]), np.ones(3))
        assert vec.tolist() == [t.transfer_time(125_000, d, c, None, j) for c, j in ((5, 0.0), (7, 0.1), (9, 0.0))]
    z = TraceLink({"0": (4.0, 8.0)}, [0, 3])
    assert z.transfer_time(1_000_000, "up") == 8e6 / 4e6          # client 0, no latency by default
    assert z.bandwidth_bps("up") == 4e6 and z.bandwidth_bps("down", 3) == 8e6
    # jitter as Link's: Exponential(jitter) by default, lognormal with log-space spread 1
    j = TraceLink({"0": (4.0, 8.0)}, [0], 0.01, 0.02)
    assert (j.jitter_dist, j.jitter_sigma) == ("exponential", 1.0)
    assert j.delay(np.random.default_rng(6)) == 0.01 + np.random.default_rng(6).exponential(0.02)
    j = TraceLink({"0": (4.0, 8.0)}, [0], 0.01, 0.02, "lognormal")
    assert j.delay(np.random.default_rng(6)) == 0.01 + np.random.default_rng(6).lognormal(np.log(0.02) - 0.5, 1.0)
    with pytest.raises(ValueError, match="empty links table"):
        TraceLink({}, [0])


def test_max_min_rates_on_infinite_links_and_leftover_capacity():
    # every link unbounded: every flow unbounded, whatever their overlap
    inf = math.inf
    assert max_min_rates({"f1": ["A", "B"], "f2": ["B"], "f3": ["A"]}, {"A": inf, "B": inf}) == \
        {"f1": inf, "f2": inf, "f3": inf}
    # L1 (1 bit/s) fixes f1 and f2 at 0.5; f3 gets what f1 leaves of L2: 1.2 - 0.5 = 0.7
    rates = max_min_rates({"f1": ["L1", "L2"], "f2": ["L1"], "f3": ["L2"]}, {"L1": 1.0, "L2": 1.2})
    assert rates == pytest.approx({"f1": 0.5, "f2": 0.5, "f3": 0.7}, abs=1e-12)


def test_flow_network_edge_cases_on_exact_seconds():
    # a link of 0.5 bit/s moves 1 bit in 2 s (rates under 1 bit/s still progress)
    assert run_flows({"L": 0.5}, [(0.0, ["L"], 1.0, 0.0)]) == pytest.approx([2.0], abs=1e-12)
    # an unbounded link: the flow arrives after its latency alone
    assert run_flows({"L": math.inf}, [(0.0, ["L"], 1e6, 0.05)]) == [0.05]
    # B (listed first, so its start comes before A's timer) joins at the instant A's last bit
    # arrives: A ends at 1.0, B then has the link alone and ends at 2.0
    assert run_flows({"L": 1e6}, [(1.0, ["L"], 1e6, 0.0), (0.0, ["L"], 1e6, 0.0)]) == \
        pytest.approx([2.0, 1.0], abs=1e-12)


def test_a_flow_yields_only_when_sent_as_background():
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": 1e6})
    fg = net.send(["L"], 1e6)                          # the default: not background
    bg = net.send(["L"], 1e6, background=True)
    env.run(until=fg.event)
    assert env.now == 1.0 and not bg.event.triggered   # the foreground flow had the whole link
    env.run(until=bg.event)
    assert env.now == 2.0


def test_rates_are_recomputed_once_per_flow_start_and_end():
    """A alone, B joins at 0.5 (A's timer for 1.0 goes stale and must not recompute), A ends
    at 1.5, B at 2.0: four recomputations."""
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": 1e6})
    a = net.send(["L"], 1e6)

    def late():
        yield env.timeout(0.5)
        net.send(["L"], 1e6)
    env.process(late())
    env.run()
    assert a.event.triggered and env.now == pytest.approx(2.0, abs=1e-12)
    assert net.recomputes == 4


def test_a_flow_cancelled_during_its_latency_never_takes_a_share():
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": 1e6})
    a = net.send(["L"], 1e6)
    b = net.send(["L"], 1e6, latency=0.5)

    def cancel():
        yield env.timeout(0.2)
        b.cancel()
    env.process(cancel())
    env.run()
    assert a.event.triggered and env.now == 1.0 and not b.event.triggered and not b.flow.started


def test_topology_links_default_to_no_latency_and_route_by_fewest_hops():
    g = build_topology(["s", "x", "t"], [{"a": "s", "b": "x", "mbps": 1}, {"a": "x", "b": "t", "mbps": 1},
                                          {"a": "s", "b": "t", "mbps": 1}])
    assert g.edges["s", "x"]["latency"] == 0.0
    assert route(g, "s", "t") == ([("s", "t")], 0.0)
    with pytest.raises(ValueError, match="unknown node 'y'"):
        build_topology(["s"], [{"a": "s", "b": "y", "mbps": 1}])
