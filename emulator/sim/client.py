"""A client device: its group's compute, link and availability models, and its random streams."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np


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


@dataclass(eq=False)
class Client:
    id: int
    group: str
    group_index: int
    compute: Any          # devices.compute.ComputeModel (shared by the group)
    link: Any             # devices.network.Link / InstantLink (shared by the group)
    availability: Any     # devices.availability.Availability (shared by the group, bound to it)
    streams: Any          # emulator.rng.Streams
    energy: Any = None    # fleet.EnergyParams or None
    work: dict = field(default_factory=dict)   # task -> devices.compute.Work (FLOPs per step)
    _rngs: dict = field(default_factory=dict, repr=False)

    def rng(self, name: str) -> np.random.Generator:
        """This client's own long-lived stream `name` (compute, network, ...)."""
        g = self._rngs.get(name)
        if g is None:
            g = self._rngs[name] = self.streams.generator(name, self.id)
        return g

    def clock(self, round_: int, now: float, task: int = 0):
        """The step clock of this client in this round (devices.compute.StepClock)."""
        return self.compute.clock(self.id, round_, self.rng("compute"), now, self.work.get(task))

    def compute_time(self, round_: int, steps: int, now: float = 0.0, task: int = 0) -> float:
        return self.clock(round_, now, task).time(steps)
