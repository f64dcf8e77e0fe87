"""What both engines record of a participant, written once (docs/engine.md, "Outcomes").

- `steps_done`: the local steps completed when work that takes `duration` seconds is stopped
  after `elapsed`: floor(steps x elapsed / duration) (a 1e-9 guard against float noise such
  as 0.3 / 0.1 = 2.9999999999999996). A duration of 0 means every step is done the moment
  the computation starts: all `steps` (whether or not its 0 s event was processed before
  the stop at the same instant). Numbers or NumPy arrays alike.
- `never_ends`: the event of a computation whose step time is infinite (0 iterations per
  period): it never fires; a round waiting for it never closes (the run stalls).
- `multicast_first`: which recipient's download counts a multicast broadcast's bytes: the
  first to arrive (ties: the first in selection order), as the process engine counts them.
- `Outcomes` and `record_outcomes`: a round's participants (or one job, or one client's
  background work), what became of each (when its download, computation and upload ended;
  when and why it stopped), and the one function that turns them into the round log's
  comm_time, compute_time, steps, bytes, messages and drops, for both engines, once per
  row (when its facts are final): the vector engine computes the outcomes in NumPy
  (vector.py), the process engine fills them as its pieces end (sheet.py).
- `record_unrun`: work decided and never run (intervals' `min_iterations`), written once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

GUARD = 1e-9


def steps_done(steps, elapsed, duration):
    """Steps completed after `elapsed` of `duration` seconds (a number or an array)."""
    if np.ndim(steps) == 0 and np.ndim(duration) == 0:
        if duration > 0:
            return int(np.floor(steps * elapsed / duration + GUARD))
        return int(steps)
    steps = np.asarray(steps)
    positive = duration > 0
    safe = np.where(positive, duration, 1.0)
    return np.where(positive, np.floor(steps * elapsed / safe + GUARD), steps).astype(np.int64)


def never_ends(env):
    """The event of a computation that never ends (an infinite step time): never fires."""
    return env.event()


def multicast_first(arrive: np.ndarray, received: np.ndarray):
    """Index of the recipient that counts a multicast's bytes: among those whose download
    arrived (`received`), the earliest `arrive`, ties by position; None if none arrived."""
    idx = np.flatnonzero(received)
    if not len(idx):
        return None
    return int(min(idx, key=lambda i: (arrive[i], i)))


@dataclass
class Outcomes:
    """What became of a round's participants, one array entry each (struct of arrays).

    `ids` the clients, `t0` when their download began (one time for all, or one each),
    `steps` the steps clients.csv records of their computation, `dur` each computation's
    seconds, `floor` a lower bound on one recorded step's seconds; `down`, `compute`, `up`:
    when the download, the computation (which starts when the download ends) and the upload
    (which starts when the computation ends) end (inf: never, or not yet); `at`: when the
    record is taken (the round's close, or when the client stopped); `stopped`: the work was
    stopped at `at` (a piece that ended by then is done; the one in progress is recorded
    part-way), with its `reason` ("late", "offline", ...; read only for work whose upload had
    not arrived by `at`); work neither stopped nor arrived by `at` is still running (only its
    finished pieces are recorded). `carries`: whose finished download counts the broadcast's
    bytes (None: every one; a multicast: one per round)."""

    ids: np.ndarray
    t0: object
    steps: np.ndarray
    dur: np.ndarray
    floor: np.ndarray
    down: np.ndarray
    compute: np.ndarray
    up: np.ndarray
    at: np.ndarray
    stopped: np.ndarray
    reason: object = "late"     # one reason for all, or one per participant
    carries: Optional[np.ndarray] = None


def record_outcomes(log, o: Outcomes, messages, drop: bool = True) -> np.ndarray:
    """Write `o` into the round log `log`, once per row (their facts are final: a row written
    twice is a flemu bug): comm_time, compute_time, steps, min_compute, bytes_down,
    bytes_up, the messages sent (`messages`: ((parameters, bytes) down, (parameters, bytes)
    up)), and, with `drop`, the stopped clients that did not arrive as dropped with their
    reason (work that was no participation, such as background training, is recorded with
    `drop=False`). Returns which clients arrived (their upload ended by `at`)."""
    (numel_down, bytes_down), (numel_up, bytes_up) = messages
    t0, steps, at, stopped = o.t0, o.steps, o.at, o.stopped
    rows = log.positions(o.ids)
    log.mark_recorded(rows)
    with np.errstate(invalid="ignore"):      # inf - inf of a step that never ends: masked out
        down_done, up_started, arrived = o.down <= at, o.compute <= at, o.up <= at
        computing = down_done & ~up_started
        comm = np.where(down_done, o.down - t0, np.where(stopped, at - t0, 0.0))
        comm = np.where(arrived, comm + (o.up - o.compute),
                        np.where(up_started & stopped, comm + (at - o.compute), comm))
        elapsed = np.where(computing & stopped, at - o.down, 0.0)
        partial = steps_done(steps, elapsed, o.dur)
        rec_steps = np.where(up_started, steps, np.where(computing & stopped, partial, 0)).astype(np.int64)
        log.comm_time[rows] = comm
        log.steps[rows] = rec_steps
        log.compute_time[rows] = np.where(up_started, o.dur, elapsed)
        log.min_compute[rows] = np.where(up_started | (computing & stopped), rec_steps * o.floor, 0.0)
    if log.phases is not None:     # what a selector observes (protocols/selecting.py)
        with np.errstate(invalid="ignore"):
            log.phases[:, rows] = [np.where(down_done, o.down - t0, np.nan), np.where(down_done, o.dur, np.nan),
                                   np.where(arrived, o.up - o.compute, np.nan)]
    carried = down_done if o.carries is None else down_done & o.carries
    if log.timeline is not None:   # timeline.csv (`run.timeline`): each piece's start and end
        log.timeline.add(log, o, (down_done, up_started, arrived), carried, messages)
    log.bytes_down[rows] = np.where(carried, bytes_down, 0)
    log.bytes_up[rows] = np.where(arrived, bytes_up, 0)
    log.messages.extend([(numel_down, bytes_down, "down")] * int(np.count_nonzero(carried))
                        + [(numel_up, bytes_up, "up")] * int(np.count_nonzero(arrived)))
    if drop:
        for i in np.flatnonzero(stopped & ~arrived):
            log.drop(int(o.ids[i]), o.reason if isinstance(o.reason, str) else o.reason[i])
    return arrived


def record_unrun(log, client: int, steps: int, duration: float, min_compute: float, reason: str) -> None:
    """Work decided at its round's start and never run (intervals' clients with tau at most
    `min_iterations`: their work is never read, so never computed): its planned steps and
    compute seconds count, no transfer; recorded once, when decided, as dropped for `reason`."""
    i = log.at(client)
    log.mark_recorded(np.array([i]))
    log.steps[i], log.compute_time[i], log.min_compute[i] = steps, duration, min_compute
    log.drop(client, reason)
