"""The fleet benchmark (issue 36.3, docs/performance.md "Fleet scale"): one run per fleet size
and algorithm, each in a fresh process, reporting peak RSS, set-up seconds and per-round
milliseconds, and the memory per idle client.

    python -m benchmarks.fleet [--sizes 10000,100000,1000000,10000000] [--algorithms fedavg,fedsum]
    python -m benchmarks.fleet --one CLIENTS ALGORITHM      (one run; prints one JSON line)
    python -m benchmarks.fleet CLIENTS PER_ROUND ROUNDS     (benchmark P4's engine-only run: engine_only)

The run: synthetic data (Synthetic(1, 1), d = 60, 10 classes, at most 100 samples a device,
generated keyed), logistic regression trained for real (5 local steps of batch 10, one torch
thread), 100 clients selected uniformly a round from those online under per-round Markov
availability (p_on_off 0.1, p_off_on 0.3), 20 rounds, evaluated before round 1 and after
round 20, a sparse clients log. per_round_ms: the median wall time of rounds 2..19 (round 1
and 20 carry the evaluations). Memory per idle client: the slope of peak RSS between the two
largest fleets measured. Goals at 10^7: peak RSS <= 4 GB, set-up <= 60 s, <= 300 bytes per
idle client. Results: benchmarks/results/fleet.json and fleet.md."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
GOALS = {"peak_rss_mb": 4096, "setup_s": 60, "bytes_per_idle_client": 300}


def scenario(n: int, algorithm: str, rounds: int = 20) -> dict:
    return {"name": f"fleet_{n}_{algorithm}", "seed": 0,
            "workload": {"dataset": {"name": "synthetic", "max_samples_per_client": 100, "generation": "keyed"},
                         "model": {"name": "logreg"}, "batch_size": 10},
            "clients": {"count": n, "groups": [
                {"name": "all", "fraction": 1.0, "compute": {"model": "constant", "step_time": 0.01},
                 "network": {"latency": 0.05, "up_mbps": 5, "down_mbps": 20, "spread": 0.5},
                 "availability": {"model": "markov", "p_on_off": 0.1, "p_off_on": 0.3}}]},
            "protocol": {"name": "rounds", "select": {"model": "uniform", "k": 100}, "local_steps": 5},
            "algorithm": {"name": algorithm, "lr": 0.1},
            "run": {"rounds": rounds, "eval_every": rounds},
            "executor": {"name": "sequential", "threads": 1, "workers": 1},
            "output": {"clients_csv": "participants"}}


def one(n: int, algorithm: str) -> dict:
    """One run in this process: its set-up, rounds and peak RSS."""
    import torch
    torch.set_num_threads(1)
    from emulator.scenario import schema
    from emulator.sim.world import World
    sc = schema.load(scenario(n, algorithm))
    t = time.perf_counter()
    world = World(sc)
    setup = time.perf_counter() - t
    t = time.perf_counter()
    world.run()
    run = time.perf_counter() - t
    m = world.recorder.metrics_frame()
    walls = np.diff(m.sort_values("round")["wall_time"].to_numpy(float))    # round r's wall time: r = 1..R
    data = world.tasks[0].data.client_indices
    return {"clients": n, "algorithm": algorithm, "status": world.status, "setup_s": setup, "run_s": run,
            "per_round_ms": float(np.median(walls[1:-1]) * 1e3),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "clients_touched": world.clients.touched, "devices_generated": data.generated,
            "state_rows": world.client_state_summary()["client_state_rows"],
            "final_test_acc": float(m["test_acc"].dropna().iloc[-1])}


def run_one(n: int, algorithm: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "benchmarks.fleet", "--one", str(n), algorithm],
                         capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1])
    if out.returncode:
        return {"clients": n, "algorithm": algorithm, "error": out.stderr.strip().splitlines()[-1:]}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["load_avg_1m"] = os.getloadavg()[0]
    return r


def idle_bytes(rows: list) -> dict:
    """Per algorithm: the slope of peak RSS between its two largest fleets (bytes a client)."""
    out = {}
    for algo in sorted({r["algorithm"] for r in rows}):
        ok = sorted((r for r in rows if r["algorithm"] == algo and "error" not in r), key=lambda r: r["clients"])
        if len(ok) >= 2:
            a, b = ok[-2], ok[-1]
            out[algo] = {"between": [a["clients"], b["clients"]],
                         "bytes": (b["peak_rss_mb"] - a["peak_rss_mb"]) * 2**20 / (b["clients"] - a["clients"])}
    return out


def fleet(sizes, algorithms, log=print) -> dict:
    from benchmarks.common import machine
    res = {"machine": machine(), "goals": GOALS, "runs": []}
    for n in sizes:
        for algo in algorithms:
            r = run_one(n, algo)
            log(f"  fleet {n:>9,} {algo:7s} " + (f"error {r['error']}" if "error" in r else
                f"setup {r['setup_s']:6.1f} s  round {r['per_round_ms']:7.1f} ms  peak {r['peak_rss_mb']:7.0f} MB  "
                f"(load {r['load_avg_1m']:.1f})"))
            res["runs"].append(r)
    res["bytes_per_idle_client"] = idle_bytes(res["runs"])
    res["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    return res


def write(res: dict, name: str = "fleet") -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=1))
    m = res["machine"]
    lines = [f"# Fleet scale ({name}.json)", "",
             f"{m['cpus']} CPUs, torch {m['torch']}, load average {m['load_avg_1m']:.1f} at the start, "
             f"{m['load_avg_1m_end']:.1f} at the end (the machine was shared). Goals at 10^7 clients: peak RSS "
             f"<= {GOALS['peak_rss_mb']} MB, set-up <= {GOALS['setup_s']} s, <= {GOALS['bytes_per_idle_client']} "
             "bytes per idle client.", "",
             "| clients | algorithm | set-up s | per round ms | peak RSS MB | clients touched | load |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in res["runs"]:
        if "error" in r:
            lines.append(f"| {r['clients']:,} | {r['algorithm']} | error: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['clients']:,} | {r['algorithm']} | {r['setup_s']:.1f} | {r['per_round_ms']:.0f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['clients_touched']:,} | {r['load_avg_1m']:.1f} |")
    lines.append("")
    for algo, b in res["bytes_per_idle_client"].items():
        lines.append(f"- memory per idle client ({algo}, peak RSS slope {b['between'][0]:,} -> "
                     f"{b['between'][1]:,}): {b['bytes']:.0f} bytes")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")


def engine_only(n: int, k: int, rounds: int) -> dict:
    """Benchmark P4's run (benchmarks/engine.py): the engine alone (training skipped), tiny
    data; s_per_round: the mean wall time of rounds 2..R-1."""
    from benchmarks.common import _register_noop, build_world
    from benchmarks.engine import p3_scenario
    _register_noop()
    sc = p3_scenario(n, rounds)
    sc["protocol"]["select"] = {"model": "uniform", "k": k}
    world, setup = build_world(sc)
    t = time.perf_counter()
    world.run()
    wall = time.perf_counter() - t
    m = world.recorder.metrics_frame()
    per_round = np.diff(m[m["model"] == 0].sort_values("round")["wall_time"].to_numpy(float))[1:-1]
    return {"clients": n, "per_round": k, "rounds": rounds, "setup_s": setup, "run_s": wall,
            "s_per_round": float(per_round.mean()),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "engine": world.protocol.engine}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].isdigit():
        print(json.dumps(engine_only(*(int(v) for v in argv[:3]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--one", nargs=2, metavar=("CLIENTS", "ALGORITHM"), help="one run in this process")
    ap.add_argument("--sizes", default="10000,100000,1000000,10000000")
    ap.add_argument("--algorithms", default="fedavg,fedsum")
    ap.add_argument("--name", default="fleet")
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(int(a.one[0]), a.one[1])))
        return
    res = fleet([int(s) for s in a.sizes.split(",")], a.algorithms.split(","))
    write(res, a.name)


if __name__ == "__main__":
    main()
