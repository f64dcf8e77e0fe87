"""A round's seconds in NumPy (docs/engine.md, "The two engines of rounds"): for
participants that start at once over dedicated links, each one's download, compute (with the
floor of one step's time) and upload seconds, per device group, with the same float
operations as the client's own pieces (its link's transfer time, its step clock), so the
same seconds to the last bit. The vector engine computes its round from them; the process
engine plans its pieces with them (`Protocol.planned_seconds`)."""
from __future__ import annotations

import numpy as np


def compute_times(w, task, t: int, ids: np.ndarray, steps: np.ndarray, a1: np.ndarray, draws) -> tuple:
    """Each participant's compute time for `steps` local steps starting at a1, and the floor
    of one step's time (clients.csv min_compute = steps x floor): in NumPy per device group
    where the group's clock is one step time per client (`ComputeModel.step_times`), else
    through each client's clock. The same seconds, bit for bit."""
    n = len(ids)
    dur, floor = np.empty(n), np.empty(n)
    pos = draws.positions(ids)
    groups = w.group_of[ids]
    for gi in np.unique(groups):
        sel = np.flatnonzero(groups == gi)
        model = w.clients[int(ids[sel[0]])].compute
        st = model.step_times([draws.compute[p] for p in pos[sel].tolist()])
        k = steps[sel]
        if st is not None:                         # FixedClock: time(k) = k x step (0 if k = 0)
            with np.errstate(invalid="ignore"):    # 0 x inf where k = 0: masked out
                dur[sel] = np.where(k > 0, k * st, 0.0)
            floor[sel] = np.where(k > 0, st, 0.0)
            continue
        for i in sel.tolist():
            clk = w.clients[int(ids[i])].clock(t, float(a1[i]), task.index, draws.compute[pos[i]])
            dur[i] = clk.time(int(steps[i]))
            floor[i] = clk.min_step(int(steps[i])) if steps[i] > 0 else 0.0
    return dur, floor


def round_times(proto, task, t: int, ids: np.ndarray, steps, draws) -> tuple:
    """Download, compute, step-floor and upload seconds of participants `ids` starting now over
    dedicated links (NumPy per device group, bit-identical to each client's own pieces)."""
    w, t0 = proto.world, proto.env.now
    steps = np.asarray(steps, dtype=np.int64)
    (_, bd), (_, bu) = proto.messages(task)
    jit = draws.jitter[:, draws.positions(ids)]
    d = w.network.link_times(ids, bd, "down", jit[0])
    dur, floor = compute_times(w, task, t, ids, steps, t0 + d, draws)
    u = w.network.link_times(ids, bu, "up", jit[1])
    return d, dur, floor, u
