"""Shared helpers: small scenarios that run in well under a second.

Threads: torch threads x xdist workers must not exceed the cores (2 on CI), or the suite
slows several-fold. Each worker gets cores // workers threads, and so does every subprocess
a test starts (`flemu` commands, sweep workers), through OMP_NUM_THREADS / MKL_NUM_THREADS,
set here before torch is imported.
"""
from __future__ import annotations

import copy
import os

_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
# FLEMU_TEST_THREADS forces a count (make mutate: one thread, as under `make test`)
THREADS = int(os.environ.get("FLEMU_TEST_THREADS") or max(1, (os.cpu_count() or 1) // _workers))
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(THREADS)


@pytest.fixture
def one_torch_thread():
    """Tiny models (the fuzz tests): one torch thread is fastest and never oversubscribes the
    cores. Modules opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny(**over) -> dict:
    """logreg on sklearn digits, 6 clients, 3 rounds: a fast, real scenario."""
    sc = {
        "name": "tiny",
        "seed": 0,
        "workload": {"dataset": {"name": "digits"}, "partition": {"name": "iid"},
                     "model": {"name": "logreg"}, "batch_size": 16},
        "clients": {"count": 6, "groups": [
            {"name": "g", "fraction": 1.0, "compute": {"model": "constant", "step_time": 0.1},
             "network": {"latency": 0.01, "up_mbps": 10, "down_mbps": 10}}]},
        "protocol": {"name": "rounds", "select": {"model": "uniform", "k": 3}, "local_steps": 5},
        "algorithm": {"name": "fedavg", "lr": 0.1},
        "run": {"rounds": 3},
    }
    for path, v in over.items():
        node = sc
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = v
    return sc


def two_links(**over):
    """8 clients, all selected, links without jitter: 4 on 10 Mbit/s, 4 on a 0.5 Mbit/s uplink."""
    fast = {"latency": 0.01, "up_mbps": 10, "down_mbps": 10}
    sc = tiny(**{"clients.count": 8, "protocol.select.k": 8, "run.rounds": 2, **over})
    sc["clients"]["groups"] = [
        {"name": "fast", "count": 4, "compute": {"model": "constant", "step_time": 0.1}, "network": fast},
        {"name": "slow", "count": 4, "compute": {"model": "constant", "step_time": 0.1},
         "network": {**fast, "up_mbps": 0.5}}]
    return sc


def quadratic_scenario(n=6, rounds=20, steps=5, lr=0.1, algo="fedavg", k=None, **algo_kw) -> dict:
    sc = {
        "name": "quad",
        "seed": 3,
        "workload": {"dataset": {"name": "quadratic", "block": 4, "mu": 0.01},
                     "model": {"name": "quadratic"}, "batch_size": "full"},
        "clients": {"count": n, "groups": [
            {"name": "g", "fraction": 1.0, "compute": {"model": "constant", "step_time": 1.0},
             "network": "instant"}]},
        "protocol": {"name": "rounds", "local_steps": steps,
                     "select": {"model": "uniform", "k": k} if k else {"model": "all"}},
        "algorithm": {"name": algo, "lr": lr, **algo_kw},
        "run": {"rounds": rounds},
        "executor": {"name": "sequential", "dtype": "float64"},
    }
    return sc


@pytest.fixture
def run_in(tmp_path):
    """Run a scenario dict into tmp_path/<name>; returns the RunResult."""
    import emulator

    def _run(sc, name="run", **kw):
        return emulator.run(copy.deepcopy(sc), out=tmp_path / name, **kw)
    return _run


class Rngs:
    """The random streams an availability model binds to (as the world's: the group's stream
    of round r, client c's own long-lived stream), for a seed and a group."""

    def __init__(self, seed=0, group=0):
        from emulator.rng import Streams
        self.s, self.g = Streams(seed), group

    def round(self, r):
        return self.s.keyed("availability.round", self.g, r)

    def client(self, c):
        return self.s.generator("availability.client", c)


def executor_on_random_data(cls, net, input_shape, sizes, params=None, classes=10):
    """An executor of class `cls` for one task: the flat model `net`, len(sizes) clients owning
    consecutive rows of random float64 inputs of `input_shape` and labels in 0..classes-1
    (generator seed 1), on the CPU."""
    import numpy as np

    from emulator.compute.executor import ClientRows, TaskData
    from emulator.rng import Streams

    cpu = torch.device("cpu")
    g = torch.Generator().manual_seed(1)
    n = sum(sizes)
    x = torch.randn(n, *input_shape, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=g)
    off = np.cumsum([0] + list(sizes))
    rows = ClientRows([np.arange(a, b) for a, b in zip(off[:-1], off[1:])], cpu)
    return cls({0: TaskData(net, x, y, rows)}, Streams(0), cpu, params)


def docs_script(name: str):
    """docs/<name>.py (a page's results script) loaded as a module, for its tests."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / "docs" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
