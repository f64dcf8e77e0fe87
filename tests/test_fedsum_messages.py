"""Messages and memory of the FedSUM family and its baselines (docs/algorithms/fedsum.md 3.5, 4, T8f):
bytes per round = vectors x 4d x |S^t| in each direction, exactly, in metrics.csv; a
client's first upload is its new y_i; per-client state kinds, bytes (held and dense-equivalent)
and rows written in summary.json;
the realised delay metrics of every method's run (T1)."""
import numpy as np
import pytest
import torch

from devices.network import message_bytes
from emulator.compute.jobs import TrainResult
from reference import fedsum_reference as ref
from reference.fedsum_harness import algo_block, quad_scenario
from test_fedsum_baselines import Done, make

SEQ = ref.SEQ
D = 2                                    # the quadratic's dimension

# method -> (vectors down, vectors up) per active client per round (docs/algorithms/fedsum.md 3.5, 4)
VECTORS = {"fedsum_b": (1, 1), "fedsum": (2, 1), "fedsum_cr": (1, 1), "fedavg_active": (1, 1),
           "scaffold": (2, 2), "scaffold_1up": (2, 1), "mifa": (1, 1), "fedvarp": (1, 1), "fedau": (1, 1),
           "fedawe": (1, 1), "fedawe_clip": (1, 2)}

T8 = 8 * D * 3                            # one float64 [N=3, d=2] table
S8 = 8 * 3                                # one [N] array
X8 = 69 * 8 * D                           # the exact sum of a float64 table (69 limbs of int64 per coordinate)
STATE = {"fedsum_b": {"fedsum_y": T8}, "fedsum": {"fedsum_y": T8},
         "fedsum_cr": {"fedsum_y": T8, "fedsum_xhat": T8, "fedsum_r": S8},
         "fedavg_active": {}, "scaffold": {"scaffold_c": T8}, "scaffold_1up": {"scaffold_c": T8},
         "mifa": {"mifa_u": T8 + X8}, "fedvarp": {"fedvarp_u": T8 + X8},
         "fedau": {"fedau_absent": S8, "fedau_interval_sum": S8, "fedau_interval_count": S8},
         "fedawe": {"fedawe_x": T8, "fedawe_last": S8}, "fedawe_clip": {"fedawe_x": T8, "fedawe_last": S8}}


@pytest.mark.parametrize("method", list(VECTORS))
def test_t8f_bytes_per_round_state_and_delays(run_in, tmp_path, method):
    sc = quad_scenario(algo_block(method, 0.1), SEQ, tmp_path,
                       network={"latency": 0.01, "up_mbps": 1.0, "down_mbps": 2.0})
    res = run_in(sc)
    m = res.metrics[res.metrics["round"] >= 1]
    size = np.array([len(s) for s in SEQ])
    down, up = VECTORS[method]
    assert m["participants"].tolist() == size.tolist()
    assert m["bytes_down"].tolist() == (down * 4 * D * size).tolist()
    assert m["bytes_up"].tolist() == (up * 4 * D * size).tolist()
    s = res.summary
    assert s["client_state_kinds"] == STATE[method]
    assert s["client_state_peak_bytes"] == s["client_state_bytes"] == sum(STATE[method].values())
    tables = [k for k, v in STATE[method].items() if v >= T8]        # every client wrote every table
    assert s["client_state_rows"] == {k: 3 for k in tables}
    assert s["client_state_dense_bytes"] == T8 * len(tables) + S8 * (len(STATE[method]) - len(tables))
    assert m["tau"].tolist() == [1, 2, 3, 2, 1, 0]                       # T1 on the realised run
    assert s["delay"]["0"]["tau_max"] == 3 and s["delay"]["0"]["tau_avg"] == 1.5


def test_spec_example_fedsum_round_on_the_paper_mnist_cnn():
    """docs/algorithms/fedsum.md 3.5: d = 51,480, |S^t| = 10: a FedSUM round sends 4,118,400 B down and
    2,059,200 B up; FedSUM-CR 2,059,200 B each way; SCAFFOLD twice FedSUM's uplink."""
    got = {}
    for name in ("fedsum", "fedsum_cr", "scaffold"):
        a = make(name, N=100, d=51_480, lr=0.05)
        got[name] = tuple(10 * message_bytes(a.message_numel(d)) for d in ("down", "up"))
    assert got == {"fedsum": (4_118_400, 2_059_200), "fedsum_cr": (2_059_200, 2_059_200),
                   "scaffold": (4_118_400, 4_118_400)}


@pytest.mark.parametrize("name", ["fedsum_b", "fedsum", "fedsum_cr"])
def test_first_upload_is_the_new_y_then_its_change(name):
    algo = make(name, lr=0.1)
    g1 = torch.tensor([0.5, -1.5], dtype=torch.float64)
    g2 = torch.tensor([0.25, 2.0], dtype=torch.float64)
    res = lambda g: Done(TrainResult(params=torch.zeros(2, dtype=torch.float64), steps=3, loss_mean=0.0,  # noqa: E731
                                     grad_mean=g))
    from test_fedsum_baselines import arrival
    for t, g, want in ((1, g1, g1), (2, g2, g2 - g1)):
        algo.local_spec(1, t, algo.broadcast(t))
        up = algo.upload(1, t, res(g))
        assert torch.equal(up.vectors[0], want)
        algo.aggregate(t, [arrival(1, t, [up.vectors[0]], meta={"y_new": up.meta["y_new"]})])
        assert torch.equal(algo.states.row("fedsum_y", 1), g)
