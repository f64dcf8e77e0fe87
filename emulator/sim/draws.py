"""The random draws of one round, made in bulk per device group (docs/engine.md,
"Randomness"): for the clients that work in round t, sorted by id, each group's compute model
draws their clock parameters from the stream ("compute.round", group, t) and its link model
their download and upload jitter from ("network.round", group, t). One stream per group and
round, not per client: idle clients cost nothing, and the process engine (a SimPy process per
client) and the vector engine (NumPy over the round) read the same numbers.

Draws made once per client come from elsewhere: a bandwidth spread from one stream per group
("network.spread", group; sim/network.py), a step time fixed for the run from the client's
own stream (`Client.own`); work outside rounds (async jobs) draws from a stream of the client
and its job.
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
        self.ids = clients                        # ascending
        self.jitter = np.zeros((2, len(clients)))  # row 0 down, row 1 up (0: the link has none)
        self.compute: list = [None] * len(clients)  # each client's clock draw (None: none)
        self._at: Optional[dict] = None
        if not len(clients):
            return
        groups = world.group_of[clients]
        for g in np.unique(groups):
            sel = np.flatnonzero(groups == g)
            first = world.clients[int(clients[sel[0]])]
            draws = first.compute.round_draws(list(steps[sel]), world.streams.keyed("compute.round", int(g), t))
            if draws is not None:
                for i, v in zip(sel.tolist(), draws):
                    self.compute[i] = v
            jit = first.link.round_draws(len(sel), world.streams.keyed("network.round", int(g), t))
            if jit is not None:
                self.jitter[:, sel] = jit

    def positions(self, clients: np.ndarray) -> np.ndarray:
        """Where these clients (all working this round) sit in the draws."""
        return np.searchsorted(self.ids, clients)

    def _pos(self, client: int) -> Optional[int]:
        if self._at is None:
            self._at = {c: i for i, c in enumerate(self.ids.tolist())}
        return self._at.get(int(client))

    def draw(self, client: int):
        i = self._pos(client)
        return None if i is None else self.compute[i]

    def jitter_of(self, client: int, direction: str) -> Optional[float]:
        i = self._pos(client)
        return None if i is None else float(self.jitter[0 if direction == "down" else 1, i])


class NoDraws:
    """Work outside a round's bulk draw: every draw from the client's own stream of the job."""

    def draw(self, client):
        return None

    def jitter_of(self, client, direction):
        return None


NO_DRAWS = NoDraws()     # stateless: one for every piece of work outside a bulk draw
