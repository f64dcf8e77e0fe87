"""A client device: its compute, link and availability models, and its current state."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np


class State(str, enum.Enum):
    """Explicit client states (recorded as transitions in events.csv)."""

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
    compute: Any          # devices.compute.ComputeModel
    link: Any             # devices.network.Link / InstantLink
    availability: Any     # devices.availability.Availability
    streams: Any          # emulator.rng.Streams
    state: State = State.IDLE
    _rng_compute: Optional[np.random.Generator] = field(default=None, repr=False)

    @property
    def rng_compute(self) -> np.random.Generator:
        if self._rng_compute is None:
            self._rng_compute = self.streams.generator("compute", self.id)
        return self._rng_compute

    def compute_time(self, round_: int, steps: int) -> float:
        """Virtual seconds for `steps` local steps in `round_` (draws from this client's stream)."""
        return self.compute.duration(self.id, round_, steps, self.rng_compute)
