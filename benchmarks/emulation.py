"""Emulation peers (issue 29 section 1): flemu beside the tools that also keep a virtual clock,
APPFL 1.12 (`appfl.vsim`) and FLGo 0.4.4 (`flgo.simulator`), on W1 over a heterogeneous fleet.

    .venv/bin/python -m benchmarks.run --only emulation [--quick] --appfl-python P --flgo-python P

W1-het: W1's data, model, clients and local work (benchmarks/run.py) on three device classes
of a third of the fleet each: 0.05 / 0.2 / 1.0 s per local step, 20 / 10 / 5 Mbit/s both ways
(no latency, unicast). Tasks:
  E0  sync rounds, 20 selected, wait for all
  E1  the same with a 5 s deadline (late clients are dropped)
  E2  over-selection: 20 selected, the first 12 uploads are aggregated
  E3  asynchronous FL (FedAsync, alpha 0.6, polynomial staleness a = 0.5; every client always
      busy, each arrival merged), counted in merges instead of rounds; flemu's jobs run one at a
      time here, each on one torch thread (`auto`'s workers: compute/threads.py)

flemu runs first (its `auto` executor, 2 workers); what it did is written to a spec file
(tmp_cache/emulation_<task>.npz): the data rows, initial vector, every round's selection in
flemu's order, every selected client's mini-batches, and each client's full duration
(download + compute + upload, late clients included) from its device class. Each peer's
harness (benchmarks/appfl_w1.py, benchmarks/flgo_w1.py, run by the Python of the peer's own
venv) feeds these through the peer's own extension points and returns, per round, its wall
and CPU seconds, the clients it aggregated and the round's virtual close time (E3: per merge
the client, its virtual time and its staleness). Repetitions are paired: flemu, then APPFL,
then FLGo on the same task, and the ratio taken within the repetition.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import CACHE, HERE, RESULTS, build_world, log, w1_scenario

CLASSES = ({"name": "fast", "step_time": 0.05, "mbps": 20.0},
           {"name": "mid", "step_time": 0.2, "mbps": 10.0},
           {"name": "slow", "step_time": 1.0, "mbps": 5.0})
STEPS, BATCH, K = 10, 32, 20
DEADLINE, FIRST_K = 5.0, 12
ALPHA, STALE_A = 0.6, 0.5
TASKS = {"E0": "no deadline", "E1": f"{DEADLINE:g} s deadline", "E2": f"over-selection, first {FIRST_K} of {K}",
         "E3": "async FedAsync"}
TOL = 1e-9                     # virtual seconds: two clocks agree when they differ by less


def scenario(task: str, rounds: int) -> dict:
    sc = w1_scenario(rounds, "auto")
    sc["name"] = f"w1het_{task}"
    sc["clients"]["groups"] = [
        {"name": c["name"], "fraction": f, "compute": {"model": "constant", "step_time": c["step_time"]},
         "network": {"latency": 0.0, "up_mbps": c["mbps"], "down_mbps": c["mbps"]}}
        for c, f in zip(CLASSES, (0.34, 0.33, 0.33))]
    if task == "E1":
        sc["protocol"]["wait"] = {"mode": "deadline", "seconds": DEADLINE}
    elif task == "E2":
        sc["protocol"]["wait"] = {"mode": "first_k", "k": FIRST_K}
    elif task == "E3":
        sc["protocol"] = {"name": "async", "local_steps": STEPS}
        sc["algorithm"] = {"name": "fedasync", "lr": 0.05, "alpha": ALPHA, "prox_rho": 0.0,
                           "staleness": {"function": "polynomial", "a": STALE_A}}
    return sc


def run_flemu(task: str, rounds: int):
    """flemu on the task for 1 + `rounds` rounds (merges for E3); wall and CPU seconds of each
    round from the metrics rows (World.progress: process CPU time of all threads)."""
    world, setup = build_world(scenario(task, rounds + 1))
    cpu = {}
    world.progress = lambda row: cpu.__setitem__(int(row["round"]), time.process_time())
    w0 = world.tasks[0].algorithm.global_params().detach().clone()
    c0 = time.process_time()
    world.run()
    m = world.recorder.metrics_frame()
    m = m[m["model"] == 0].sort_values("round")
    wall = np.diff(m["wall_time"].to_numpy(float))
    rows = m["round"].to_numpy(int)
    cpus = np.diff([c0] + [cpu[r] for r in rows])
    wt = m["wall_time"].to_numpy(float)
    c_last = cpu[rows[-1]]
    return world, w0, {"setup_s": setup, "round_wall_s": wall[1:].tolist(),
                       "run_wall_s": float(wt[-1] - wt[0]), "run_cpu_s": float(c_last - cpu[rows[0]]),
                       "round_cpu_s": cpus[2:].tolist() if len(cpus) > len(wall) else cpus[1:].tolist()}


def durations(world, bytes_model: int) -> np.ndarray:
    """Each client's full job duration from its device class: download + 10 steps + upload."""
    g = np.asarray(world.group_of)
    st = np.array([c["step_time"] for c in CLASSES])[g]
    bw = np.array([c["mbps"] for c in CLASSES])[g] * 1e6
    return np.stack([STEPS * st, 2 * bytes_model * 8.0 / bw], axis=1)      # [clients, (compute, comm)]


