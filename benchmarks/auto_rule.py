"""Measurements behind the `auto` executor's rule: seconds per round of J jobs x 10 steps
of batch 32, per model, on this machine's CPU: the sequential loop (one job at a time on
`--threads` torch threads), the same loop on `--threads` worker threads of one torch thread
each (`workers`), and batched (vmap). The variants take turns within each repetition
(after one warm-up round each); the median of the repetitions is reported.

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
from emulator.compute.executor import SequentialExecutor, SequentialParams, TaskData
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import resolve
from emulator.rng import Streams
from emulator.workloads.models import CnnMcMahan, CnnMnist, forward_macs

MODELS = {
    "logreg": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 10)), (1, 28, 28)),
    "mlp": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 10)), (1, 28, 28)),
    "cnn_mnist": (lambda: CnnMnist(1, 28, 28, 10), (1, 28, 28)),
    "cnn_mcmahan": (lambda: CnnMcMahan(1, 28, 28, 10), (1, 28, 28)),
}


def executor(cls, model, J, params=None, per_client=320):
    torch.manual_seed(0)
    mk, shape = MODELS[model]
    net = FlatModel(mk(), torch.device("cpu"), torch.float32)
    x = torch.randn(J * per_client, *shape)
    y = torch.randint(0, 10, (J * per_client,))
    rows = [torch.arange(i * per_client, (i + 1) * per_client) for i in range(J)]
    return cls({0: TaskData(net, x, y, rows)}, Streams(0), torch.device("cpu"), params), net


def time_rounds(variants: dict, model, J, steps=10, batch=32, repeats=3) -> dict:
    """Median seconds of a round of J jobs per variant (name -> (class, params)), taking turns."""
    exs = {name: executor(cls, model, J, params) for name, (cls, params) in variants.items()}
    times = {name: [] for name in variants}
    for r in range(repeats + 1):
        for name, (ex, net) in exs.items():
            w0 = net.initial_vector()
            futs = [ex.submit(TrainJob(0, c, r, steps, LocalSpec(w0, LocalRule(lr=0.05)), batch)) for c in range(J)]
            t = time.perf_counter()
            resolve(futs)
            if r:                      # the first round warms up (vmap tracing, allocator, replicas)
                times[name].append(time.perf_counter() - t)
    return {name: sorted(v)[len(v) // 2] for name, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    Js = [2, 5, 20, 100] if not a.quick else [5, 20]
    variants = {"sequential": (SequentialExecutor, SequentialParams(workers=1, threads=a.threads)),
                "workers": (SequentialExecutor, SequentialParams(workers=a.threads)),
                "batched": (BatchedExecutor, None)}
    rows = []
    for model, (mk, shape) in MODELS.items():
        macs = forward_macs(mk(), shape)
        for J in Js:
            if model == "cnn_mcmahan" and J > 20:
                continue
            t = time_rounds(variants, model, J)
            rows.append({"model": model, "forward_macs": macs, "params": sum(p.numel() for p in mk().parameters()),
                         "jobs": J, "sequential_s": t["sequential"], "workers_s": t["workers"],
                         "batched_s": t["batched"], "speedup": t["sequential"] / t["batched"],
                         "workers_speedup": t["sequential"] / t["workers"]})
            print(f"{model:11s} J={J:4d} macs={macs:9d} seq {t['sequential']:.4f}s  workers {t['workers']:.4f}s "
                  f"batched {t['batched']:.4f}s  speed-up: workers {rows[-1]['workers_speedup']:.2f}x, "
                  f"batched {rows[-1]['speedup']:.2f}x", flush=True)
    out = Path(__file__).parent / "results" / "auto_rule.json"
    out.write_text(json.dumps({"threads": a.threads, "steps": 10, "batch": 32, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
