"""Per-client state memory (issue 29, section 2; docs/client-state.md).

    .venv/bin/python -m benchmarks.state_memory [--full] [--million]

Each case runs in a fresh process (peak RSS is per process): the mlp of 14,210 parameters on
Synthetic(1, 1), 100 clients a round, 5 local steps of batch 10, 5 rounds (so at most 500
clients ever trained), one evaluation at the end. Per case: resident memory after the imports,
after building the world (data, fleet, algorithm) and at peak; the run's summary.json state
fields; and the check of the goal: client-state bytes held <= 1.2 x (rows written x d x 4 B)
+ 2 MiB per kind (a partly filled 1 MiB block and the exact sum).

Default (about a minute): FedAvg, FedSUM, SCAFFOLD, MIFA at 10^4 clients, 50 samples a client.
--full: the same four at 10^5 clients (the figures of issue 29; a few minutes).
--algos fedavg: only those algorithms (FedAvg holds no client state: its figures are the memory
of idle clients).
--million: FedSUM at 10^6 clients, 20 samples a client (about 5.7 GB resident at peak and 4 minutes, most of
it the data set: see docs/client-state.md; run it alone on the machine).

Writes benchmarks/results/state_memory.json (cases merged by key, so runs may be split).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "state_memory.json"
ALGOS = ("fedavg", "fedsum", "scaffold", "mifa")
SLACK_PER_KIND = 2 << 20          # a partly filled 1 MiB block + the exact sum (12 x 8 B per parameter)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def scenario(algo: str, n: int, samples: int, out: str) -> dict:
    return {"name": f"state_memory_{algo}_{n}", "seed": 0,
            "workload": {"dataset": {"name": "synthetic", "alpha": 1, "beta": 1, "max_samples_per_client": samples},
                         "partition": {"name": "natural"}, "model": {"name": "mlp"}, "batch_size": 10},
            "clients": {"count": n, "groups": [
                {"name": "all", "fraction": 1.0, "compute": {"model": "constant", "step_time": 0.1},
                 "network": {"latency": 0.05, "up_mbps": 5, "down_mbps": 20}}]},
            "protocol": {"name": "rounds", "select": {"model": "uniform", "k": 100}, "local_steps": 5},
            "algorithm": {"name": algo, "lr": 0.05},
            "run": {"rounds": 5, "eval_every": 5},
            "output": {"clients_csv": "participants", "dir": out}}


def one(algo: str, n: int, samples: int, out: str) -> dict:
    """One case, in this process (called through `--one` in a fresh one)."""
    r0 = rss_mb()
    from emulator.scenario import schema as sc_mod
    from emulator.sim.world import World
    r_import = rss_mb()
    t = time.perf_counter()
    world = World(sc_mod.load(scenario(algo, n, samples, out)))
    setup = time.perf_counter() - t
    r_world = rss_mb()
    data = world.tasks[0].data
    data_bytes = int(sum(a.nbytes for a in (data.x_train, data.y_train, data.x_test, data.y_test)))
    t = time.perf_counter()
    world.run()
    run_s = time.perf_counter() - t
    s = world.client_state_summary()                  # the summary.json state fields
    d = world.tasks[0].net.dim
    rows = s["client_state_rows"]
    bound = sum(1.2 * r * d * 4 + SLACK_PER_KIND for r in rows.values())
    return {"algorithm": algo, "clients": n, "samples_per_client": samples, "per_round": 100, "rounds": 5,
            "params": d, "setup_s": setup, "run_s": run_s,
            "rss_start_mb": r0, "rss_after_import_mb": r_import, "rss_after_world_mb": r_world,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6,
            "data_arrays_mb": data_bytes / 1e6,
            "world_minus_import_per_client_b": (r_world - r_import) * 1e6 / n,
            **s, "state_goal_bytes": int(bound),
            "state_goal_met": bool(s["client_state_bytes"] <= bound)}


def _limit(gb: float):
    """A cap on the child's address space: past it the case fails with MemoryError instead of
    pushing a shared machine into swap or the OOM killer."""
    import resource as r

    def set_cap():
        r.setrlimit(r.RLIMIT_AS, (int(gb * 1e9), int(gb * 1e9)))
    return set_cap


def run_case(algo: str, n: int, samples: int, max_gb: float = 20.0) -> dict:
    out = str(HERE / "results" / "tmp_cache" / f"state_memory_{algo}_{n}")
    cmd = [sys.executable, "-m", "benchmarks.state_memory", "--one", algo, str(n), str(samples), out]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent, preexec_fn=_limit(max_gb),
                       env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if p.returncode != 0:
        return {"algorithm": algo, "clients": n, "samples_per_client": samples, "failed": p.stderr[-2000:]}
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["wall_s"] = time.perf_counter() - t
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="also the four algorithms at 10^5 clients")
    ap.add_argument("--million", action="store_true", help="FedSUM at 10^6 clients, 20 samples a client")
    ap.add_argument("--only-million", action="store_true", help="only the 10^6 case")
    ap.add_argument("--algos", default=",".join(ALGOS), help="comma-separated subset of the algorithms "
                    "(e.g. fedavg: the memory of idle clients; the 10^6 case is FedSUM's)")
    ap.add_argument("--one", nargs=4, metavar=("ALGO", "N", "SAMPLES", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), int(a.one[2]), a.one[3])))
        return
    algos = [al for al in a.algos.split(",") if al]
    unknown = sorted(set(algos) - set(ALGOS))
    if unknown:
        ap.error(f"--algos: {', '.join(unknown)} not among {', '.join(ALGOS)}")
    cases = [] if a.only_million else [(al, 10 ** 4, 50) for al in algos]
    if a.full and not a.only_million:
        cases += [(al, 10 ** 5, 50) for al in algos]
    if a.million or a.only_million:
        cases.append(("fedsum", 10 ** 6, 20))
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    results = old.get("cases", {})
    for al, n, smp in cases:
        r = run_case(al, n, smp)
        results[f"{al}/{n}/{smp}"] = r
        if "failed" in r:
            print(f"{al:9s} N={n:>8,} failed: {r['failed'][-300:]}", flush=True)
            continue
        print(f"{al:9s} N={n:>8,} samples={smp}: peak {r['peak_rss_mb']:,.0f} MB, world {r['rss_after_world_mb']:,.0f} MB, "
              f"state {r['client_state_bytes']:,} B held / {r['client_state_dense_bytes']:,} B dense, rows "
              f"{r['client_state_rows']}, goal {'MET' if r['state_goal_met'] else 'NOT MET'}, "
              f"setup {r['setup_s']:.0f} s, run {r['run_s']:.0f} s", flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps({"benchmark": "state_memory", "command": "python -m benchmarks.state_memory "
                                   "[--full] [--million]", "cpus": os.cpu_count(), "cases": results}, indent=1))


if __name__ == "__main__":
    main()
