"""Client-side availability: whether a client is online, asked as a time, not a yes/no.

An availability model answers, for a client at virtual time `now` in round `round_`:
- `online(client, round_, now)`: is it online now?
- `online_until(client, now)`: when does its current online period end (inf: never)?
- `next_online(client, now)`: the earliest time >= now at which it is online.
so an offline client never spins the clock (STYLE: "ask for a time, not a yes/no").
"""
from __future__ import annotations

import math
from dataclasses import dataclass


class Availability:
    name: str = "?"

    def online(self, client: int, round_: int, now: float) -> bool:
        raise NotImplementedError

    def online_until(self, client: int, now: float) -> float:
        return math.inf

    def next_online(self, client: int, now: float) -> float:
        return now


@dataclass
class AlwaysOnline(Availability):
    """The client is always online."""

    name: str = "always"

    def online(self, client, round_, now):
        return True
