"""Transfers in virtual time: over dedicated links (a timeout each), or as flows that share
a server link or a topology max-min fairly (devices.network.FlowNetwork).

Over shared links (docs/engine.md, "Shared links"):
- a unicast message is one flow along the client's path (its own link, then the shared
  links), after the path's latency plus the client's own delay;
- a multicast broadcast is ONE flow over the shared links per round and shared path, however
  many clients receive it; each recipient's download ends when that flow has arrived and the
  message has crossed its own link (a flow over its own link alone, after the same latency a
  unicast would have): the later of the two (a recipient that starts after that flow
  ended gets a flow of its own);
- background traffic (work no round waits for: FedUMF's unselected clients) yields: its
  flows get only the capacity the round's own flows leave, so it never delays a round.
"""
from __future__ import annotations

import math

import numpy as np

from devices.network import FlowNetwork, build_topology, route

from ..boundary import codec as codec_boundary  # a codec's bytes, checked (boundary/codec.py)
from ..boundary import devices as boundary      # a link's seconds, checked (boundary/devices.py)
from ..codecs.encoding import direction_codecs


class Timed:
    """A transfer over a dedicated link: one timeout; cancelling needs no bookkeeping."""

    __slots__ = ("event",)

    def __init__(self, event):
        self.event = event

    def cancel(self):
        pass


class Joined:
    """A multicast recipient's download: the round's shared multicast flow and the recipient's
    own part; fires when both have arrived. Cancelling stops only the recipient's own part
    (the others still receive the broadcast)."""

    __slots__ = ("event", "own")

    def __init__(self, env, shared, own):
        self.own = own
        self.event = env.all_of([shared.event, own.event])

    def cancel(self):
        self.own.cancel()


