"""The vector engine of `rounds` (DESIGN.md section 3, "Protocol"): a round as NumPy over its
participants and one timeout, when nothing can interrupt a client during the round
(per-round availability, dedicated links, no background work, no event trace).

For the participants (ascending id of the selection) it takes the round's bulk draws
(sim/draws.py, the same numbers the process engine reads), and computes, with the same float
operations SimPy performs on its clock, when each download ends (a1 = t0 + d), each
computation (a2 = a1 + c) and each upload (a3 = a2 + u); the round closes at T: the last a3
(`all`), the deadline if earlier (`deadline`; an upload at exactly the deadline counts), or
the k-th a3 (`first_k`; every upload at that same instant counts, as in SimPy, where they are
processed before the waiting round resumes). Uploads are aggregated in SimPy's order: by a3,
then a2, then a1, then selection order (each event of a client is created by its previous
one, so equal-time events keep the order of their causes). A participant still working at T
is stopped there, its partial times recorded exactly as the process engine's `guard` does.
"""
from __future__ import annotations

import math

import numpy as np

from .cohort import submit_cohort
from .outcome import multicast_first, never_ends, steps_done
from .round_plan import round_times


def at_time(env, when: float):
    """An event at exactly virtual time `when` (now + (when - now) may miss it by an ulp)."""
    delay = when - env.now
    while env.now + delay > when:
        delay = math.nextafter(delay, -math.inf)
    while env.now + delay < when:
        delay = math.nextafter(delay, math.inf)
    return env.timeout(max(delay, 0.0))


def vector_round(proto, task, t: int, chosen, steps, log, bc, draws):
    """Generator: round t of `proto` (a Rounds) for `chosen` (with their planned `steps`), as
    one timeout. Returns the arrived items [(client, upload, steps)] in SimPy's arrival order."""
    w, env = proto.world, proto.env
    algo = task.algorithm
    t0 = env.now
    ids = np.asarray(chosen, dtype=np.int64)
    n = len(ids)
    (nd, bd), (nu, bu) = proto.messages(task)
    steps = np.asarray(steps, dtype=np.int64)
    d, dur, floor, u = round_times(proto, task, t, ids, steps, draws)
    a1 = t0 + d
    a2 = np.where(dur > 0, a1 + dur, a1)
    a3 = a2 + u
    wait = proto.p.wait
    if n and not np.isfinite(a3).all():
        # a step that never ends (0 iterations per period): the process engine's client stays
        # busy for good; where the round waits for it, nothing is left to happen
        if wait.mode == "all" or (wait.mode == "first_k" and np.isfinite(a3).sum() < min(wait.k, n)):
            items = yield from _never_closes(proto, task, t, ids, steps, log, bc, d, a1, a2, a3, dur, floor,
                                             bd, bu, nd, nu)
            return items
    if n == 0:
        T = t0
    elif wait.mode == "all":
        T = float(a3.max())
    elif wait.mode == "deadline":
        T = min(t0 + wait.seconds, float(a3.max()))
    else:
        T = float(np.sort(a3)[min(wait.k, n) - 1])
    arrived = a3 <= T
    order = np.lexsort((np.arange(n), a1, a2, a3))       # SimPy's order: by a3, a2, a1, selection
    order = order[arrived[order]]
    shared = proto.cohort_spec(task, t, bc)
    if shared is not None:
        # one job for the round's arrivals (in arrival order); the clients that started
        # computing but did not arrive are counted (never read: never computed)
        late = (a1 <= T) & ~arrived
        cohort = submit_cohort(w.executor, task, t, shared, ids[order], steps[order], steps[late])
    else:
        # jobs and uploads, in selection order (the process engine submits a job when its client
        # starts computing and asks the algorithm for the upload when it finishes)
        futs, ups = {}, {}
        for i, c in enumerate(ids.tolist()):
            if a1[i] <= T:
                futs[i] = proto.submit_job(task, c, t, int(steps[i]), algo.local_spec(c, t, bc), task.buffers)
        for i in range(n):
            if i in futs and a2[i] <= T:
                ups[i] = algo.upload(int(ids[i]), t, futs[i])
    if T > t0:
        yield at_time(env, T)
    # the log, as the pieces and `guard` write it (inf - inf of a never-ending step: masked out)
    old = np.seterr(invalid="ignore")
    down_done, up_started = a1 <= T, a2 <= T
    computing = down_done & ~up_started
    comm = np.where(down_done, a1 - t0, T - t0)
    comm = np.where(arrived, comm + (a3 - a2), np.where(up_started, comm + (T - a2), comm))
    elapsed = np.where(computing, T - a1, 0.0)
    partial = steps_done(steps, elapsed, dur)
    rec_steps = np.where(up_started, steps, np.where(computing, partial, 0)).astype(np.int64)
    rows = log.positions(ids)
    log.comm_time[rows] = comm
    log.steps[rows] = rec_steps
    log.compute_time[rows] = np.where(up_started, dur, np.where(computing, elapsed, 0.0))
    log.min_compute[rows] = rec_steps * floor
    down_bytes = np.where(down_done, bd, 0)
    first = multicast_first(a1, down_done) if proto.multicast else None
    if first is not None:                # counted once, at the first arrival
        down_bytes = np.zeros(n, dtype=np.int64)
        down_bytes[first] = bd
    log.bytes_down[rows] = down_bytes
    log.bytes_up[rows] = np.where(arrived, bu, 0)
    log.messages.extend([(nd, bd, "down")] * int((down_bytes > 0).sum()) + [(nu, bu, "up")] * int(arrived.sum()))
    np.seterr(**old)
    for i in np.flatnonzero(~arrived):
        log.drop(int(ids[i]), "late")
    if shared is not None:
        return cohort
    return [(int(ids[i]), ups[i], int(steps[i])) for i in order.tolist()]


def _never_closes(proto, task, t, ids, steps, log, bc, d, a1, a2, a3, dur, floor, bd, bu, nd, nu):
    """A round that waits for a client whose computation never ends: everyone else's work is
    recorded as it happens, then the round waits on an event that never fires (the run stalls,
    as under the process engine)."""
    env, algo = proto.env, task.algorithm
    t0 = env.now
    fin = np.isfinite(a3)
    for i, c in enumerate(ids.tolist()):     # every download ends; finite computations and uploads too
        fut = proto.submit_job(task, c, t, int(steps[i]), algo.local_spec(c, t, bc), task.buffers)
        if fin[i]:
            algo.upload(c, t, fut)
    last = float(np.max(np.where(fin, a3, a1)))
    if last > t0:
        yield at_time(env, last)
    rows = log.positions(ids)
    with np.errstate(invalid="ignore"):        # a3 - a2 is inf - inf where a step never ends (not fin)
        log.comm_time[rows] = np.where(fin, (a1 - t0) + (a3 - a2), a1 - t0)
    log.steps[rows] = np.where(fin, steps, 0)
    log.compute_time[rows] = np.where(fin, dur, 0.0)
    log.min_compute[rows] = np.where(fin, steps * floor, 0.0)
    log.bytes_down[rows] = bd
    log.bytes_up[rows] = np.where(fin, bu, 0)
    log.messages.extend([(nd, bd, "down")] * len(ids) + [(nu, bu, "up")] * int(fin.sum()))
    yield never_ends(env)
    return []
