"""Secure aggregation's cost in a `rounds` round (docs/algorithms/secagg.md): the key agreement
and share exchange before the broadcast (rounds 0 and 1, secagg.md Eq. 3.1), the unmasking
exchange after the round closes (round 4, Eq. 3.2), their bytes per client (Eq. 2.1-2.4).
The aggregate's values are untouched (the protocol's sum is exact); only the clock and the
byte counts change. The protocol owns the time: `Rounds.round` yields these phases."""
from __future__ import annotations

import math

import numpy as np

from .cohort import Cohort


def neighbours(params, n: int) -> int:
    """k: the clients each participant exchanges keys and shares with, among n participants
    (secagg.md section 1): all others (SecAgg), or k of them (SecAgg+)."""
    if n <= 1:
        return 0
    if params.protocol == "secagg":
        return n - 1
    k = params.neighbours if params.neighbours is not None else 2 * math.ceil(math.log2(n))
    return min(n - 1, k)


def setup_bytes(params, k: int, overhead: int) -> tuple:
    """(up R0, down R0, up R1, down R1) bytes of one client with k neighbours (Eq. 2.1, 2.2)."""
    P, H, I, A = params.key_bytes, params.share_bytes, params.id_bytes, params.aead_bytes
    share_msg = k * (2 * I + 2 * H + A) + overhead
    return 2 * P + I + overhead, k * (2 * P + I) + overhead, share_msg, share_msg


def unmask_bytes(params, k: int, dropped: int, overhead: int) -> tuple:
    """(down R4, up R4) bytes of one survivor with k neighbours, `dropped` participants lost
    (Eq. 2.3, 2.4)."""
    s = k if params.unmask == "always" else min(k, dropped)
    return k * params.id_bytes + overhead, s * (params.share_bytes + params.id_bytes) + overhead


class SecureAggregation:
    """The phases of one round, timed over the participants' own links (no jitter)."""

    def __init__(self, params, network):
        self.p = params
        self.network = network
        self.overhead = int(network.overhead)

    def _leg(self, ids: np.ndarray, nbytes: int, direction: str) -> float:
        """The slowest of these clients' messages of nbytes in one direction."""
        return float(self.network.link_times(ids, nbytes, direction, np.zeros(len(ids))).max())

    def setup(self, env, chosen):
        """Generator: rounds 0 and 1 for the selected clients (Eq. 3.1). Returns
        (seconds, bytes up, bytes down) per selected client."""
        ids = np.asarray(chosen, dtype=np.int64)
        if not len(ids):
            return 0.0, 0, 0
        up0, down0, up1, down1 = setup_bytes(self.p, neighbours(self.p, len(ids)), self.overhead)
        secs = (self._leg(ids, up0, "up") + self._leg(ids, down0, "down")
                + self._leg(ids, up1, "up") + self._leg(ids, down1, "down"))
        yield env.timeout(secs)
        return secs, up0 + up1, down0 + down1

    def unmask(self, env, chosen, survivors):
        """Generator: round 4 for the survivors (Eq. 3.2), when it runs (always with a
        survivor; under `on_dropout` only when a selected client did not arrive). Returns
        (seconds, bytes up, bytes down) per survivor."""
        ids = np.asarray(survivors, dtype=np.int64)
        dropped = len(chosen) - len(ids)
        if not len(ids) or (self.p.unmask == "on_dropout" and dropped == 0):
            return 0.0, 0, 0
        down4, up4 = unmask_bytes(self.p, neighbours(self.p, len(chosen)), dropped, self.overhead)
        secs = self._leg(ids, down4, "down") + self._leg(ids, up4, "up")
        yield env.timeout(secs)
        return secs, up4, down4

    def round(self, proto, chosen, items, log, setup):
        """Generator, after the round closed: the unmasking phase, then the round's secure
        aggregation bytes added to its log (clients.csv, metrics.csv) and its columns."""
        survivors = [int(c) for c in items.clients] if isinstance(items, Cohort) else [c for c, _, _ in items]
        secs0, up0, down0 = setup
        secs4, up4, down4 = yield from self.unmask(proto.env, chosen, survivors)
        if len(chosen):
            pos = log.positions(np.asarray(chosen, dtype=np.int64))
            log.bytes_up[pos] += up0
            log.bytes_down[pos] += down0
        if survivors:
            pos = log.positions(np.asarray(survivors, dtype=np.int64))
            log.bytes_up[pos] += up4
            log.bytes_down[pos] += down4
        n, s = len(chosen), len(survivors)
        log.protocol_bytes += n * (up0 + down0) + s * (up4 + down4)
        return {"secagg_seconds": secs0 + secs4, "secagg_bytes_up": n * up0 + s * up4,
                "secagg_bytes_down": n * down0 + s * down4}