class NetworkSim:
    def __init__(self, env, settings, clients, groups, streams):
        self.env = env
        self.bytes_per_param = settings.bytes_per_param
        self.overhead = settings.overhead_bytes
        self.codecs = direction_codecs(settings)        # docs/algorithms/compression.md
        self.flows = None
        self.paths = {}
        self._multicast = {}             # (broadcast key, shared path) -> its one flow
        self._bytes = {}
        self._models = {}                # (numel, direction) -> bytes of a model's message sized by an exchange
        self.group_of = clients.group_of      # the fleet's array (sim/fleet.py): no client object made
        # group index -> its link model (shared by the group); a group without clients has none
        self.links = {gi: g[2] for gi, g in enumerate(clients.groups) if clients.starts[gi + 1] > clients.starts[gi]}
        # each client's bandwidth factor (its spread), drawn once per group in bulk from the
        # group's stream ("network.spread", group): one NumPy draw, however large the fleet
        self.factor = np.ones(len(clients))
        for gi, link in self.links.items():
            if link.spread > 0:
                members = np.flatnonzero(self.group_of == gi)
                self.factor[members] = link.spread_factors(len(members), streams.keyed("network.spread", gi))
        if settings.server_link is not None or settings.topology is not None:
            self._build_flows(settings, clients, groups)

    def message_bytes(self, numel: int, direction: str = "up") -> int:
        key = (numel, direction)
        nb = self._bytes.get(key)
        if nb is None:               # a run has a handful of message sizes: each computed once
            codec = self.codecs[direction]              # its size from the length alone (compression.md 2)
            nb = self._bytes[key] = codec_boundary.wire_bytes(codec, numel, self.bytes_per_param, direction) \
                + self.overhead
        return nb

    def exchange_messages(self, numel_down: int, numel_up: int, sizes) -> tuple:
        """((numel, bytes) of a download, (numel, bytes) of an upload) of a model whose upload
        codec is an exchange (docs/algorithms/compression.md 2.6; `sizes` its ExchangeBytes): the
        download carries the shared state beside the model, the upload is the exchange's first."""
        down = self.message_bytes(numel_down, "down") + sizes.broadcast
        up = sizes.first + self.overhead
        self._models[(numel_down, "down")], self._models[(numel_up, "up")] = down, up
        return (numel_down, down), (numel_up, up)

    def expected_bytes(self, numel: int, direction: str) -> int:
        """The bytes a message of `numel` parameters was sized at: a model's message under an
        exchange codec (`exchange_messages`), else the codec's size from the length."""
        nb = self._models.get((numel, direction))
        return self.message_bytes(numel, direction) if nb is None else nb

    def _build_flows(self, settings, clients, groups):
        cap = {}
        for c in clients:
            for d in ("up", "down"):
                cap[("client", c.id, d)] = c.link.bandwidth_bps(d, c.id, float(self.factor[c.id]))
        shared = {"up": [], "down": []}
        lat = {}
        if settings.server_link is not None:
            sl = settings.server_link
            cap[("server", "up")] = sl.up_mbps * 1e6
            cap[("server", "down")] = sl.down_mbps * 1e6
            shared = {"up": [("server", "up")], "down": [("server", "down")]}
        topo = settings.topology
        for g in groups:
            path_lat = settings.server_link.latency if settings.server_link is not None else 0.0
            up, down = list(shared["up"]), list(shared["down"])
            if topo is not None:
                graph = build_topology(topo.nodes, [l.model_dump() for l in topo.links])
                node = topo.attach.get(g.name, topo.server)
                edges, tl = route(graph, node, topo.server)
                path_lat += tl
                for u, v in edges:
                    mbps = graph.edges[u, v]["mbps"] * 1e6
                    cap[("edge", u, v)] = mbps
                    cap[("edge", v, u)] = mbps
                up += [("edge", u, v) for u, v in edges]
                down += [("edge", v, u) for u, v in reversed(edges)]
            lat[g.name] = (path_lat, up, down)
        for c in clients:
            pl, up, down = lat[c.group]
            self.paths[c.id] = (pl, {"up": up, "down": down})
        self.flows = FlowNetwork(self.env, cap)

    def nominal_time(self, client, nbytes: int, direction: str) -> float:
        """What a client expects a transfer to take: its own link's latency and bandwidth,
        no jitter, no contention (time-driven clients plan with it)."""
        bw = client.link.bandwidth_bps(direction, client.id, float(self.factor[client.id]))
        return client.link.latency + (0.0 if math.isinf(bw) else nbytes * 8.0 / bw)

    def link_time(self, client, nbytes: int, direction: str, jitter) -> float:
        """Seconds of a transfer over the client's dedicated link, with the given jitter."""
        return boundary.seconds(client.link.transfer_time(nbytes, direction, client.id, None, jitter,
                                                          float(self.factor[client.id])),
                                "network model", client.link, "transfer_time")

    def link_times(self, ids: np.ndarray, nbytes: int, direction: str, jitter: np.ndarray) -> np.ndarray:
        """`link_time` of many clients (ids, with their jitter), per group in NumPy: the same
        seconds, bit for bit."""
        out = np.empty(len(ids))
        groups = self.group_of[ids]
        for gi in np.unique(groups):
            sel = groups == gi
            sub = ids[sel]
            link = self.links[int(gi)]
            out[sel] = boundary.seconds_array(link.transfer_times(nbytes, direction, sub, jitter[sel], self.factor[sub]),
                                              len(sub), "network model", link, "transfer_times")
        return out

    def transfer(self, client, nbytes: int, direction: str, jitter=None, rng=None, background: bool = False,
                 multicast=None):
        """Start moving a message; returns an object with `.event` (fires on arrival) and `.cancel()`.
        The latency's jitter is given (the round's bulk draw) or drawn from `rng`. Over shared
        links: `background` traffic yields to the rest; `multicast` (a key naming the round's
        broadcast) makes a download share the broadcast's one flow over the shared links."""
        if jitter is None and client.link.jitter > 0:
            jitter = float(client.link.delay(rng) - client.link.latency)
        if self.flows is None:
            return Timed(self.env.timeout(self.link_time(client, nbytes, direction, jitter or 0.0)))
        pl, paths = self.paths[client.id]
        path = [("client", client.id, direction)]
        if math.isinf(self.flows.capacity[path[0]]):
            path = []
        delay = pl + client.link.delay(None, jitter or 0.0)
        if multicast is None:
            return self.flows.send(path + paths[direction], nbytes * 8.0, delay, background)
        shared_path = tuple(paths[direction])
        key = (multicast, shared_path)
        shared = self._multicast.get(key)
        if shared is None:           # the broadcast's one flow over the shared links (never yields)
            shared = self._multicast[key] = self.flows.send(list(shared_path), nbytes * 8.0, pl)
            shared.event.callbacks.append(lambda _ev: self._multicast.pop(key, None))
        return Joined(self.env, shared, self.flows.send(path, nbytes * 8.0, delay, background))
