"""Where a run's wall time goes, per compute path, on one and two torch threads, with background
busy processes (Linux: /proc schedstat; docs/performance.md, "A busy machine").

    .venv/bin/python -m benchmarks.job_time [--runs 2] [--busy 0,2,4] [--paths jobs,lone,eval,batched]
    -> benchmarks/results/job_time.json

Paths, each on a scenario that exercises it:
  jobs     W1-het E0 (benchmarks/emulation.py), 20 jobs a round: a level of training jobs;
  lone     W1-het E3 (FedAsync): one job at a time;
  eval     the quickstart (10 rounds): 5 jobs a round and an evaluation of 1,000 digits a round;
  batched  W1 with `logreg` under `auto`: 20 small jobs a round stacked under vmap.
Variants: `threads=1` (flemu's default: one torch thread per job, as many jobs at once as the
cores) and `threads=2` (two intra-op threads, one job at a time). Each span (a job, an
evaluation, a stack) is timed three ways from its thread's /proc/thread-self/schedstat: on a
CPU, runnable but waiting for a core, and neither (blocked: the GIL, a lock, an OpenMP
barrier's sleep). Each run is a fresh process; the variants take turns.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
VARIANTS = {"threads=1": [], "threads=2": ["executor.threads=2"]}
PATHS = ("jobs", "lone", "eval", "batched")


def _schedstat() -> tuple:
    """(seconds on a CPU, seconds runnable on a run queue) of the calling thread."""
    on, queued, _ = open("/proc/thread-self/schedstat").read().split()
    return int(on) / 1e9, int(queued) / 1e9


def _probe(cls, name: str, key: str, spans: dict):
    """Time every call of cls.name as a span of kind `key`."""
    real = getattr(cls, name)

    def timed(*a, **k):
        t0, (c0, q0) = time.perf_counter(), _schedstat()
        try:
            return real(*a, **k)
        finally:
            c1, q1 = _schedstat()
            spans.setdefault(key, []).append((time.perf_counter() - t0, c1 - c0, q1 - q0))
    setattr(cls, name, timed)


def scenario(path: str, over: list):
    from benchmarks.common import w1_scenario
    from benchmarks.emulation import scenario as w1het
    from emulator.scenario import schema
    if path == "eval":
        return schema.load(str(HERE.parent / "scenarios" / "quickstart.yaml"), ["run.rounds=10", *over])
    if path == "batched":
        raw = w1_scenario(5)
        raw["workload"]["model"] = {"name": "logreg"}
        return schema.load(raw, over)
    return schema.load(w1het("E0" if path == "jobs" else "E3", 5 if path == "jobs" else 60), over)


def one(path: str, variant: str) -> dict:
    """One run in this process: its wall and CPU seconds, and per span kind the split."""
    from emulator.compute.batched import BatchedExecutor
    from emulator.compute.executor import SequentialExecutor
    from emulator.sim.world import World
    from emulator.workloads.evaluate import ClassificationEval
    spans: dict = {}
    _probe(SequentialExecutor, "train", "job", spans)
    _probe(ClassificationEval, "__call__", "eval", spans)
    _probe(BatchedExecutor, "run_stacked", "stack", spans)
    world = World(scenario(path, VARIANTS[variant]))
    t0, c0 = time.perf_counter(), time.process_time()
    world.run()
    out = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
           "workers": int(world.executor.workers), "spans": {}}
    for key, v in spans.items():
        w, c, q = np.array(v).sum(0)
        out["spans"][key] = {"n": len(v), "s": float(w), "on_cpu": float(c / w), "waiting_for_a_core": float(q / w),
                             "blocked": float((w - c - q) / w)}
    return out


def timed(path: str, variant: str, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    load = os.getloadavg()[0]
    try:
        r = subprocess.run([sys.executable, "-m", "benchmarks.job_time", "--one", path, variant], capture_output=True,
                           text=True, cwd=HERE.parent, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timed_out": True, "timeout_s": timeout, "load_avg_1m": load}
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "load_avg_1m": load}


def _line(n, path, variant, x) -> str:
    if x.get("timed_out"):
        return f"{n} busy, {path:7s} {variant}: timed out after {x['timeout_s']:.0f} s (load {x['load_avg_1m']:.1f})"
    parts = [f"{k} {s['n']} x: {s['s']:.1f} s, on a CPU {s['on_cpu']:.0%}, waiting {s['waiting_for_a_core']:.0%}, "
             f"blocked {s['blocked']:.0%}" for k, s in x["spans"].items()]
    return (f"{n} busy, {path:7s} {variant} (load {x['load_avg_1m']:.1f}, {x['workers']} workers): wall "
            f"{x['wall_s']:.1f} s, CPU {x['cpu_s']:.1f} s; " + "; ".join(parts))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--busy", default="0,2,4", help="background busy processes per condition")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(*a.one)))
        return
    from benchmarks.busy import Spinners
    from benchmarks.common import machine, w1_npz
    w1_npz()
    res = {"machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "command": f"python -m benchmarks.job_time --runs {a.runs} --busy {a.busy} --paths {a.paths}", "runs": []}
    for n in (int(x) for x in a.busy.split(",")):
        with Spinners(n):
            time.sleep(2.0 if n else 0.0)
            for path in a.paths.split(","):
                for r in range(a.runs):
                    for variant in (list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]):
                        x = timed(path, variant, a.timeout)
                        res["runs"].append({"busy": n, "path": path, "variant": variant, **x})
                        print(_line(n, path, variant, x), flush=True)
    (HERE / "results" / "job_time.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
