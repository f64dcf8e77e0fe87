"""The random draws of one round, made in bulk per device group (DESIGN.md section 3,
"Randomness"): for the clients that work in round t, sorted by id, each group's compute model
draws their clock parameters from the stream ("compute.round", group, t) and its link model
their download and upload jitter from ("network.round", group, t). One stream per group and
round, not per client: idle clients cost nothing, and the process engine (a SimPy process per
client) and the vector engine (NumPy over the round) read the same numbers.

Draws made once per client (a bandwidth spread, a step time fixed for the run) come from the
client's own stream (`Client.own`); work outside rounds (async jobs) draws from a stream of
the client and its job.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


class RoundDraws:
    def __init__(self, world, t: int, clients, steps=None):
        """`clients`: the working clients; `steps`: their planned steps (default 0: models
        that draw per step then draw as they go, from each client's round stream)."""
        clients = np.asarray(clients, dtype=np.int64)
        order = np.argsort(clients, kind="stable")
        clients = clients[order]
        steps = np.zeros(len(clients), np.int64) if steps is None else np.asarray(steps, np.int64)[order]
        self.compute: dict = {}
        self.jitter: dict = {}
        if not len(clients):
            return
        groups = world.group_of[clients]
        for g in np.unique(groups):
            sel = groups == g
            ids, st = clients[sel], steps[sel]
            first = world.clients[int(ids[0])]
            draws = first.compute.round_draws(list(st), world.streams.keyed("compute.round", int(g), t))
            if draws is not None:
                self.compute.update(zip(ids.tolist(), draws))
            jit = first.link.round_draws(len(ids), world.streams.keyed("network.round", int(g), t))
            if jit is not None:
                self.jitter.update(zip(ids.tolist(), zip(jit[0].tolist(), jit[1].tolist())))

    def draw(self, client: int):
        return self.compute.get(int(client))

    def jitter_of(self, client: int, direction: str) -> Optional[float]:
        j = self.jitter.get(int(client))
        return None if j is None else (j[0] if direction == "down" else j[1])


class NoDraws:
    """Work outside a round's bulk draw: every draw from the client's own stream of the job."""

    def draw(self, client):
        return None

    def jitter_of(self, client, direction):
        return None


NO_DRAWS = NoDraws()     # stateless: one for every piece of work outside a bulk draw
