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
"""
from __future__ import annotations

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
