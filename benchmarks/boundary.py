"""What the checked boundary around user code costs (docs/reliability.md, "Statuses and
contracts"): whole runs with every crossing checked against the same runs with the checks
bypassed, in alternated pairs (on, off, then off, on, ...), the median of the per-pair ratios.

    python -m benchmarks.boundary [--reps 5]

"Bypassed" is this benchmark's doing only: it swaps the boundary for pass-through versions (the
algorithm's verbs called directly, clocks unwrapped, device numbers and pieces unchecked), so
the two arms run the same simulation. Two scenarios: an engine-bound one (400 clients of the
quadratic model, one local step each, instant links: the engine's per-client work, where the
checks weigh most) and the small real one of the tests (digits, logreg). Goal: <= 5% at the
median. Writes benchmarks/results/boundary.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, log, machine

OUT = RESULTS / "boundary.json"


def _quadratic(name: str, clients: int, protocol: dict, algorithm: dict, rounds: int) -> dict:
    return {
        "name": name, "seed": 1,
        "workload": {"dataset": {"name": "quadratic", "block": 4, "mu": 0.01}, "model": {"name": "quadratic"},
                     "batch_size": "full"},
        "clients": {"count": clients, "groups": [{"name": "g", "fraction": 1.0,
                                                   "compute": {"model": "lognormal", "mean_step_time": 1.0,
                                                               "sigma": 0.3},
                                                   "network": "instant"}]},
        "protocol": protocol, "algorithm": algorithm, "run": {"rounds": rounds},
        "executor": {"name": "sequential", "dtype": "float64", "threads": 1},
    }


def scenarios() -> dict:
    """Engine-bound runs (tiny quadratic models, one local step: the engine's per-client work
    is most of the time, where the checks weigh most) and the small real one of the tests."""
    return {
        # SCAFFOLD: a LocalSpec with correction vectors and an Upload per client, client by client
        "scaffold_rounds": _quadratic("scaffold_rounds", 300, {"name": "rounds", "local_steps": 1,
                                                                "select": {"model": "uniform", "k": 150}},
                                      {"name": "scaffold", "lr": 0.05}, 10),
        # FedAvg's cohort path: one spec and one aggregation of rows a round
        "fedprox_cohort": _quadratic("fedprox_cohort", 400, {"name": "rounds", "local_steps": 1,
                                                              "select": {"model": "uniform", "k": 200}},
                                     {"name": "fedprox", "lr": 0.05, "mu": 0.1}, 10),
        # async: a clock, a local_spec, an upload and an aggregation per job
        "fedasync": _quadratic("fedasync", 100, {"name": "async", "local_steps": 1},
                               {"name": "fedasync", "lr": 0.05}, 600),
        "digits": {
            "name": "digits", "seed": 0,
            "workload": {"dataset": {"name": "digits"}, "partition": {"name": "iid"}, "model": {"name": "logreg"},
                         "batch_size": 16},
            "clients": {"count": 50, "groups": [{"name": "g", "fraction": 1.0,
                                                  "compute": {"model": "constant", "step_time": 0.1},
                                                  "network": {"latency": 0.01, "up_mbps": 10, "down_mbps": 10}}]},
            "protocol": {"name": "rounds", "select": {"model": "uniform", "k": 20}, "local_steps": 5},
            "algorithm": {"name": "fedavg", "lr": 0.1},
            "run": {"rounds": 10},
            "executor": {"threads": 1},
        },
    }


@contextlib.contextmanager
def bypassed():
    """The boundary swapped for pass-through versions (restored on exit)."""
    from emulator.boundary import selection
    from emulator.compute import gradient
    from emulator.sim import client, network, world
    from emulator.sim.protocols import asynchronous, base, selecting

    class Direct:
        def __init__(self, task, name):
            self.algo = task.algorithm

        def __getattr__(self, verb):                  # local_spec, upload, broadcast, ...
            return getattr(self.algo, verb)

        def reads(self, t, arrivals):
            return set(self.algo.reads(t, arrivals))

        def uploaded(self, *a):
            pass

        def uploaded_rows(self, *a):
            pass

        def aggregate(self, t, arrivals, log):
            return self.algo.aggregate(t, arrivals)

        def aggregate_rows(self, t, rows, log):
            return self.algo.aggregate_rows(t, rows)

    class Choice(selection.CheckedSelection):
        def choice(self, got, avail, t):
            ids, w = (got.ids, got.weights) if hasattr(got, "ids") else (got, None)
            order = sorted(range(len(ids)), key=lambda i: int(ids[i]))
            return [int(ids[i]) for i in order], None if w is None else [float(w[i]) for i in order]

    class Off:
        seconds = staticmethod(lambda x, *a, **k: x)
        seconds_array = staticmethod(lambda x, *a, **k: x)
        mask = staticmethod(lambda x, *a, **k: x)
        moment = staticmethod(lambda x, *a, **k: x)

    class Pieces:
        term_value = staticmethod(lambda t, v: v)
        transformed = staticmethod(lambda t, g, out: out)

    saved = [(m, n, getattr(m, n)) for m, n in [
        (world, "CheckedAlgorithm"), (selecting, "CheckedSelection"), (client, "CheckedClock"), (network, "boundary"),
        (base, "devices_boundary"), (asynchronous, "devices_boundary"), (gradient, "checked")]]
    try:
        world.CheckedAlgorithm = Direct
        selecting.CheckedSelection = Choice
        client.CheckedClock = lambda clock, model, round_: clock
        network.boundary = base.devices_boundary = asynchronous.devices_boundary = Off
        gradient.checked = Pieces
        yield
    finally:
        for m, n, v in saved:
            setattr(m, n, v)


def one_run(sc: dict, checked: bool) -> tuple:
    """(CPU seconds, wall seconds) of one run. CPU time of this one-threaded process is what
    the ratio is taken on: on a shared machine the wall clock also counts the others' work."""
    import emulator
    with tempfile.TemporaryDirectory() as d, (contextlib.nullcontext() if checked else bypassed()):
        c, t = time.process_time(), time.perf_counter()
        emulator.run(json.loads(json.dumps(sc)), out=Path(d) / "run")
        return time.process_time() - c, time.perf_counter() - t


