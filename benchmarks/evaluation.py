"""What per-client evaluation costs (docs/fairness.md, docs/performance.md "Per-client evaluation").

    .venv/bin/python -m benchmarks.evaluation [--pairs 7] [--rounds 60]

1. Per evaluated row, against the global evaluation: 1,000 clients x 20 local test rows
   (`PerClientEval`, one batched forward over the 20,000 rows reduced per client) against one
   global evaluation of 20,000 rows (`ClassificationEval`), the same model and inputs, CPU time
   (`time.process_time`, one torch thread). Pairs alternate which goes first; the ratio is the
   median over the pairs. Goal: <= 1.2x. Measured for the quickstart's CNN (the goal) and for
   logistic regression on 8x8 digits (the least compute per row, where the per-client
   bookkeeping weighs most), and for a sample of 100 of the 1,000 clients (rows gathered).
2. Its share of a run: the quickstart (60 rounds, eval_every 1) with `evaluation: {}`; the CPU
   time inside the per-client evaluations, inside the global ones, and of the whole run.

Writes benchmarks/results/evaluation.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import RESULTS, goal, log, machine

CLIENTS, ROWS = 1000, 20


def _net(model: str, shape):
    from emulator.compute.flat import FlatModel
    from emulator.registry import get
    from emulator.scenario.schema import member
    from emulator.workloads.models import ModelContext
    torch.manual_seed(0)
    module = get("model", model).factory(member("model", model), ModelContext(shape, 10, {}))
    return FlatModel(module, torch.device("cpu"), torch.float32)


def _cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def per_row(model: str, shape, pairs: int) -> dict:
    """Median over alternated pairs of (per-client CPU s) / (global CPU s), same 20,000 rows."""
    from emulator.workloads.evaluate import ClassificationEval, PerClientEval
    from emulator.workloads.local_rows import LocalRows
    net = _net(model, shape)
    g = torch.Generator().manual_seed(1)
    n = CLIENTS * ROWS
    x = torch.randn((n, *shape), generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    w = net.initial_vector()
    perm = np.random.default_rng(2).permutation(n)
    local = LocalRows("test", perm, np.arange(CLIENTS + 1, dtype=np.int64) * ROWS)
    glob = ClassificationEval(net, x, y)
    clients = PerClientEval(net, x, y, local)
    everyone = np.arange(CLIENTS)
    sample = np.sort(np.random.default_rng(3).choice(CLIENTS, 100, replace=False))
    glob(w), clients(w, everyone)                                   # warm up
    ratios, sampled, tg = [], [], []
    for i in range(pairs):
        if i % 2:
            c, gl = _cpu(lambda: clients(w, everyone)), _cpu(lambda: glob(w))
        else:
            gl, c = _cpu(lambda: glob(w)), _cpu(lambda: clients(w, everyone))
        s = _cpu(lambda: clients(w, sample))
        ratios.append(c / gl)
        sampled.append((s / (100 * ROWS)) / (gl / n))
        tg.append(gl)
    out = {"model": model, "rows": n, "global_cpu_s_median": float(np.median(tg)),
           "per_row_ratio_pairs": [round(r, 4) for r in ratios],
           "per_row_ratio": float(np.median(ratios)),
           "sample_100_per_row_ratio": float(np.median(sampled))}
    log(f"{model}: global {out['global_cpu_s_median'] * 1e3:.1f} ms CPU for {n} rows; per-client / global per "
        f"row {out['per_row_ratio']:.3f} (pairs {out['per_row_ratio_pairs']}); a sample of 100 clients "
        f"{out['sample_100_per_row_ratio']:.3f}")
    return out


def run_share(rounds: int) -> dict:
    """CPU time in per-client and global evaluations and of the whole quickstart run."""
    import emulator
    from emulator.sim import client_evaluation, world as W
    spent = {"client": 0.0, "global": 0.0, "client_calls": 0, "global_calls": 0}
    real_client, real_global = client_evaluation.ClientEvaluation.run, W.World.evaluate

    def client(self, *a, **k):
        t = time.process_time()
        try:
            return real_client(self, *a, **k)
        finally:
            spent["client"] += time.process_time() - t
            spent["client_calls"] += 1

    def glob(self, *a, **k):
        t = time.process_time()
        try:
            return real_global(self, *a, **k)
        finally:
            spent["global"] += time.process_time() - t
            spent["global_calls"] += 1

    client_evaluation.ClientEvaluation.run, W.World.evaluate = client, glob
    import tempfile
    try:
        with tempfile.TemporaryDirectory() as d:
            t0, c0 = time.perf_counter(), time.process_time()
            res = emulator.run("scenarios/quickstart.yaml", [f"run.rounds={rounds}", "run.eval_every=1",
                                                            "evaluation={}", "executor.threads=1"],
                               out=Path(d) / "q")
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    finally:
        client_evaluation.ClientEvaluation.run, W.World.evaluate = real_client, real_global
    out = {"rounds": rounds, "run_cpu_s": cpu, "run_wall_s": wall, "client_eval_cpu_s": spent["client"],
           "global_eval_cpu_s": spent["global"], "evaluations": spent["client_calls"],
           "client_eval_share": spent["client"] / cpu, "global_eval_share": spent["global"] / cpu,
           "final_test_acc": res.summary.get("final_test_acc"),
           "final_client_acc_mean": float(res.metrics["client_acc_mean"].dropna().iloc[-1])}
    log(f"quickstart {rounds} rounds, eval_every 1: run {cpu:.1f} s CPU; per-client evaluations "
        f"{spent['client']:.2f} s ({100 * out['client_eval_share']:.1f} %), global {spent['global']:.2f} s "
        f"({100 * out['global_eval_share']:.1f} %), {spent['client_calls']} evaluations")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=7)
    p.add_argument("--rounds", type=int, default=60)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    res = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M")}
    res["cnn_mnist"] = per_row("cnn_mnist", (1, 28, 28), a.pairs)
    res["logreg_digits"] = per_row("logreg", (1, 8, 8), a.pairs)
    res["goal"] = goal("per-client / global CPU per row (cnn_mnist)", res["cnn_mnist"]["per_row_ratio"], "<=", 1.2)
    res["goal_logreg"] = goal("per-client / global CPU per row (logreg)", res["logreg_digits"]["per_row_ratio"],
                              "<=", 1.2)
    res["quickstart"] = run_share(a.rounds)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "evaluation.json").write_text(json.dumps(res, indent=1) + "\n")
    log(f"wrote {RESULTS / 'evaluation.json'}")


if __name__ == "__main__":
    main()
