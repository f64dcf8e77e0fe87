"""Sweeps: a base scenario x named variants x a grid x seeds -> one folder of runs and an index.

A sweep file (YAML; `flemu sweep FILE`):

    name: stragglers
    base: study_base.yaml                 # a scenario file (relative to this file) or a mapping
    set: {run.virtual_time: 60}           # overrides for every run (paths as in `--set`)
    variants:                             # named override sets -> column `variant`
      fedavg_all: {protocol.wait: all}
      dms: {protocol: {name: intervals, interval: 1.5}, algorithm: {name: dms, lr: 0.1}}
    grid:                                 # the cartesian product of its axes
      algorithm.lr: [0.05, 0.1]           # a path and its values -> column `algorithm.lr`
      slow_fraction:                      # a named axis: value -> override set -> column `slow_fraction`
        0.25: {clients.groups[0].fraction: 0.75, clients.groups[1].fraction: 0.25}
        0.5:  {clients.groups[0].fraction: 0.5, clients.groups[1].fraction: 0.5}
    seeds: 3                              # 0, 1, 2; or a list [0, 7]
    out: runs/studies/stragglers          # default runs/<name>
    report: {hue: variant, col: slow_fraction, target: 0.85}   # hints for `flemu report`

Each run's scenario is the base with, in order, `set`, its variant, its grid values and its
seed applied; every value replaces what is at its path (`[*]` in a path means every item of
that list: `clients.groups[*].availability`). A grid value may be a whole block (a mapping);
it is labelled by its `name` (or `model` / `mode`). Run ids are readable and stable:
`variant=dms__lr=0.1__seed=0` (an axis is named by its last path segment, or by its full path
where two would collide).

The sweep folder:

    sweep.csv          the index: run, every swept value, seed, status, error, summary figures
    sweep.json         name, axes, seeds, report hints (what `analysis.load` needs)
    sweep.yaml         the sweep as given; base.yaml: the resolved base scenario
    runs/<id>/         one run directory per run (written atomically by the runner)
    scenarios/<id>.yaml  each run's resolved scenario (`flemu run` reproduces it)
    failures/<id>.json   the error of a run that failed (removed once it completes)
    logs/<id>.log      a failed run's output
    .lock              held by the running driver: two drivers never share a folder

Crash safety: a run directory appears under its final name only once complete (with its
summary.json), so what is finished is read from the folder itself; a driver killed at any
moment (kill -9 included) loses no finished run, and its children die with it (Linux
PR_SET_PDEATHSIG), so a resumed sweep never races an orphan nor runs a finished run twice.
Temporary leftovers (`runs/.<id>.tmp-*`) are removed on the next start.

The package, one module per concept: spec (the sweep file), plan (runs and their ids,
resolved scenarios), state (what the folder holds: finished, failed, stale), index (sweep.csv
and the meta files), lock (the folder lock, journal, leftovers), driver (`run_sweep`),
backends (local_pool, ray_pool), worker (one run in its process or Ray task), preload (the
local fork server's imports).
"""
from .driver import SweepResult, run_cpus, run_sweep
from .plan import RunPlan, apply, expand, resolve
from .index import INDEX_FIGURES, index_rows, write_index
from .lock import FolderLock, SweepError
from .axes import Axis, value_label
from .spec import BACKENDS, SPEC_KEYS, SweepSpec, load_spec
from .state import DONE, read_summary, scan

__all__ = ["load_spec", "expand", "resolve", "apply", "value_label", "run_sweep", "run_cpus",
           "read_summary", "scan", "index_rows", "write_index", "FolderLock", "SweepError", "SweepSpec",
           "Axis", "RunPlan", "SweepResult", "SPEC_KEYS", "BACKENDS", "DONE", "INDEX_FIGURES"]
