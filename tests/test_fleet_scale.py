"""A fleet of millions on one machine (docs/performance.md, "Fleet scale"): keyed lazy
generation (a device's rows whenever and in whatever order asked), the sequential generator
kept bit for bit behind `generation: sequential`, clients made when touched, a sparse log,
no per-round pass over the fleet besides availability's draw, memory per idle client, and
the FedSUM state store proportional to the clients that trained."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from emulator.scenario import schema as scenario
from emulator.workloads import datasets as D
from emulator.workloads import keyed as K
from emulator.rng import Streams

from test_dataset_memory import SETTINGS, old_synthetic, same

ROOT = Path(__file__).resolve().parents[1]


def keyed_ctx(n, seed, key=0):
    s = Streams(seed)
    return D.DatasetContext(n, s.keyed("data", key), s.keyed("partition", key, 1),
                            device_stream=lambda k: s.keyed("data.device", key, k),
                            test_stream=s.keyed("data.test_devices", key))


def pool_rows(data, k):
    """Client k's rows as the executor reads them: row numbers into the pool, then the pool."""
    rows = data.client_indices[k]
    return data.client_indices.x[rows].numpy().copy(), data.client_indices.y[rows].numpy().copy()


ORDERS = {"ascending": lambda n, r: np.arange(n), "descending": lambda n, r: np.arange(n)[::-1],
          "shuffled": lambda n, r: r.permutation(n), "repeats": lambda n, r: r.integers(0, n, 2 * n)}


@pytest.mark.parametrize("n,seed,opts", [(30, 0, dict(max_samples_per_client=40)),
                                         (120, 5, dict(alpha=0.5, beta=2.0, dim=7, classes=3)),
                                         (57, 9, dict(iid=True, max_samples_per_client=90, test_fraction=0.3))])
def test_keyed_rows_are_the_same_whenever_and_in_whatever_order_asked(n, seed, opts):
    p = scenario.member("dataset", "synthetic", generation="keyed", test_devices=10, **opts)
    ref = D.synthetic(p, keyed_ctx(n, seed))
    first = {k: pool_rows(ref, k) for k in range(n)}              # in order, one data set
    for name, order in ORDERS.items():
        d = D.synthetic(p, keyed_ctx(n, seed))
        asked = order(n, np.random.default_rng(seed + 1))
        for k in asked:
            x, y = pool_rows(d, int(k))
            assert same(x, first[int(k)][0]) and same(y, first[int(k)][1]), (name, int(k))
        assert d.client_indices.generated == len(set(asked.tolist()))     # each device made once
        assert same(d.x_test, ref.x_test) and same(d.y_test, ref.y_test)
    sizes = ref.client_sizes()
    assert [len(first[k][1]) for k in range(n)] == sizes.tolist() and (sizes >= 1).all()
    # a device's rows depend on its own key only: another seed or data key gives other rows
    other = D.synthetic(p, keyed_ctx(n, seed, key=1))
    assert not same(pool_rows(other, 3)[0][:1], first[3][0][:1]) or len(first[3][1]) == 0


def test_keyed_test_set_is_a_seeded_sample_of_devices_rows():
    """The global test set: the held-out rows of `test_devices` devices drawn by the test
    stream, each device's the same rows as when every device is in the test set."""
    opts = dict(generation="keyed", max_samples_per_client=30)
    p = scenario.member("dataset", "synthetic", test_devices=6, **opts)
    d = D.synthetic(p, keyed_ctx(200, 3))
    devs = d.extra["test_devices"]
    assert len(devs) == 6 and (np.diff(devs) > 0).all() and devs.max() < 200
    full = D.synthetic(scenario.member("dataset", "synthetic", test_devices=200, **opts), keyed_ctx(200, 3))
    assert full.extra["test_devices"].tolist() == list(range(200))
    total = D.synthetic_sizes(p, 200, Streams(3).keyed("data", 0))
    held = np.maximum(1, np.rint(0.2 * total).astype(np.int64))
    assert (full.client_sizes() == total - held).all()
    start = np.concatenate(([0], np.cumsum(held)))
    want = np.concatenate([np.arange(start[k], start[k + 1]) for k in devs])
    assert same(d.x_test, full.x_test[want]) and same(d.y_test, full.y_test[want])
    d2 = D.synthetic(p, keyed_ctx(200, 4))
    assert not np.array_equal(d2.extra["test_devices"], devs)              # another seed: another sample


