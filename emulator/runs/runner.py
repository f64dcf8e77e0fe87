"""Run one scenario and write its run directory (docs/architecture.md section 3, "Run directory").

The world is built (and every data file read) before anything is written; the run
directory is written under a temporary name and renamed when complete, so a failed or
interrupted run never leaves a half-written directory behind. A run that a component's
broken contract stopped (`failed`), or whose post-run invariants fail (`invalid`), is written
all the same, with what was recorded: its status says so (runs/outcome.py). The target is checked before
the run starts and again before the rename (`outputs.check_run_target`): a run replaces only
an earlier flemu run directory (or an empty directory), never anything else; the temporary
names a killed run left (`.<name>.tmp-*`) are removed by the next run of that name.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from . import invariants, outcome, outputs
from ..measures import group_shares
from ..scenario import inputs, schema as scenario
from ..sim.world import World


@dataclass
class RunResult:
    run_dir: Path
    metrics: pd.DataFrame
    summary: dict

    def __iter__(self):  # `run_dir, metrics = emulator.run(...)` works too
        return iter((self.run_dir, self.metrics))


def run(source, overrides=(), seed: Optional[int] = None, out=None,
        progress: Optional[Callable[[dict], None]] = None, callbacks: Sequence = (),
        plugins: Sequence[str] = (), cpus: Optional[int] = None) -> RunResult:
    """Run a scenario (path, YAML text, dict or Scenario); return its run directory,
    metrics (pandas) and summary. `callbacks`: Callback instances, after the scenario's own
    (`callbacks:`); `plugins`: files or modules imported before validation (recorded in
    config.yaml with the scenario's `plugins:`); `cpus`: the cores the run may use (default:
    torch's thread count; a sweep gives each run its share), which sets how many jobs train
    at once, never the numbers."""
    from . import callbacks as cbs
    sc = scenario.load(source, overrides, seed, plugins=plugins)
    out_dir = Path(out) if out is not None else Path(sc.output.dir or f"runs/{sc.name}")
    outputs.check_run_target(out_dir, "--out" if out is not None else
                             ("output.dir" if sc.output.dir else "run directory"))
    sc.output.dir = str(out_dir)
    inputs.settle(sc, out_dir)             # config.yaml: input files from the run directory
    t0 = time.perf_counter()
    hooks = cbs.Hooks(sc, [*cbs.from_scenario(sc), *callbacks], out_dir, progress)
    threads = torch.get_num_threads()      # `executor.threads` holds for this run only
    try:
        world = World(sc, progress=hooks.on_row, cpus=cpus)
        build_s = time.perf_counter() - t0
        hooks.start(world)
        world.run()
        metrics = world.recorder.metrics_frame()
        delays, last_aggregated = add_delay_metrics(world, metrics)
        account_energy(world)
        clients = world.recorder.clients_frame()
        # a run stopped mid-round by a broken contract is not held to the invariants of a finished one
        failures = invariants.failures(world, metrics, clients) if world.status != "failed" else []
        summary = summarize(world, metrics, clients, build_s, [] if world.status == "failed" else list(invariants.NAMES))
        summary["delay"] = delays
        summary["participation_by_group"] = group_shares.over_run(
            clients, world.clients.group_names(), world.tasks[0].client_sizes, [g.name for g in world.groups])
        summary.update(energy_summary(world, clients))
        summary.update(world.protocol.summary())
        for task in world.tasks:
            extra = task.algorithm.summary()
            if extra:
                summary.update(extra) if len(world.tasks) == 1 else summary["models"][task.index].update(extra)
        if sc.plugins:
            from ..plugins import describe
            summary["plugins"] = describe(sc.plugins)
        outcome.settle(world, summary, failures)
        hooks.end(summary)
        write_run_dir(out_dir, world, sc, metrics, clients, summary, last_aggregated, extra=hooks.files())
    finally:
        hooks.cleanup()
        torch.set_num_threads(threads)
    return RunResult(out_dir, metrics, summary)


def add_delay_metrics(world, metrics: pd.DataFrame) -> tuple:
    """FedSUM delay metrics from the participation that happened (clients with weight > 0):
    a `tau` column in metrics.csv; returns (tau_max / tau_avg per model for summary.json,
    per model the last round each client was aggregated in, 0 = never, for partition.csv)."""
    from ..measures.participation import delay_metrics

    out, last_aggregated = {}, {}
    if not len(metrics):
        return out, last_aggregated
    metrics["tau"] = np.nan
    for task in world.tasks:
        logs = world.recorder.aggregations(task.index)          # work no aggregation used does not count
        d = delay_metrics([log.clients()[log.weight > 0] for log in logs], world.num_clients)
        pos = {(int(r), int(m)): i for i, (r, m) in enumerate(zip(metrics["round"], metrics["model"]))}
        col = metrics["tau"].to_numpy(copy=True)
        for log, tau in zip(logs, d["tau"]):
            i = pos.get((log.round, task.index))
            if i is not None:
                col[i] = int(tau)
        metrics["tau"] = col
        out[str(task.index)] = {"tau_max": d["tau_max"], "tau_avg": d["tau_avg"],
                                "never_aggregated": int((d["last_selected"] < 0).sum())}
        rounds = np.array([0] + [log.round for log in logs], dtype=np.int64)
        last_aggregated[task.index] = rounds[d["last_selected"] + 1]
    return out, last_aggregated


def account_energy(world) -> None:
    """Energy of every online client per round (clients.csv energy_j), once the run is over
    so that work outliving its round (FedUMF's background jobs) is counted whole:
    compute_watts x compute_time + transmit_watts x comm_time + idle_watts x the rest of the
    round (none for work no aggregation closed), + compute_watts x a charged evaluation's
    `eval_time` (docs/fairness.md)."""
    groups = world.groups
    if not any(g.energy is not None for g in groups):
        return
    clients = world.clients
    for log in world.recorder.rounds:
        round_time = log.round_time or 0.0
        e = np.full(log.n, np.nan)
        ev = log.extra.get("eval_time")
        for i, cid in enumerate(log.clients()):
            en = clients[cid].energy
            if en is None:
                continue
            busy = log.compute_time[i] + log.comm_time[i]
            if log.available[i] or busy > 0:
                e[i] = (en.compute_watts * log.compute_time[i] + en.transmit_watts * log.comm_time[i]
                        + en.idle_watts * max(0.0, round_time - busy))
            else:
                e[i] = 0.0
            if ev is not None:
                e[i] += en.compute_watts * ev[i]
        log.extra["energy_j"] = e


def energy_summary(world, clients: pd.DataFrame) -> dict:
    if "energy_j" not in clients:
        return {}
    by_group = {}
    groups = world.clients.group_names()
    for log in world.recorder.rounds:
        e = log.extra.get("energy_j")
        if e is None:
            continue
        of_row = groups[log.clients()]          # a log may hold a few clients (async, multi-model)
        for g in np.unique(groups):
            by_group[g] = by_group.get(g, 0.0) + float(np.nansum(e[of_row == g]))
    return {"energy_j_total": float(sum(by_group.values())), "energy_j_by_group": by_group}


def _first_reach(metrics: pd.DataFrame, target: float):
    if "test_acc" not in metrics:
        return None
    hit = metrics[metrics["test_acc"] >= target]
    if hit.empty:
        return None
    r = hit.iloc[0]
    return {"round": int(r["round"]), "virtual_time": float(r["virtual_time"]), "wall_time": float(r["wall_time"])}


def _torch_threads() -> int:
    import torch
    return int(torch.get_num_threads())


def summarize(world, metrics, clients, build_s, checks) -> dict:
    sc = world.sc
    st = world.executor.stats
    # SGD steps the fleet performed in virtual time (under `intervals` with epoch iterations,
    # `steps` counts epochs and `sgd_steps` the mini-batch steps they are made of)
    virtual_steps = int(sum(log.sgd_steps_total() for log in world.recorder.rounds))
    s = {
        "name": sc.name, "seed": sc.seed, "status": world.status, "message": world.message,
        "rounds": int(world.rounds_done), "virtual_time": float(world.env.now),
        "wall_time": float(world.wall()), "setup_wall_time": build_s,
        "grad_steps_virtual": virtual_steps, "grad_steps_computed": int(st.steps_computed),
        "grad_steps_skipped": max(0, virtual_steps - int(st.steps_computed)),
        "jobs_submitted": int(st.jobs_submitted), "jobs_computed": int(st.jobs_computed),
        "probe_grad_evals": int(st.probe_evals),
        "bytes_up": int(metrics["bytes_up"].sum()) if len(metrics) else 0,
        "bytes_down": int(metrics["bytes_down"].sum()) if len(metrics) else 0,
        "invariants_checked": checks,
        "torch_threads": _torch_threads(),     # a run's numbers depend on it (docs/bad-input.md)
        **world.client_state_summary(),
        # which executor path each job kind took and why (compute/paths.py)
        "executor_paths": world.executor.paths.summary({t.index: scenario.algorithm_for(sc, t.index).name
                                                        for t in world.tasks}),
    }
    models = []
    for task in world.tasks:
        m = metrics[metrics["model"] == task.index] if len(metrics) else metrics
        ev = m.dropna(subset=["test_loss"]) if "test_loss" in m else m.iloc[0:0]
        d = {"model": task.index, "dataset": task.data.name, "params": task.net.dim}
        if len(ev):
            last = ev.iloc[-1]
            for k in ("test_acc", "test_loss", "gap", "log10_gap"):
                if k in ev and pd.notna(last.get(k)):
                    d[f"final_{k}"] = float(last[k])
            if "test_acc" in ev:
                d["best_test_acc"] = float(ev["test_acc"].max())
        if sc.run.target_accuracy is not None:
            d["target_accuracy"] = sc.run.target_accuracy
            d["reached_target"] = _first_reach(ev, sc.run.target_accuracy)
        models.append(d)
    s["models"] = models
    if len(world.tasks) == 1:
        s.update({k: v for k, v in models[0].items() if k != "model"})
    return s


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    return str(o)


def write_run_dir(out_dir: Path, world, sc, metrics, clients, summary, last_aggregated=None,
                  extra: Optional[Path] = None) -> None:
    """Write the run directory under a temporary name, then rename it into place (replacing
    only an earlier flemu run directory: `outputs.check_run_target`); `extra`: a folder of
    files the run's callbacks wrote (checkpoints/, tensorboard/), moved in with it."""
    out_dir = outputs.check_run_target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    outputs.clean_temp(out_dir.parent, out_dir.name)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    try:
        tmp.mkdir()
        (tmp / "config.yaml").write_text(scenario.to_yaml(sc))
        metrics.to_csv(tmp / "metrics.csv", index=False)
        clients.to_csv(tmp / "clients.csv", index=False)
        partition_frame(world, last_aggregated).to_csv(tmp / "partition.csv", index=False)
        if world.recorder.events is not None:
            world.recorder.events_frame().to_csv(tmp / "events.csv", index=False)
        if world.recorder.timeline is not None:
            world.recorder.timeline_frame(world.clients, float(world.env.now)).to_csv(tmp / "timeline.csv", index=False)
        if world.client_eval is not None:
            world.recorder.client_eval_frame().to_csv(tmp / "client_eval.csv", index=False)
        for task in world.tasks:
            suffix = "" if len(world.tasks) == 1 else f"_{task.index}"
            params, buffers = world.last_good[task.index]     # saved in the run's dtype (float32/64)
            np.save(tmp / f"model{suffix}.npy", params.detach().cpu().numpy())
            if buffers is not None:     # BatchNorm running statistics (compute/flat.py order)
                np.save(tmp / f"buffers{suffix}.npy", buffers.detach().cpu().numpy())
        for f in (sorted(Path(extra).iterdir()) if extra is not None else ()):
            f.rename(tmp / f.name)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default, allow_nan=True))
        outputs.check_run_target(out_dir)       # still flemu's to replace after the run
        old = None
        if out_dir.exists():
            old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}-{time.monotonic_ns()}"
            out_dir.rename(old)
        tmp.rename(out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def partition_frame(world, last_aggregated=None) -> pd.DataFrame:
    """Per client: group, samples, the last round it was aggregated in (0: never; the FedSUM
    last-selection time s_i) and the label histogram of each model's data."""
    rows = {"client": np.arange(world.num_clients), "group": world.clients.group_names()}
    for task in world.tasks:
        suffix = "" if len(world.tasks) == 1 else f"_m{task.index}"
        rows[f"samples{suffix}"] = task.client_sizes
        last = (last_aggregated or {}).get(task.index)
        if last is not None:
            rows[f"last_aggregated_round{suffix}"] = last
        if task.data.task == "classification" and task.data.num_classes <= 100 and not task.data.keyed:
            h = task.data.label_histograms()
            for c in range(h.shape[1]):
                rows[f"label_{c}{suffix}"] = h[:, c]
    return pd.DataFrame(rows)
