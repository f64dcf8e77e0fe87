"""An exchange codec's second phase in a `rounds` round (docs/algorithms/compression.md 2.6):
after the aggregation has read the uploads, the server sends each client it read its reply
(PowerSGD's P̂) and waits for every second upload (their Q). The phase lasts

    T_2 = max_i (down_i(back) + up_i(second))

over the clients read, each over its own link (latency plus bytes x 8 / bandwidth, no jitter,
no contention); a model with nothing to exchange (no matrix: both messages empty) has no
second phase (0 s, no bytes); computing the reply and the second message takes no virtual time. Its bytes
go to those clients' rows (clients.csv) and the round's (metrics.csv); the round lasts T_2
longer (`round_time`, `exchange_seconds`). The values were already decoded at the read step
(codecs/encoding.py: ExchangeEncoding); the protocol owns the time."""
from __future__ import annotations

import numpy as np

from ...algorithms.base import Rows


def read_clients(arrivals) -> np.ndarray:
    """The clients whose uploads the aggregation read (a cohort's: every row)."""
    if isinstance(arrivals, Rows):
        return np.asarray(arrivals.clients, dtype=np.int64)
    return np.array([a.client for a in arrivals if a.vectors is not None], dtype=np.int64)


class SecondPhase:
    """The second phase of a model's exchange codec, timed over the clients' own links."""

    def __init__(self, network, sizes):
        self.network = network
        self.empty = int(sizes.back) == 0 and int(sizes.second) == 0   # nothing to exchange: no phase
        self.back = int(sizes.back) + int(network.overhead)
        self.second = int(sizes.second) + int(network.overhead)

    def seconds(self, ids: np.ndarray) -> float:
        """T_2 of these clients (0 for none, or when the model has nothing to exchange)."""
        if not len(ids) or self.empty:
            return 0.0
        zero = np.zeros(len(ids))
        down = self.network.link_times(ids, self.back, "down", zero)
        up = self.network.link_times(ids, self.second, "up", zero)
        return float((down + up).max())

    def round(self, env, arrivals, log):
        """Generator, after the aggregation: the phase's time passes and its bytes are recorded.
        Returns the round's metrics columns."""
        ids = read_clients(arrivals)
        secs = self.seconds(ids)
        if secs > 0:
            yield env.timeout(secs)
        if len(ids) and not self.empty:
            pos = log.positions(ids)
            log.bytes_down[pos] += self.back
            log.bytes_up[pos] += self.second
            log.protocol_bytes += len(ids) * (self.back + self.second)
        return {"exchange_seconds": secs}
