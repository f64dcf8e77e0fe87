"""The driver: `run_sweep` plans a sweep, takes the folder, and runs (or resumes) every run not
yet finished on a backend; `_drive` is its scheduling loop."""
from __future__ import annotations

import datetime
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import yaml

from ..errors import ScenarioError
from ..runs.outputs import OutputError, check_run_target, check_sweep_target
from .plan import expand, resolve
from .index import atomic_write, index_rows, write_index, write_meta
from .lock import FolderLock, SweepError, clean_leftovers, journal
from .spec import BACKENDS, SweepSpec, load_spec
from .state import DONE, RETRIED, read_summary, scan


@dataclass
class SweepResult:
    dir: Path
    index: "object"                  # pandas DataFrame of sweep.csv
    counts: dict                     # complete / diverged / stalled / failed / pending / skipped / ran


def _retried(st: dict, retry_failed: Optional[bool]) -> bool:
    """Whether a recorded failure is run again: a crash unless told not to, a run directory
    that ended failed, invalid or empty only when told to."""
    if st["summary"] is None:
        return st["status"] == "failed" and retry_failed is not False
    return st["status"] in RETRIED and bool(retry_failed)


def run_cpus(backend: str, capacity: int, runs: int, resources: dict) -> int:
    """The cores each run may use (they set its `workers`, never its numbers: a run's torch
    threads are its scenario's `executor.threads`, 1 by default, as under `flemu run`): on
    the local backend the host's cores shared by the runs that go at once, on Ray the whole
    CPUs a run reserves."""
    if backend == "ray":
        return max(1, int(math.floor(float(resources.get("num_cpus", 1)))))
    return max(1, cores() // max(1, min(int(capacity), int(runs))))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):       # not Linux
        return os.cpu_count() or 1


def run_sweep(spec, backend: Optional[str] = None, workers: Optional[int] = None, address: Optional[str] = None,
              resources: Optional[dict] = None, threads: Optional[int] = None, retry_failed: Optional[bool] = None,
              rerun_stale: bool = False, dry_run: bool = False,
              progress: Optional[Callable[[dict], None]] = None) -> SweepResult:
    """Run (or resume) a sweep: every planned run not yet finished, `workers` at a time, on the
    `local` backend (one process per run) or on `ray` (tasks on a local or existing cluster).
    Finished runs are skipped, `failed`, `invalid` and `empty` ones too; runs that crashed
    (no run directory, failures/<id>.json) are retried. `retry_failed` True re-runs both,
    False neither (None: the default just said). A crash is recorded and the others go on.
    Returns the index (sweep.csv) and counts. `dry_run`: plan and report only, write nothing."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    backend, workers, address, resources, threads = _settings(spec.options, backend, workers, address,
                                                              resources, threads)
    plans = expand(spec)
    root = spec.dir
    resolve(spec, plans, threads)
    axes = [a.name for a in spec.axes]
    if dry_run:
        state = scan(root, plans) if root.exists() else {p.id: {"status": "pending", "summary": None,
                                                                 "failure": None, "stale": None} for p in plans}
        import pandas as pd
        return SweepResult(root, pd.DataFrame(index_rows(plans, state, axes)), _counts(state, skipped=0, ran=0))

    check_sweep_target(root)                  # a new, empty or flemu sweep folder; else nothing written
    _check_run_targets(root, plans)
    root.mkdir(parents=True, exist_ok=True)
    with FolderLock(root):
        clean_leftovers(root)
        state = scan(root, plans)
        stale = {i: st["stale"] for i, st in state.items() if st["stale"]}
        if stale and not rerun_stale:
            first = next(iter(stale))
            raise SweepError(f"{len(stale)} finished run(s) in {root} were made with a different scenario "
                             f"(e.g. {first}: {stale[first]} differs); use a new --out folder, or "
                             f"--rerun-stale to run them again")
        for sub in ("runs", "scenarios", "failures", "logs"):
            (root / sub).mkdir(exist_ok=True)
        write_meta(root, spec, axes, backend)
        todo = [p for p in plans
                if state[p.id]["status"] == "pending" or state[p.id]["stale"]
                or _retried(state[p.id], retry_failed)]
        skipped = len(plans) - len(todo)
        for p in todo:
            atomic_write(root / "scenarios" / f"{p.id}.yaml",
                         yaml.safe_dump(p.scenario, sort_keys=False, default_flow_style=None, width=100))
        write_index(root, plans, state, axes)
        journal(root, event="start", runs=len(plans), todo=len(todo), backend=backend)
        ran = 0
        if todo:
            from .backends import make_backend
            from ..plugins import merge
            used = merge(*[p.scenario.get("plugins") or [] for p in todo])
            pool = make_backend(backend, root, workers=workers, address=address, resources=resources, plugins=used)
            pool.cpus = run_cpus(backend, pool.capacity, len(todo), resources)
            ran = _drive(root, pool, todo, plans, state, axes, skipped, progress)
        index = write_index(root, plans, state, axes)
        journal(root, event="end", ran=ran)
    return SweepResult(root, index, _counts(state, skipped, ran))


def _settings(o: dict, backend, workers, address, resources, threads) -> tuple:
    """(backend, workers, address, resources, threads): the call's, else the sweep file's
    options, else the defaults (local; one run per core there; threads: None, the scenario's
    own `executor.threads`, whose default is the one `flemu run` takes)."""
    backend = backend or o.get("backend", "local")
    if backend not in BACKENDS:
        raise ScenarioError([("backend", f"one of {', '.join(BACKENDS)}, got {backend!r}")])
    resources = {**(o.get("resources") or {}), **(resources or {})}
    resources = {"num_cpus": float(resources.get("num_cpus", resources.get("cpus", 1))),
                 "num_gpus": float(resources.get("num_gpus", resources.get("gpus", 0)))}
    workers = workers or o.get("workers")
    address = address or o.get("address")
    if threads is None:
        threads = o.get("threads")
    if workers is None:
        workers = cores() if backend == "local" else None
    return backend, workers, address, resources, threads


def _check_run_targets(root: Path, plans) -> None:
    """Every run's directory is absent, empty or a flemu run directory (a run never replaces
    anything else: outputs.check_run_target)."""
    bad = []
    for p in plans:
        d = root / "runs" / p.id
        if d.exists() or d.is_symlink():
            try:
                check_run_target(d, "run directory")
            except OutputError as e:
                bad.append(str(e))
    if bad:
        raise OutputError(f"{len(bad)} run directories of this sweep hold something flemu did not write; "
                          f"nothing written. First: {bad[0]}")


def _counts(state, skipped, ran) -> dict:
    c = {k: 0 for k in (*DONE, "failed", "pending")}
    for st in state.values():
        c[st["status"]] = c.get(st["status"], 0) + 1
    c["skipped"], c["ran"] = skipped, ran
    return c


def _drive(root, pool, todo, plans, state, axes, skipped, progress) -> int:
    """The scheduling loop: keep the pool full, record each outcome as it lands."""
    from collections import deque
    queue = deque(todo)
    done = failed = 0
    total = len(todo)
    last_index = 0.0
    last_run = None

    def report():
        if progress is not None:
            progress({"total": total, "done": done, "failed": failed, "running": len(pool.running()),
                      "pending": len(queue), "skipped": skipped, "last": last_run})
    report()
    try:
        while queue or pool.running():
            while queue and len(pool.running()) < pool.capacity:
                p = queue.popleft()
                journal(root, event="run", run=p.id)
                pool.submit(p)
            report()
            for out in pool.poll(0.2):
                last_run = out
                if out["ok"]:
                    s = read_summary(root / "runs" / out["id"])
                if out["ok"] and s is not None:
                    done += 1
                    state[out["id"]] = {"status": s["status"], "summary": s, "failure": None, "stale": None}
                    (root / "failures" / f"{out['id']}.json").unlink(missing_ok=True)
                    (root / "logs" / f"{out['id']}.log").unlink(missing_ok=True)
                    journal(root, event="complete", run=out["id"], status=s["status"])
                else:
                    failed += 1
                    prev = state[out["id"]].get("failure") or {}
                    rec = {"run": out["id"], "error": out.get("error") or "no summary written",
                           "type": out.get("type"), "detail": out.get("detail"), "exit_code": out.get("exit_code"),
                           "time": datetime.datetime.now().isoformat(timespec="seconds"),
                           "attempts": int(prev.get("attempts", 0)) + 1}
                    atomic_write(root / "failures" / f"{out['id']}.json", json.dumps(rec, indent=2, default=str))
                    state[out["id"]] = {"status": "failed", "summary": None, "failure": rec, "stale": None}
                    journal(root, event="failed", run=out["id"], error=rec["error"])
                if time.monotonic() - last_index > 1.0 or not (queue or pool.running()):
                    write_index(root, plans, state, axes)
                    last_index = time.monotonic()
                report()
    finally:
        pool.close()
        write_index(root, plans, state, axes)
    return done + failed
