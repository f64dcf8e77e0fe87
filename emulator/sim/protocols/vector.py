"""The vector engine of `rounds` (docs/engine.md, "The two engines of rounds"): a round as
NumPy over its participants and one timeout, when nothing can interrupt a client during the
round (per-round availability, dedicated links, no background work, no event trace).

For the participants (ascending id of the selection) it takes the round's bulk draws
(sim/draws.py, the same numbers the process engine reads), and computes, with the same float
operations SimPy performs on its clock, when each download ends (down_end = t0 + d), each
computation (compute_end = down_end + c) and each upload (up_end = compute_end + u); the round
closes at `close`: the last up_end (`all`), the deadline if earlier (`deadline`; an upload at
exactly the deadline counts), or the k-th up_end (`first_k`; every upload at that same instant
counts, as in SimPy, where they are processed before the waiting round resumes). Uploads are
aggregated in SimPy's order: by up_end, then compute_end, then down_end, then selection order
(each event of a client is created by its previous one, so equal-time events keep the order
of their causes). A participant still working at `close` is stopped there, its partial times
recorded as the process engine's stop records them (outcome.py: the same formulas). A round
that `run.virtual_time` ends at or before its close never closes (`_cut_by_budget`): what
ran by then is recorded, as the process engine's end of the run records it.
"""
from __future__ import annotations

import numpy as np

from ..simpy_internals import at_instant
from .cohort import submit_cohort
from .outcome import Outcomes, multicast_first, never_ends, record_outcomes
from .round_times import round_times


class Ends:
    """A round's participants and when each one's pieces end (virtual time; inf: never)."""

    def __init__(self, t0, ids, steps, d, dur, floor, u):
        self.t0, self.ids, self.steps, self.dur, self.floor = t0, ids, steps, dur, floor
        self.down = t0 + d
        self.compute = self.down + dur                 # (down + 0.0 is down: 0 s computations too)
        self.up = self.compute + u

    def outcomes(self, at: float, stopped: bool, multicast: bool) -> Outcomes:
        """Their outcomes recorded at `at`: stopped there ("late") or still running; a
        multicast broadcast's bytes carried by the first download to arrive."""
        n = len(self.ids)
        carries = None
        if multicast:
            carries = np.zeros(n, dtype=bool)
            first = multicast_first(self.down, self.down <= at)
            if first is not None:
                carries[first] = True
        return Outcomes(self.ids, self.t0, self.steps, self.dur, self.floor, self.down, self.compute, self.up,
                        np.full(n, at), np.full(n, stopped), carries=carries)


def close_time(wait, ends: Ends) -> float:
    """When the round closes: the last upload (`all`), the deadline if earlier, or the k-th upload."""
    n = len(ends.ids)
    if n == 0:
        return ends.t0
    if wait.mode == "all":
        return float(ends.up.max())
    if wait.mode == "deadline":
        return min(ends.t0 + wait.seconds, float(ends.up.max()))
    return float(np.sort(ends.up)[min(wait.k, n) - 1])


def vector_round(proto, task, t: int, chosen, steps, log, bc, draws):
    """Generator: round t of `proto` (a Rounds) for `chosen` (with their planned `steps`), as
    one timeout. Returns the arrived items [(client, upload, steps)] in SimPy's arrival order
    (or the arrivals' Cohort)."""
    env = proto.env
    ids = np.asarray(chosen, dtype=np.int64)
    n = len(ids)
    steps = np.asarray(steps, dtype=np.int64)
    ends = Ends(env.now, ids, steps, *round_times(proto, task, t, ids, steps, draws))
    wait = proto.p.wait
    if n and not np.isfinite(ends.up).all():
        # a step that never ends (0 iterations per period): the process engine's client stays
        # busy for good; where the round waits for it, nothing is left to happen
        if wait.mode == "all" or (wait.mode == "first_k" and np.isfinite(ends.up).sum() < min(wait.k, n)):
            items = yield from _never_closes(proto, task, t, log, bc, ends)
            return items
    close = close_time(wait, ends)
    budget = proto.world.sc.run.virtual_time
    if budget is not None and budget <= close:
        items = yield from _cut_by_budget(proto, task, t, log, bc, ends, budget)
        return items
    arrived = ends.up <= close
    order = np.lexsort((np.arange(n), ends.down, ends.compute, ends.up))   # SimPy's order
    order = order[arrived[order]]
    items = _jobs(proto, task, t, bc, ends, close, arrived, order)
    if close > ends.t0:
        yield at_instant(env, close)
    record_outcomes(log, ends.outcomes(close, True, proto.multicast), proto.messages(task))
    return items


def _cut_by_budget(proto, task, t, log, bc, ends: Ends, budget: float):
    """`run.virtual_time` ends the run at or before the round's close: the round never closes
    (under the process engine, a close at the budget's instant comes after the run's end).
    What the process engine ran by then is recorded now, not stopped: every piece that ended
    before the budget, and one ending at it that began before it (one that would begin at it
    never runs); the jobs of the clients that began computing."""
    started = ends.compute < budget                   # its upload began before the budget
    ends.compute = np.where((ends.compute < budget) | (ends.down < budget), ends.compute, np.inf)
    ends.up = np.where(started, ends.up, np.inf)
    arrived = ends.up <= budget
    _jobs(proto, task, t, bc, ends, budget, arrived, np.flatnonzero(arrived))
    record_outcomes(log, ends.outcomes(budget, False, proto.multicast), proto.messages(task))
    yield never_ends(proto.env)                      # the run ends at the budget
    return []


def _jobs(proto, task, t, bc, ends: Ends, close: float, arrived, order):
    """Submit the round's jobs as the process engine does; returns its items (or the Cohort)."""
    algo, ids, steps = task.checked, ends.ids, ends.steps          # the verbs, checked (boundary/algorithm.py)
    spec = proto.cohort_spec(task, t, bc)
    if spec is not None:
        # one job for the round's arrivals (in arrival order); the clients that started
        # computing but did not arrive are counted (never read: never computed)
        late = (ends.down <= close) & ~arrived
        return submit_cohort(proto.world.executor, task, t, spec, ids[order], steps[order], steps[late])
    # jobs and uploads, in selection order (the process engine submits a job when its client
    # starts computing and asks the algorithm for the upload when it finishes)
    futs, ups = {}, {}
    for i, c in enumerate(ids.tolist()):
        if ends.down[i] <= close:
            futs[i] = proto.submit_job(task, c, t, int(steps[i]), algo.local_spec(c, t, bc), task.buffers)
    for i, fut in futs.items():
        if ends.compute[i] <= close:
            ups[i] = algo.upload(int(ids[i]), t, fut)
    return [(int(ids[i]), ups[i], int(steps[i])) for i in order.tolist()]


def _never_closes(proto, task, t, log, bc, ends: Ends):
    """A round that waits for a client whose computation never ends: everyone else's work is
    recorded as it happens, then the round waits on an event that never fires (the run stalls,
    as under the process engine)."""
    env, algo = proto.env, task.checked
    ids, steps, t0 = ends.ids, ends.steps, ends.t0
    fin = np.isfinite(ends.up)
    for i, c in enumerate(ids.tolist()):     # every download ends; finite computations and uploads too
        fut = proto.submit_job(task, c, t, int(steps[i]), algo.local_spec(c, t, bc), task.buffers)
        if fin[i]:
            algo.upload(c, t, fut)
    last = float(np.max(np.where(fin, ends.up, ends.down)))
    if last > t0:
        yield at_instant(env, last)
    record_outcomes(log, ends.outcomes(last, False, proto.multicast), proto.messages(task))
    yield never_ends(env)
    return []
