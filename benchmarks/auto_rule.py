"""Measurements behind the `auto` executor's rule: seconds per round of J jobs x 10 steps
of batch 32, sequential loop vs batched (vmap), per model, on this machine's CPU.

    .venv/bin/python -m benchmarks.auto_rule [--quick]     -> benchmarks/results/auto_rule.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn as nn

from emulator.compute.batched import BatchedExecutor
from emulator.compute.executor import SequentialExecutor, TaskData
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import resolve
from emulator.rng import Streams
from emulator.workloads.models import CnnMnist, forward_macs

MODELS = {
    "logreg": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 10)), (1, 28, 28)),
    "mlp": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 10)), (1, 28, 28)),
    "cnn_mnist": (lambda: CnnMnist(1, 28, 28, 10), (1, 28, 28)),
}


def executor(cls, model, J, per_client=320):
    torch.manual_seed(0)
    mk, shape = MODELS[model]
    net = FlatModel(mk(), torch.device("cpu"), torch.float32)
    x = torch.randn(J * per_client, *shape)
    y = torch.randint(0, 10, (J * per_client,))
    rows = [torch.arange(i * per_client, (i + 1) * per_client) for i in range(J)]
    return cls({0: TaskData(net, x, y, rows)}, Streams(0), torch.device("cpu")), net


def time_round(cls, model, J, steps=10, batch=32, repeats=3) -> float:
    ex, net = executor(cls, model, J)
    w0 = net.initial_vector()
    best = float("inf")
    for r in range(repeats + 1):
        futs = [ex.submit(TrainJob(0, c, r, steps, LocalSpec(w0, LocalRule(lr=0.05)), batch)) for c in range(J)]
        t = time.perf_counter()
        resolve(futs)
        if r:                      # the first round warms up (vmap tracing, allocator)
            best = min(best, time.perf_counter() - t)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    Js = [2, 5, 20, 100] if not a.quick else [5, 20]
    rows = []
    for model, (mk, shape) in MODELS.items():
        macs = forward_macs(mk(), shape)
        for J in Js:
            ts = time_round(SequentialExecutor, model, J)
            tb = time_round(BatchedExecutor, model, J)
            rows.append({"model": model, "forward_macs": macs, "params": sum(p.numel() for p in mk().parameters()),
                         "jobs": J, "sequential_s": ts, "batched_s": tb, "speedup": ts / tb})
            print(f"{model:10s} J={J:4d} macs={macs:9d} seq {ts:.4f}s batched {tb:.4f}s  speedup {ts / tb:.2f}x", flush=True)
    out = Path(__file__).parent / "results" / "auto_rule.json"
    out.write_text(json.dumps({"threads": a.threads, "steps": 10, "batch": 32, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