@pytest.mark.parametrize("n,seed,opts", SETTINGS[:4])
def test_sequential_generation_keeps_the_earlier_rows_above_the_keyed_size(n, seed, opts, monkeypatch):
    """`generation: sequential` reproduces the earlier generator bit for bit even where
    `auto` would go keyed (the threshold lowered to these fleets)."""
    monkeypatch.setattr(K, "KEYED_FROM", 5)
    p = scenario.member("dataset", "synthetic", generation="sequential", **opts)
    c = D.DatasetContext(n, np.random.default_rng(seed), np.random.default_rng(seed + 100))
    new = D.synthetic(p, c)
    x_tr, y_tr, x_te, y_te, idx = old_synthetic(p, D.DatasetContext(n, np.random.default_rng(seed),
                                                                   np.random.default_rng(seed + 100)))
    assert same(new.x_train, x_tr) and same(new.y_train, y_tr) and same(new.x_test, x_te) and same(new.y_test, y_te)
    assert all(same(a, b) for a, b in zip(new.client_indices, idx))
    auto = scenario.member("dataset", "synthetic", **opts)
    assert not D.synthetic(auto, keyed_ctx(n, seed)).x_train.size           # auto: keyed (no rows at set-up)


def fleet_yaml(n, **over):
    sc = {"name": "f", "seed": 0,
          "workload": {"dataset": {"name": "synthetic", "max_samples_per_client": 20}, "model": {"name": "logreg"}},
          "clients": {"count": n, "groups": [{"name": "a", "fraction": 1.0, "compute": {"model": "instant"},
                                              "network": {"latency": 0.0, "up_mbps": 1, "down_mbps": 1}}]},
          "protocol": {"name": "rounds", "select": {"model": "uniform", "k": 2}, "local_steps": 1},
          "algorithm": {"name": "fedavg", "lr": 0.1}, "run": {"rounds": 1}}
    sc.update(over)
    return sc


@pytest.mark.parametrize("n,generation,log", [(99_999, "sequential", "all"), (100_000, "keyed", "participants")])
def test_auto_resolves_by_fleet_size_into_the_config(n, generation, log):
    d = scenario.dump(scenario.load(fleet_yaml(n)))
    assert d["workload"]["dataset"]["generation"] == generation and d["output"]["clients_csv"] == log
    forced = scenario.dump(scenario.load(fleet_yaml(n, output={"clients_csv": "all"})))
    assert forced["output"]["clients_csv"] == "all"


def test_keyed_data_refuses_what_needs_every_row():
    from emulator.errors import ScenarioError
    from emulator.sim.world import World
    sc = fleet_yaml(50)
    sc["workload"]["dataset"]["generation"] = "keyed"
    sc["run"]["eval_train"] = True
    with pytest.raises(ScenarioError, match="workload.dataset.generation: keyed generation"):
        World(scenario.load(sc))
    sc["run"]["eval_train"] = False
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": "labels"}
    with pytest.raises(ScenarioError, match="no label histograms at set-up: use workload.dataset.generation"):
        World(scenario.load(sc))
    sc["workload"]["dataset"]["generation"] = "sequential"          # the sequential rows have labels
    assert World(scenario.load(sc)).tasks[0].data.client_indices.bounds[-1] > 0


def run_child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


PASSES = """
import json, sys
sys.path[:0] = ['{root}', '{root}/tests']
from fleet_probe import count_passes
print(json.dumps(count_passes({n}, '{algo}', {rounds}, '{log}')))
"""