def outcome(world, task: str) -> dict:
    """flemu's virtual outcome: per round the aggregated clients and the close time; for E3
    per merge the client, its virtual time and its staleness."""
    cf = world.recorder.clients_frame()
    m = world.recorder.metrics_frame()
    m = m[m["model"] == 0].sort_values("round")
    m = m[m["round"] >= 1]                                  # row 0: the initial evaluation
    if task == "E3":
        agg = cf[~cf["dropped"]].sort_values("round")
        return {"client": agg["client"].astype(int).tolist(), "time": m["virtual_time"].to_numpy(float).tolist(),
                "staleness": m["staleness"].astype(int).tolist()}
    out = {"aggregated": [], "close": m["virtual_time"].to_numpy(float).tolist()}
    for r in sorted(cf["round"].unique()):
        rows = cf[(cf["round"] == r) & cf["selected"] & ~cf["dropped"]]
        out["aggregated"].append(sorted(rows["client"].astype(int).tolist()))
    return out


def write_spec(task: str, world, w0) -> Path:
    """What the peers replay: data, initial vector, selections, mini-batches, durations."""
    from emulator.compute.jobs import TrainJob
    ex = world.executor
    td = ex.tasks[0]
    sizes = np.array([len(r) for r in td.client_rows])
    cf = world.recorder.clients_frame()
    bytes_model = int(cf.loc[cf["bytes_up"] > 0, "bytes_up"].iloc[0])
    dur = durations(world, bytes_model)

    def batches(c, key):
        rows = td.client_rows[c]
        return np.stack([rows[torch.from_numpy(b)].numpy() for b in ex.plan(TrainJob(0, int(c), key, STEPS, None, BATCH))])

    spec = {"client_rows": np.stack([r.cpu().numpy() for r in td.client_rows]), "x": td.x.cpu().numpy(), "y": td.y.cpu().numpy(), "w0": w0.numpy(), "sizes": sizes,
            "dur": dur, "bytes_model": bytes_model,
            "task": json.dumps({"task": task, "k": K, "deadline": DEADLINE, "first_k": FIRST_K, "alpha": ALPHA,
                                "staleness_a": STALE_A, "lr": 0.05, "steps": STEPS, "batch": BATCH})}
    if task == "E3":
        merges = int(cf["round"].max())
        jobs = int(cf["job"].max()) + 2             # + the jobs in flight at the end (a peer may run one more)
        spec["merges"] = merges
        spec["batches"] = np.stack([np.stack([batches(c, j) for j in range(1, jobs + 1)])
                                    for c in range(len(sizes))])  # [clients, jobs, steps, B]
    else:
        chosen = []
        for rl in world.recorder.rounds:
            ids = np.flatnonzero(rl.selected)
            chosen.append(rl.ids[ids] if rl.ids is not None else ids)
        chosen = np.array(chosen)
        spec["chosen"] = chosen
        spec["batches"] = np.stack([np.stack([batches(c, r + 1) for c in cs]) for r, cs in enumerate(chosen)])
    # flemu's recorded durations of the clients that arrived must be the class formula's
    ok = cf[cf["selected"] & ~cf["dropped"]]
    want = dur[ok["client"].to_numpy(int)].sum(axis=1)
    got = (ok["compute_time"] + ok["comm_time"]).to_numpy(float)
    if not np.allclose(got, want, rtol=0, atol=1e-9):
        raise RuntimeError(f"flemu's recorded durations differ from the class formula: max {np.abs(got - want).max():g}")
    path = CACHE / f"emulation_{task}.npz"
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, **spec)
    return path


