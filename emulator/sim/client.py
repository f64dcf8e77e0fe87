"""A client device: its group's compute, link and availability models, and its random streams."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..boundary.devices import CheckedClock     # every clock's answers checked (boundary/devices.py)


class State(str, enum.Enum):
    """Explicit client states, recorded as transitions in events.csv (`output.events: true`)."""

    OFFLINE = "offline"
    IDLE = "idle"
    SELECTED = "selected"
    DOWNLOADING = "downloading"
    COMPUTING = "computing"
    UPLOADING = "uploading"
    DONE = "done"
    DROPPED = "dropped"


@dataclass(eq=False, slots=True)
class Client:
    id: int
    group: str
    group_index: int
    compute: Any          # devices.compute.ComputeModel (shared by the group)
    link: Any             # devices.network.LinkModel: Link / InstantLink / TraceLink (shared by the group)
    availability: Any     # devices.availability.Availability (shared by the group, bound to it)
    streams: Any          # emulator.rng.Streams
    energy: Any = None    # fleet.EnergyParams or None
    work: dict = field(default_factory=dict)   # task -> devices.compute.Work (FLOPs per step)
    _rngs: Optional[dict] = field(default=None, repr=False)

    def own(self, name: str) -> np.random.Generator:
        """This client's own long-lived stream `name` (draws made once per client: its
        bandwidth spread, a step time fixed for the run), created on first use."""
        if self._rngs is None:
            self._rngs = {}
        g = self._rngs.get(name)
        if g is None:
            g = self._rngs[name] = self.streams.keyed(name, self.id)
        return g

    def clock(self, round_: int, now: float, task: int = 0, draw=None):
        """The step clock of this client in this round (devices.compute.StepClock). `draw`: its
        share of the round's bulk draw (RoundDraws); without one, random models draw from the
        client's own stream of that round."""
        m = self.compute
        redraw = m.redraw
        if not m.random:
            rng = None
        elif redraw == "client":
            rng = self.own("compute.client")
        elif draw is None:
            rng = self.streams.keyed("compute", self.id, round_)
        elif redraw == "step":       # steps beyond the bulk draw (rare): the stream made only if asked
            rng = LazyStream(self.streams, ("compute", self.id, round_))
        else:
            rng = None
        return CheckedClock(m.clock(self.id, round_, rng, now, self.work.get(task), draw), m, round_)

    def eval_clock(self, round_: int, now: float, task: int = 0):
        """The step clock of a charged evaluation after round `round_` (docs/fairness.md): the
        client's compute model in that round, from `now`; a random model draws from a stream of
        its own (`evaluation.compute`, client, round), so training draws are never consumed
        (a step time fixed per client is the client's own)."""
        m = self.compute
        if not m.random:
            rng = None
        elif m.redraw == "client":
            rng = self.own("compute.client")
        else:
            rng = self.streams.keyed("evaluation.compute", self.id, round_)
        return CheckedClock(m.clock(self.id, round_, rng, now, self.work.get(task), None), m, round_)

    def compute_time(self, round_: int, steps: int, now: float = 0.0, task: int = 0, draw=None) -> float:
        return self.clock(round_, now, task, draw).time(steps)


class LazyStream:
    """A keyed stream created on first use (a per-participant stream costs ~50 us to seed;
    most rounds never draw from it)."""

    __slots__ = ("_streams", "_key", "_g")

    def __init__(self, streams, key: tuple):
        self._streams, self._key, self._g = streams, key, None

    def __getattr__(self, name):
        if self._g is None:
            self._g = self._streams.keyed(*self._key)
        return getattr(self._g, name)
