"""What the driver writes about the sweep: the index sweep.csv, sweep.json / sweep.yaml /
base.yaml (meta), each written atomically."""
from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path

import yaml

from ..runs.outputs import LEFT_OUT
from .spec import SweepSpec

INDEX_FIGURES = ("rounds", "virtual_time", "wall_time", "final_test_acc", "best_test_acc", "target_round",
                 "target_time", "tau_max", "tau_avg", "grad_steps_computed", "bytes_up", "bytes_down")


def index_rows(plans, state, axes) -> list:
    rows = []
    for p in plans:
        st = state[p.id]
        s = st["summary"] or {}
        r = {"run": p.id, **{a: p.values.get(a) for a in axes}, "seed": p.seed, "status": st["status"],
             "error": _error(st, s)}
        reach = s.get("reached_target") or {}
        delay = (s.get("delay") or {}).get("0") or {}
        fig = {"rounds": s.get("rounds"), "virtual_time": s.get("virtual_time"), "wall_time": s.get("wall_time"),
               "final_test_acc": s.get("final_test_acc"), "best_test_acc": s.get("best_test_acc"),
               "target_round": reach.get("round"), "target_time": reach.get("virtual_time"),
               "tau_max": delay.get("tau_max"), "tau_avg": delay.get("tau_avg"),
               "grad_steps_computed": s.get("grad_steps_computed"), "bytes_up": s.get("bytes_up"),
               "bytes_down": s.get("bytes_down")}
        r.update(fig)
        r["dir"] = f"runs/{p.id}"
        rows.append(r)
    return rows


def _error(st: dict, s: dict) -> str:
    """Why a run is left out of comparisons: a crash's error, or what a failed, invalid or
    empty run's summary says."""
    if st["failure"]:
        return st["failure"].get("error", "")
    if st["status"] in LEFT_OUT:
        return str(s.get("message") or "")[:400]
    return ""


def write_index(root: Path, plans, state, axes):
    """sweep.csv, regenerated from the state and written atomically."""
    import pandas as pd
    cols = ["run", *axes, "seed", "status", "error", *INDEX_FIGURES, "dir"]
    df = pd.DataFrame(index_rows(plans, state, axes), columns=cols)
    atomic_write(root / "sweep.csv", df.to_csv(index=False))
    return df


def atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_meta(root: Path, spec: SweepSpec, axes, backend) -> None:
    meta = {"name": spec.name, "description": spec.description, "axes": axes, "seeds": spec.seeds,
            "axis_values": {a.name: a.labels for a in spec.axes}, "report": spec.report,
            "target_accuracy": (spec.base.get("run") or {}).get("target_accuracy"), "backend": backend,
            "updated": datetime.datetime.now().isoformat(timespec="seconds")}
    atomic_write(root / "sweep.json", json.dumps(meta, indent=2, default=str))
    atomic_write(root / "sweep.yaml", yaml.safe_dump(_plain(spec.raw), sort_keys=False, default_flow_style=None,
                                                     width=100))
    atomic_write(root / "base.yaml", yaml.safe_dump(spec.base, sort_keys=False, default_flow_style=None, width=100))


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