# ------------------------------------------------------------------ peers and comparison
HARNESS = {"appfl": HERE / "appfl_w1.py", "flgo": HERE / "flgo_w1.py"}
# torch threads per peer process: APPFL trains one client at a time (its drivers are serial), FLGo
# two at once on two Python threads (num_parallels 2, parallel_type 't'), one torch thread each
THREADS = {"appfl": int(os.environ.get("APPFL_THREADS", "1")), "flgo": 1}


def run_peer(peer: str, python: str, spec: Path, rounds: int, w_flemu: np.ndarray) -> dict:
    """One peer run on a spec (the peer's venv Python, THREADS[peer] torch threads); its JSON line,
    with `final_max_abs_diff` (its final global vector against flemu's `w_flemu`) and the CPU
    seconds of the whole peer process as its parent sees them (`process_tree_cpu_s`, processes it
    started included; `children_cpu_s`: beyond the `process_cpu_s` of all its threads when it
    printed its result)."""
    work = CACHE / "peer_work"
    work.mkdir(parents=True, exist_ok=True)
    final = work / f"{peer}_final.npy"
    final.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([python, str(HARNESS[peer]), str(spec), str(rounds + 1)], capture_output=True, text=True,
                         timeout=900, env={**os.environ, "OMP_NUM_THREADS": str(THREADS[peer]),
                                           "MKL_NUM_THREADS": str(THREADS[peer]), "W1_THREADS": str(THREADS[peer]),
                                           "W1_TMP": str(work), "W1_FINAL": str(final)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        err = [ln for ln in res.stderr.strip().splitlines() if ln.strip() and "Warning" not in ln and "pynvml" not in ln]
        raise RuntimeError(" | ".join(err[-3:])[-500:] or f"exit status {res.returncode}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["process_tree_cpu_s"] = cpu
    out["children_cpu_s"] = cpu - out["process_cpu_s"]
    out["final_max_abs_diff"] = float(np.abs(np.load(final) - w_flemu).max())
    return out


def compare(task: str, mine: dict, theirs: dict, n: int) -> dict:
    """Round by round (merge by merge for E3): the first `n` rounds of both."""
    if task == "E3":
        a, b = mine, theirs
        m = min(n, len(a["client"]), len(b["client"]))
        order = [i for i in range(m) if a["client"][i] != b["client"][i]]
        times = [i for i in range(m) if abs(a["time"][i] - b["time"][i]) > TOL]
        stale = [i for i in range(m) if a["staleness"] is not None and a["staleness"][i] != b["staleness"][i]]
        # equal arrival times may be merged in either order: a difference inside a tie is not a mismatch
        ties = [i for i in order if sum(abs(t - a["time"][i]) <= TOL for t in a["time"][:m]) > 1]
        return {"merges": m, "time_max_abs_diff": float(max(abs(a["time"][i] - b["time"][i]) for i in range(m))),
                "order_differs": len(order), "order_differs_outside_ties": len(set(order) - set(ties)),
                "times_differ": len(times), "staleness_differs": len(stale),
                "first_differences": [(i, a["client"][i], b["client"][i]) for i in order[:5]],
                "match": not times and not (set(order) - set(ties))}
    m = min(n, len(mine["aggregated"]), len(theirs["aggregated"]))
    sets = [i for i in range(m) if sorted(mine["aggregated"][i]) != sorted(theirs["aggregated"][i])]
    close = [i for i in range(m) if abs(mine["close"][i] - theirs["close"][i]) > TOL]
    return {"rounds": m, "aggregated_set_differs": sets, "close_time_differs": close,
            "close_max_abs_diff": float(max(abs(x - y) for x, y in zip(mine["close"][:m], theirs["close"][:m]))),
            "match": not sets and not close}


def summary(x) -> dict:
    x = np.asarray(x, float)
    return {"median": float(np.median(x)), "min": float(x.min()), "max": float(x.max())}


def emulation(quick: bool, peers: dict) -> dict:
    """The emulation-peer table: per task, `reps` paired repetitions of flemu, APPFL, FLGo."""
    rounds = 3 if quick else 6
    reps = 1 if quick else 3
    log(f"emulation peers: W1-het, tasks {', '.join(TASKS)}, {reps} paired repetition(s) of 1 + {rounds} rounds "
        f"(E3: merges); load {os.getloadavg()}")
    out = {"rounds": rounds, "repetitions": reps, "peer_torch_threads": dict(THREADS), "load_avg_start": list(os.getloadavg()), "tasks": {}}
    for task, what in TASKS.items():
        n = (40 if quick else 100) if task == "E3" else rounds     # E3 counts merges
        t_out = {"what": what, "flemu": [], **{p: [] for p in HARNESS}}
        for rep in range(reps):
            load = list(os.getloadavg())
            world, w0, tf = run_flemu(task, n)
            tf["load_avg"] = load
            w_final = world.tasks[0].algorithm.global_params().detach().cpu().numpy()
            n1 = n + 1
            spec = write_spec(task, world, w0)
            mine = outcome(world, task)
            if task == "E3":          # s per merge over the run, from the start to the last merge (appfl_w1.py)
                tf.update(s_per_round=tf["run_wall_s"] / n1, cpu_s_per_round=tf["run_cpu_s"] / n1)
            else:
                tf.update(s_per_round=float(np.median(tf["round_wall_s"])), cpu_s_per_round=float(np.median(tf["round_cpu_s"])))
            tf.update(
                      jobs_trained=int(world.executor.stats.jobs_computed))
            import dataclasses
            tf.update(outcome=mine, workers=int(world.executor.workers), torch_threads=torch.get_num_threads(),
                      executor_stats=dataclasses.asdict(world.executor.stats))
            t_out["flemu"].append(tf)
            for peer in HARNESS:
                py = peers.get(peer)
                if not py or not Path(py).exists():
                    t_out[peer].append({"skipped": f"no {peer} venv (run `make bench`, which creates it)"})
                    continue
                try:
                    r = run_peer(peer, py, spec, n, w_final)
                except Exception as e:          # noqa: BLE001 (a peer that fails is recorded, not fatal)
                    t_out[peer].append({"skipped": f"{peer} run failed: {e}"})
                    continue
                r["vs_flemu"] = compare(task, mine, r["outcome"], n + 1)
                r["over_flemu"] = r["s_per_round"] / tf["s_per_round"]
                t_out[peer].append(r)
            log(f"  {task} rep {rep + 1} (load {load[0]:.1f}): flemu {tf['s_per_round']:.3f} s/round (cpu {tf['cpu_s_per_round']:.3f})"
                + "".join(f"; {p} " + (f"{t_out[p][-1]['s_per_round']:.3f} ({t_out[p][-1]['over_flemu']:.2f}x, "
                                        f"outcome {'same' if t_out[p][-1]['vs_flemu']['match'] else 'DIFFERS'})"
                                        if "s_per_round" in t_out[p][-1] else "skipped: " + t_out[p][-1]["skipped"][:200])
                          for p in HARNESS))
        out["tasks"][task] = t_out
    out["load_avg_end"] = list(os.getloadavg())
    return out


def goals(out: dict) -> list:
    """The goals of issue 36 section 2, on the CPU seconds' ratios within repetitions (medians
    over repetitions): E0: flemu's CPU s/round <= 1.0x every peer's; E1-E3: peer / flemu >=
    0.95 x (jobs the peer trains / jobs flemu trains) x (the peer's per-job cost over flemu's,
    which is E0's ratio: both train the same jobs there). That is, flemu keeps what not training
    late work saves, with no more than 5 % of it lost to its own overhead."""
    def ratios(t, peer):
        return [(r["cpu_s_per_round"] / f["cpu_s_per_round"], r["jobs_trained"] / f["jobs_trained"])
                for f, r in zip(t["flemu"], t[peer]) if "s_per_round" in r]
    t0 = out["tasks"].get("E0")
    lines = ["", "Goals (issue 36), on the CPU ratio peer / flemu within each repetition, median over repetitions:", "",
             "| task | goal | peer | per repetition | median | needed | met |", "|---|---|---|---|---|---|---|"]
    for task, t in out["tasks"].items():
        for peer in HARNESS:
            rs = ratios(t, peer)
            base = ratios(t0, peer) if t0 else []
            if not rs or (task != "E0" and not base):
                continue
            med = float(np.median([r for r, _ in rs]))
            if task == "E0":
                goal, need = "flemu CPU <= 1.0x the peer's", 1.0
            else:
                jobs = float(np.median([j for _, j in rs]))
                cost = float(np.median([r for r, _ in base]))
                goal, need = f"0.95 x jobs ratio {jobs:.2f} x E0 per-job cost ratio {cost:.2f}", 0.95 * jobs * cost
            reps = ", ".join(f"{r:.2f}" for r, _ in rs)
            lines.append(f"| {task} | {goal} | {peer} | {reps} | {med:.2f} | {need:.2f} | {'yes' if med >= need else 'NO'} |")
    return lines


def write_table(out: dict, machine: dict, quick: bool, name: str = None) -> Path:
    """benchmarks/results/emulation_peers{,_quick}.json and .md: per task and tool the median
    s/round with its spread over repetitions, the median ratio to flemu within repetitions,
    CPU seconds per round and their ratio to flemu's within repetitions, jobs trained, whether
    the virtual outcome matched flemu's, and how far the final parameters are from flemu's."""
    name = name or ("emulation_peers_quick" if quick else "emulation_peers")
    load = out["load_avg_start"][0]
    lines = [f"# Emulation peers on W1-het ({'quick, ' if quick else ''}{out['repetitions']} paired repetition(s), "
             f"1 + {out['rounds']} rounds; E3: s per merge over a run of {'41' if quick else '101'} merges)", "",
             f"Machine: {machine.get('cpus')} CPUs, torch {machine.get('torch')}; load average at start "
             f"{load:.1f}, at end {out['load_avg_end'][0]:.1f}" + (" (UNDER LOAD: ratios only)" if load > 3 else ""), "",
             "| task | tool | s/round median (min-max) | / flemu (min-max) | CPU s/round | CPU / flemu's (min-max) "
             "| jobs trained | outcome vs flemu | final params, max abs diff vs flemu |",
             "|---|---|---|---|---|---|---|---|---|"]
    for task, t in out["tasks"].items():
        for tool in ("flemu", *HARNESS):
            runs = [r for r in t[tool] if "s_per_round" in r]
            if not runs:
                why = t[tool][0].get("skipped", "?") if t[tool] else "?"
                lines.append(f"| {task} | {tool} | skipped: {why[:160]} | | | | | | |")
                continue
            s = summary([r["s_per_round"] for r in runs])
            ratio = "1" if tool == "flemu" else "{median:.2f} ({min:.2f}-{max:.2f})".format(**summary([r["over_flemu"] for r in runs]))
            cpu = summary([r["cpu_s_per_round"] for r in runs])["median"]
            # the CPU ratio within each repetition (steadier than wall seconds on a loaded machine)
            pairs = [r["cpu_s_per_round"] / f["cpu_s_per_round"] for r, f in zip(t[tool], t["flemu"]) if "s_per_round" in r]
            cpu_ratio = "1" if tool == "flemu" else "{median:.2f} ({min:.2f}-{max:.2f})".format(**summary(pairs))
            jobs = runs[-1]["jobs_trained"]
            same = "-" if tool == "flemu" else ("same" if all(r["vs_flemu"]["match"] for r in runs) else "DIFFERS")
            diff = "-" if tool == "flemu" else f"{max(r['final_max_abs_diff'] for r in runs):.1e}"
            lines.append(f"| {task} | {tool} | {s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f}) | {ratio} | {cpu:.3f} "
                         f"| {cpu_ratio} | {jobs} "
                         f"| {same} | {diff} |")
    lines += ["", "Load average (1 min) at each repetition's start: " + "; ".join(
        f"{task} " + " / ".join(f"{r['load_avg'][0]:.1f}" for r in t["flemu"] if "load_avg" in r)
        for task, t in out["tasks"].items())]
    kids = {p: max((r["children_cpu_s"] for t in out["tasks"].values() for r in t[p] if "children_cpu_s" in r), default=None)
            for p in HARNESS}
    lines += ["", "CPU s/round: the process's CPU seconds (`time.process_time`, every thread) over the round's wall "
              "seconds. flemu starts no process; each peer's whole process as its parent sees it "
              "(`getrusage(RUSAGE_CHILDREN)`) used at most "
              + ", ".join(f"{p} {v:.2f} s" for p, v in kids.items() if v is not None) + " more CPU a run than its own "
              "`process_time` when it printed its result: the interpreter's exit (`strace -f`: neither peer starts a "
              "process). "
              "Final params: the largest absolute difference of the final global parameter vector from flemu's (max "
              "over repetitions)."]
    lines += goals(out)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine, **out}, indent=1))
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    log("\n".join(lines))
    log(f"wrote {path}")
    return path
