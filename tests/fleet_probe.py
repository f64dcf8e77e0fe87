"""Counts passes over the fleet in a run's rounds (tests/test_fleet_scale.py): every NumPy
function call and every operation on the world's fleet-wide arrays that touches an array of
at least half the fleet's length is attributed to the code that made it: availability's
draw (devices/availability.py, its boundary check, the protocol's `available`) or other.
A bisection (np.searchsorted) is not a pass, nor np.asarray handing back its input.
Attributed to the first frame of flemu's own code (emulator/, devices/) in the stack."""
from __future__ import annotations

import sys

import numpy as np

NO_COPY = ("asarray",)          # a view of its input, when it needs no conversion: no pass
WRAPPED = ("zeros", "ones", "full", "empty", "arange", "zeros_like", "ones_like", "full_like", "empty_like",
           "flatnonzero", "nonzero", "where", "concatenate", "repeat", "unique", "sort", "argsort", "isin",
           "cumsum", "take", "fromiter", "array", "asarray", "copy", "count_nonzero", "sum",
           "any", "all", "bincount", "diff", "argmax", "lexsort", "setdiff1d", "union1d")
AVAILABILITY = ("devices/availability.py", "boundary/devices.py")


class Probe:
    def __init__(self, n: int):
        self.big = n // 2
        self.on = False
        self.availability = 0
        self.other: dict = {}

    def large(self, *xs) -> bool:
        for x in xs:
            if isinstance(x, np.ndarray) and x.size >= self.big:
                return True
            if isinstance(x, (list, tuple)) and x and self.large(*x[:4]):
                return True
        return False

    def note(self, what: str) -> None:
        if not self.on:
            return
        f = sys._getframe(2)
        where = None
        while f is not None:
            name = f.f_code.co_filename
            if name.endswith(AVAILABILITY) or (f.f_code.co_name == "available" and name.endswith("protocols/base.py")):
                self.availability += 1
                return
            if where is None and ("/emulator/" in name or "/devices/" in name):
                where = f"{name.split('/')[-2]}/{name.split('/')[-1]}:{f.f_code.co_name}:{what}"
            f = f.f_back
        if where is not None:
            self.other[where] = self.other.get(where, 0) + 1


PROBE: Probe = None


class Watched(np.ndarray):
    """A fleet-wide array of the world: operations on it are noted, results are plain arrays."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        PROBE.note(f"{ufunc.__name__}.{method}")
        inputs = tuple(i.view(np.ndarray) if isinstance(i, Watched) else i for i in inputs)
        if "out" in kw:
            kw["out"] = tuple(o.view(np.ndarray) if isinstance(o, Watched) else o for o in kw["out"])
        return getattr(ufunc, method)(*inputs, **kw)

    def __array_function__(self, func, types, args, kwargs):
        PROBE.note(func.__name__)
        args = tuple(a.view(np.ndarray) if isinstance(a, Watched) else a for a in args)
        return func(*args, **kwargs)

    def __getitem__(self, key):
        plain = self.view(np.ndarray)
        out = plain[key]
        if PROBE.large(key) or PROBE.large(out):
            PROBE.note("getitem")
        return out


def _wrap(name):
    fn = getattr(np, name)

    def wrapped(*a, **k):
        out = fn(*a, **k)
        if PROBE.on and (PROBE.large(*a) or PROBE.large(out)) and not (name in NO_COPY and _same_memory(a, out)):
            PROBE.note(name)
        return out
    return wrapped


def _same_memory(a, out) -> bool:
    x = a[0] if a else None
    return isinstance(x, np.ndarray) and isinstance(out, np.ndarray) and (out is x or out.base is x or
                                                                          (x.base is not None and out.base is x.base))


def watch(arr):
    return arr.view(Watched) if isinstance(arr, np.ndarray) and len(arr) >= PROBE.big else arr


def count_passes(n: int, algo: str, rounds: int, log: str) -> dict:
    """Passes over the fleet in rounds 2..`rounds` of the fleet benchmark's run at n clients."""
    global PROBE
    import torch
    torch.set_num_threads(1)
    from benchmarks.fleet import scenario
    from emulator.scenario import schema
    from emulator.sim.world import World
    PROBE = Probe(n)
    sc = scenario(n, algo, rounds)
    sc["workload"]["dataset"]["test_devices"] = 50
    sc["output"]["clients_csv"] = log
    rows = []

    def progress(row):
        rows.append(row["round"])
        PROBE.on = row["round"] >= 1          # from round 1's row to the last one: rounds 2..R
    w = World(schema.load(sc), progress=progress)
    net, fleet, task = w.network, w.clients, w.tasks[0]
    net.group_of = fleet.group_of = watch(fleet.group_of)
    net.factor = watch(net.factor)
    task.client_sizes = watch(task.client_sizes)
    fleet._sizes = [task.client_sizes]
    task.algorithm.ctx.client_sizes = watch(task.algorithm.ctx.client_sizes)
    rows_ = task.data.client_indices
    rows_.sizes, rows_.start = watch(rows_.sizes), watch(rows_.start)
    saved = {name: getattr(np, name) for name in WRAPPED}
    try:
        for name in WRAPPED:
            setattr(np, name, _wrap(name))
        w.run()
    finally:
        for name, fn in saved.items():
            setattr(np, name, fn)
        PROBE.on = False
    trained = set()
    for lg in w.recorder.rounds:
        trained |= set(lg.clients()[lg.steps > 0].tolist())
    return {"rounds": rounds - 1, "status": w.status, "availability": PROBE.availability, "other": PROBE.other,
            "touched": fleet.touched, "trained": len(trained), "generated": rows_.generated}
