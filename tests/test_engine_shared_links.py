"""Shared links (docs/engine.md, "Shared links"): a multicast broadcast is one flow over the
shared links, and background traffic (FedUMF's unselected clients) yields to the round's, so
it never delays a round. Round times read from real runs against closed forms.

6 clients, 2 selected per round, one local step of 1 s; own links 100 Mbit/s with 10 ms
latency; a server link of 0.1 Mbit/s each way; a message is 650 parameters = 2600 B = 20,800 bit.
- unicast: the 2 selected downloads share the server link: 0.01 + 20800 / 5e4 = 0.426 s each,
  the uploads the same: a round lasts 0.426 + 1 + 0.426 = 1.852 s;
- multicast: one flow of 20,800 bit at 1e5 bit/s (0.208 s) while each own link carries the
  message in 0.01 + 20800 / 1e8 s: downloads end at 0.208 s and a round lasts 1.634 s.
FedUMF's 4 unselected clients also download every round; before background traffic yielded,
6 flows shared the server link and FedUMF's rounds lasted longer than FedAvg's."""
import pytest

from emulator.scenario import schema as scenario
from emulator.sim.world import World

from conftest import tiny

MSG_BITS = 2600 * 8
UNICAST = (0.01 + MSG_BITS / 5e4) * 2 + 1.0
MULTICAST = MSG_BITS / 1e5 + 1.0 + (0.01 + MSG_BITS / 5e4)


def shared_link_run(algo: str, broadcast: str, server_latency: float = 0.0):
    sc = tiny(**{"clients.count": 6, "run.rounds": 3, "run.eval_every": 3,
                 "protocol.select": {"model": "uniform", "k": 2}, "protocol.local_steps": 1,
                 "protocol.broadcast": broadcast,
                 "network.server_link": {"up_mbps": 0.1, "down_mbps": 0.1, "latency": server_latency}})
    g = sc["clients"]["groups"][0]
    g["compute"] = {"model": "constant", "step_time": 1.0}
    g["network"] = {"latency": 0.01, "up_mbps": 100, "down_mbps": 100}
    sc["algorithm"] = {"name": algo, "lr": 0.1}
    w = World(scenario.load(sc))
    w.run()
    assert w.status == "complete" and w.protocol.engine == "process"
    return w


@pytest.mark.parametrize("broadcast, want", [("unicast", UNICAST), ("multicast", MULTICAST)])
def test_fedumf_background_downloads_never_delay_a_round(broadcast, want):
    avg = shared_link_run("fedavg", broadcast)
    umf = shared_link_run("fedumf", broadcast)
    for w in (avg, umf):
        times = [r["round_time"] for r in w.recorder.metrics[1:]]
        assert times == pytest.approx([want] * 3, abs=1e-9)
    c = umf.recorder.clients_frame()
    bg = c[c["trained"] & ~c["selected"]]
    # bytes: a unicast message each; a multicast's counted once per round (for a selected client)
    assert len(bg) == 4 * 3 and (bg["bytes_down"] == (2600 if broadcast == "unicast" else 0)).all()
    if broadcast == "unicast":
        # the 4 background downloads wait for the round's (0.426 s), then share the server
        # link: done at 0.426 + 4 x 20800 / 1e5 = 1.258 s; their 1 s step cannot end before
        # the next round starts (1.852 s): stopped with 0 steps, never fused
        assert bg["comm_time"].to_numpy() == pytest.approx(0.426 + 4 * MSG_BITS / 1e5, abs=1e-9)
        assert (bg["steps"] == 0).all() and set(bg["background_stop"]) <= {"superseded", "unfinished", "run_end"}
    else:
        # they receive the round's one multicast flow with the selected clients (0.208 s)
        # and finish their step within the round
        assert bg["comm_time"].to_numpy() == pytest.approx(MSG_BITS / 1e5, abs=1e-9)
        assert (bg["steps"] == 1).all() and "background_stop" not in bg


@pytest.mark.parametrize("broadcast, want", [
    # the shared path's 50 ms come before every flow on it: unicast downloads and uploads
    # 0.05 + 0.426 s; the multicast's one flow 0.05 + 0.208 s (its own-link part, 0.05 + 0.01
    # + 20800 / 1e8 s, ends earlier); without the latency on the shared flow, 1.684 s
    ("unicast", (0.05 + 0.01 + MSG_BITS / 5e4) * 2 + 1.0),
    ("multicast", (0.05 + MSG_BITS / 1e5) + 1.0 + (0.05 + 0.01 + MSG_BITS / 5e4))])
def test_the_shared_paths_latency_delays_every_flow(broadcast, want):
    w = shared_link_run("fedavg", broadcast, server_latency=0.05)
    assert want == pytest.approx(1.952 if broadcast == "unicast" else 1.734, abs=1e-12)
    assert [r["round_time"] for r in w.recorder.metrics[1:]] == pytest.approx([want] * 3, abs=1e-9)


def test_multicast_is_one_flow_on_the_shared_link():
    """With 2 recipients the unicast downloads take 0.416 s of shared capacity each; the
    multicast's one flow 0.208 s: each recipient's comm_time is its download plus its upload."""
    w = shared_link_run("fedavg", "multicast")
    c = w.recorder.clients_frame()
    sel = c[c["selected"]]
    assert sel["comm_time"].to_numpy() == pytest.approx(MSG_BITS / 1e5 + 0.01 + MSG_BITS / 5e4, abs=1e-9)
    # bytes: the broadcast once per round, both uploads
    m = w.recorder.metrics[1:]
    assert [r["bytes_down"] for r in m] == [2600] * 3 and [r["bytes_up"] for r in m] == [5200] * 3


def test_background_flows_get_what_the_others_leave():
    from devices.network import yielding_rates
    cap = {"server": 10.0, "slow": 2.0}
    fg = {"a": ["server"], "b": ["server", "slow"]}
    # a and b share the server max-min fairly (b capped at 2 by its own link, a takes 8):
    # the background flow gets nothing; without a, it gets the 8 b leaves
    assert yielding_rates(fg, {"bg": ["server"]}, cap) == {"a": 8.0, "b": 2.0, "bg": 0.0}
    assert yielding_rates({"b": ["server", "slow"]}, {"bg": ["server"], "bg2": ["server"]}, cap) == \
        {"b": 2.0, "bg": 4.0, "bg2": 4.0}
