"""Network links: how long a message of `nbytes` takes between a client and the server.

Transfer time over a dedicated link = latency + nbytes * 8 / (mbps * 1e6) seconds
(1 Mbps = 10^6 bit/s). Message sizes come from what the algorithm sends:
bytes = bytes_per_param x parameters + overhead_bytes per message.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def message_bytes(numel: int, bytes_per_param: int = 4, overhead_bytes: int = 0) -> int:
    """Bytes on the wire for one message carrying `numel` parameters."""
    return int(numel) * int(bytes_per_param) + int(overhead_bytes)


@dataclass
class Link:
    """A dedicated client<->server link: latency (s), uplink and downlink bandwidth (Mbit/s)."""

    latency: float
    up_mbps: float
    down_mbps: float

    def __post_init__(self):
        if not (self.latency >= 0 and math.isfinite(self.latency)):
            raise ValueError(f"latency must be >= 0, got {self.latency}")
        for k in ("up_mbps", "down_mbps"):
            v = getattr(self, k)
            if not (v > 0):
                raise ValueError(f"{k} must be > 0, got {v}")

    def transfer_time(self, nbytes: int, direction: str) -> float:
        """Seconds to move `nbytes` in `direction` ('up' or 'down')."""
        mbps = self.up_mbps if direction == "up" else self.down_mbps
        return self.latency + nbytes * 8.0 / (mbps * 1e6)


@dataclass
class InstantLink:
    """A link that takes no time (must be asked for explicitly: `network: instant`)."""

    latency: float = 0.0

    def transfer_time(self, nbytes: int, direction: str) -> float:
        return 0.0
