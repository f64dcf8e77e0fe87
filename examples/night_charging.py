"""An availability model of your own: phones that train only while charging at night.

A day lasts `day` virtual seconds; a client is online during the first `night` seconds of
its own day, which is shifted by its time zone: zone i = client % zones, offset i * day / zones.
It is a continuous-time model (kind "time"): it answers *when* a client is next online and
until when it stays online, so an offline client never spins the clock, and a client whose
night ends in the middle of its work is interrupted (dropped)."""
import math

import numpy as np
from pydantic import Field, model_validator

from emulator.api import Availability, Params, register


class NightParams(Params):
    day: float = Field(86400.0, gt=0, description="length of a day in virtual seconds")
    night: float = Field(28800.0, gt=0, description="online (charging) seconds at the start of each local day")
    zones: int = Field(1, ge=1, description="time zones: client c lives in zone c % zones")

    @model_validator(mode="after")
    def _fits(self):
        if self.night >= self.day:
            raise ValueError(f"night ({self.night}) must be shorter than day ({self.day})")
        return self


@register("availability", "night_charging", NightParams, "online while charging: the first `night` s of each local day")
class NightCharging(Availability):
    kind = "time"

    def __init__(self, p: NightParams, ctx=None):
        self.p = p

    def _phase(self, client: int, now: float) -> float:
        offset = (client % self.p.zones) * self.p.day / self.p.zones
        return math.fmod(now + offset, self.p.day)

    def online_mask(self, ids, round_, now):
        return np.array([self._phase(int(c), now) < self.p.night for c in ids], dtype=bool)

    def online_until(self, client, now):
        ph = self._phase(client, now)
        return now + (self.p.night - ph) if ph < self.p.night else now

    def next_online(self, client, now):
        ph = self._phase(client, now)
        return now if ph < self.p.night else now + (self.p.day - ph)