@pytest.mark.parametrize("algo", ["fedavg", "fedsum"])
@pytest.mark.slow
def test_no_per_round_pass_over_the_fleet_besides_availability(algo):
    """Rounds 2..R of a 60,000-client run (keyed data, Markov availability, uniform selection,
    a sparse log): every NumPy operation on an array of the fleet's length is counted with
    the code that made it; only availability's draw may touch the whole fleet (a few
    operations a round), nothing else; Client objects exist only for the clients touched."""
    r = run_child(PASSES.format(root=ROOT, n=60_000, algo=algo, rounds=5, log="participants"))
    assert r["availability"] >= r["rounds"], r              # the instrument sees availability's draw
    assert r["other"] == {}, r
    assert r["touched"] <= r["trained"] and r["generated"] == r["trained"] > 0


@pytest.mark.slow
def test_a_dense_log_is_a_pass_the_probe_sees():
    """The probe's own check: a dense clients log (a row per client per round) is a pass."""
    r = run_child(PASSES.format(root=ROOT, n=60_000, algo="fedavg", rounds=3, log="all"))
    assert sum(r["other"].values()) >= r["rounds"], r


MEMORY = """
import json, resource, sys
sys.path[:0] = ['{root}']
import torch; torch.set_num_threads(1)
from benchmarks.fleet import scenario
from emulator.scenario import schema
from emulator.sim.world import World
sc = scenario({n}, 'fedsum', 3)
w = World(schema.load(sc)); w.run()
print(json.dumps({{"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "status": w.status}}))
"""


@pytest.mark.slow
def test_a_100k_client_run_costs_under_300_bytes_per_idle_client():
    """Peak RSS of a 10^5-client FedSUM run (keyed data, 3 rounds of 100 clients) minus that
    of a 10^3-client one: measured about 135 bytes a client (docs/performance.md); bound 300.
    The sequential generator held its rows (about 12.9 KB a client)."""
    small = run_child(MEMORY.format(root=ROOT, n=1_000))
    big = run_child(MEMORY.format(root=ROOT, n=100_000))
    assert small["status"] == big["status"] == "complete"
    per_client = (big["peak_mb"] - small["peak_mb"]) * 2**20 / 99_000
    assert per_client < 300, (per_client, small, big)


def test_fedsum_state_grows_with_the_clients_that_trained():
    """FedSUM's stored y_i at 20,000 clients: one row per client that ever trained, in blocks
    of 1 MiB (429 rows of d = 610 float32), not N rows."""
    from emulator.sim.world import World
    from benchmarks.fleet import scenario as fleet_scenario
    sc = fleet_scenario(20_000, "fedsum", 4)
    sc["protocol"]["select"]["k"] = 150
    w = World(scenario.load(sc))
    w.run()
    trained = set()
    for log in w.recorder.rounds:
        trained |= set(log.clients()[log.steps > 0].tolist())
    s = w.client_state_summary()
    assert s["client_state_rows"] == {"fedsum_y": len(trained)} and 430 < len(trained) <= 600
    row = w.tasks[0].net.dim * 4
    per_block = (1 << 20) // row
    assert (row, per_block) == (2440, 429)
    assert s["client_state_bytes"] == -(-len(trained) // per_block) * per_block * row == 2 * 1046760
    assert s["client_state_dense_bytes"] == 20_000 * row


def test_a_partition_keeps_one_flat_array_of_rows():
    """A real data set's partition: every client's rows in one int64 array and bounds (views
    handed out), the rows the partitioner drew, no array object per client."""
    from emulator.workloads.data import IndexRows
    from emulator.workloads.partitions import partition_data
    from emulator.workloads.data import FederatedData
    y = np.repeat(np.arange(4), 30)
    data = FederatedData("d", np.zeros((120, 2), np.float32), y, y[:0, None].astype(np.float32), y[:0], 4, (2,))
    spec = scenario.member("partition", "dirichlet", alpha=0.5)
    got = partition_data(data, spec, 9, np.random.default_rng(1), "workload.partition")
    from emulator.registry import get
    want = get("partition", "dirichlet").factory(spec, y, 9, np.random.default_rng(1), "workload.partition")
    ix = got.client_indices
    assert isinstance(ix, IndexRows) and ix.rows.base is None and len(ix) == 9
    assert all(same(ix[k], np.asarray(w, dtype=np.int64)) for k, w in enumerate(want))
    assert ix[3].base is ix.rows and (got.client_sizes() == [len(w) for w in want]).all()
    with pytest.raises(IndexError):
        ix[9]
