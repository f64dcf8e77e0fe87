"""Run callbacks: user code called after each aggregation and evaluation and at the end
(docs/write-your-own.md, "Callbacks"). A callback may record (a tracker), stop the run
(return True, or `run.stop(reason)`: the summary's status is then `stopped` and `stopped_by`
names the callback) or checkpoint (`run.checkpoint()`: the global model lands in the run
directory's `checkpoints/`).

Two ways in: a scenario's `callbacks:` list names registered callbacks with their
parameters (`register("callback", name, Params, description)` on a class whose constructor
takes the params), and `emulator.run(..., callbacks=[...])` takes instances. Built-in:
`mlflow` and `tensorboard` (emulator/runs/tracking/, the optional extra `flemu[tracking]`).
"""
from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..registry import extension_point


class Callback:
    """Base class of run callbacks: a plain class, not an abstract one, because every hook is
    optional. `on_start`, `after_aggregation`, `after_evaluation` and `on_end` do nothing
    here; a callback overrides the ones it needs (a tracker may use only `after_aggregation`,
    a checkpointer only `on_end`), so no method is one every callback must define.

    `after_aggregation` gets each aggregation's metrics row (the row metrics.csv gets:
    round, virtual_time, participants, bytes, train_loss, ..., and the evaluation's columns
    when the round was evaluated); `after_evaluation` gets every evaluated row, round 0
    (the initial model) included. Either may return True to stop the run cleanly after this
    aggregation. `on_end` gets the summary (before summary.json is written: what it adds is
    recorded)."""

    #: how the run's summary names this callback (`stopped_by`); registered callbacks get
    #: their registered name
    label: Optional[str] = None

    def on_start(self, run: "RunContext") -> None:
        """Before the first evaluation (round 0)."""

    def after_aggregation(self, run: "RunContext", row: dict) -> Optional[bool]:
        """After each aggregation (round >= 1); True stops the run."""
        return None

    def after_evaluation(self, run: "RunContext", row: dict) -> Optional[bool]:
        """After each evaluation (rows holding test_loss); True stops the run."""
        return None

    def on_end(self, run: "RunContext", summary: dict) -> None:
        """After the run, before its directory is written."""

    def name(self) -> str:
        return self.label or type(self).__name__


extension_point("callback", Callback)


class RunContext:
    """What a callback sees of the run: its scenario, where it is (round, virtual time),
    the global model, a folder whose files land in the run directory, and `stop`."""

    def __init__(self, scenario, world, files: Path):
        self.scenario = scenario
        self.world = world
        self._files = files
        self.round = 0
        self.virtual_time = 0.0
        self._stop: Optional[tuple] = None

    @property
    def files(self) -> Path:
        """A folder whose contents are moved into the run directory when it is written."""
        self._files.mkdir(parents=True, exist_ok=True)
        return self._files

    def global_params(self, model: int = 0) -> np.ndarray:
        """The global model's parameters now, as a flat float array (a copy)."""
        return self.world.tasks[model].algorithm.global_params().detach().cpu().numpy().copy()

    def checkpoint(self, model: int = 0) -> Path:
        """Save the global model as `checkpoints/round_<t>.npy` in the run directory."""
        d = self.files / "checkpoints"
        d.mkdir(exist_ok=True)
        suffix = "" if len(self.world.tasks) == 1 else f"_model{model}"
        f = d / f"round_{self.round}{suffix}.npy"
        np.save(f, self.global_params(model))
        return f

    def stop(self, reason: str = "") -> None:
        """Stop the run after this aggregation (the caller's name is filled in by the run)."""
        self._stop = (None, reason)


def _evaluated(row: dict) -> bool:
    v = row.get("test_loss")
    return v is not None and not (isinstance(v, float) and math.isnan(v))


class Hooks:
    """Calls the callbacks from the run's per-row hook; stops the world when one asks."""

    def __init__(self, scenario, callbacks: Sequence[Callback], out_dir: Path,
                 progress: Optional[Callable[[dict], None]] = None):
        self.callbacks = list(callbacks)
        self.progress = progress
        self.staging = Path(out_dir).parent / f".{Path(out_dir).name}.files-{os.getpid()}-{time.monotonic_ns()}"
        self.scenario = scenario
        self.run: Optional[RunContext] = None
        self.stopped_by: Optional[str] = None

    def start(self, world) -> None:
        self.run = RunContext(self.scenario, world, self.staging)
        for cb in self.callbacks:
            cb.on_start(self.run)

    def on_row(self, row: dict) -> None:
        if self.progress is not None:
            self.progress(row)
        run = self.run
        if run is None or not self.callbacks:
            return
        run.round, run.virtual_time = int(row["round"]), float(row["virtual_time"])
        for cb in self.callbacks:
            run._stop = None
            asked = cb.after_aggregation(run, row) if row["round"] > 0 else None
            if _evaluated(row):
                asked = cb.after_evaluation(run, row) or asked
            if (asked or run._stop is not None) and self.stopped_by is None:
                self._halt(cb, run._stop[1] if run._stop else "")

    def _halt(self, cb: Callback, reason: str) -> None:
        w = self.run.world
        self.stopped_by = cb.name()
        w.status = "stopped"
        w.message = f"stopped by callback {self.stopped_by!r} after round {self.run.round}" + \
            (f": {reason}" if reason else "")

    def end(self, summary: dict) -> None:
        if self.stopped_by is not None:
            summary["stopped_by"] = self.stopped_by
        if self.run is not None:
            for cb in self.callbacks:
                cb.on_end(self.run, summary)

    def files(self) -> Optional[Path]:
        return self.staging if self.staging.exists() else None

    def cleanup(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def from_scenario(sc) -> list:
    """The scenario's `callbacks:` built from the registry."""
    from .. import registry
    out = []
    for spec in sc.callbacks or ():
        cb = registry.get("callback", spec.name).factory(spec)
        if cb.label is None:
            cb.label = spec.name
        out.append(cb)
    return out


def numeric_items(row: dict) -> list:
    """(column, float) of a row's finite numbers, without `round` / `model` (trackers)."""
    out: list[tuple[str, Any]] = []
    for k, v in row.items():
        if k in ("round", "model") or isinstance(v, (bool, str)) or v is None:
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append((k, f))
    return out


from .tracking import mlflow_tracker, tensorboard_tracker  # noqa: E402,F401  (register the built-ins)