def boundary_share(sc: dict) -> float:
    """The checks' own share of one checked run: the self time of emulator/boundary/'s
    functions under cProfile over the run's total (a lower bound that the machine's other work
    does not move, unlike the pairs' ratio: the builtins they call are not counted)."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.runcall(one_run, sc, True)
    st = pstats.Stats(prof)
    own = sum(v[2] for k, v in st.stats.items() if "emulator/boundary/" in k[0])
    return own / st.total_tt


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5, help="alternated pairs per scenario (>= 5)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = {"machine": machine(), "reps": a.reps, "scenarios": {}}
    for name, sc in scenarios().items():
        one_run(sc, True)                                  # warm-up: imports, data caches
        got = []
        for i in range(a.reps):
            order = (True, False) if i % 2 == 0 else (False, True)
            pair = {c: one_run(sc, c) for c in order}
            got.append((pair[True], pair[False]))
        cpu = [on[0] / off[0] for on, off in got]
        wall = [on[1] / off[1] for on, off in got]
        r = statistics.median(cpu)
        share = boundary_share(sc)
        out["scenarios"][name] = {"checked_cpu_s": statistics.median(on[0] for on, _ in got),
                                  "bypassed_cpu_s": statistics.median(off[0] for _, off in got),
                                  "ratio_median": r, "ratios_cpu": cpu, "ratio_wall_median": statistics.median(wall),
                                  "ratios_wall": wall, "boundary_self_share": share}
        log(f"  {name:16s} checked {out['scenarios'][name]['checked_cpu_s']:7.3f} CPU s  bypassed "
            f"{out['scenarios'][name]['bypassed_cpu_s']:7.3f} CPU s  ratio {r:.4f} (wall {statistics.median(wall):.4f}; "
            f"medians of {a.reps} alternated pairs); the checks' own code {100 * share:.2f}% of a profiled run")
    worst = max(s["ratio_median"] for s in out["scenarios"].values())
    out["goal"] = {"ratio": worst, "goal": 1.05, "met": bool(worst <= 1.05)}
    log(f"  goal: checks cost <= 5% -> worst median ratio {worst:.4f}  {'MET' if worst <= 1.05 else 'NOT MET'}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1))
    log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
