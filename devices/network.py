"""Network: links between clients and the server, dedicated or shared.

- A dedicated link moves a message of `nbytes` in  latency + nbytes * 8 / (mbps * 1e6)
  seconds (1 Mbit/s = 10^6 bit/s), plus an optional random jitter on the latency.
- Shared links (a `server_link` all clients pass through, or a networkx topology) use a
  flow-level model: every transfer is a flow along a path of directed links; whenever a
  flow starts or ends, the rates of all flows are recomputed max-min fairly (progressive
  filling) and each flow progresses at its rate. A flow first waits its path's latency,
  then sends its bits.
Bytes per message = parameters x bytes_per_param x compression + overhead.
"""
from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Hashable, Optional, Sequence

import numpy as np


def message_bytes(numel: int, bytes_per_param: int = 4, overhead_bytes: int = 0,
                  compression: float = 1.0) -> int:
    """Bytes on the wire for one message carrying `numel` parameters: the compressed payload
    rounded up to whole bytes (rounded to 1e-9 first, so float noise such as
    2600 x 0.55 = 1430.0000000000002 does not add a byte)."""
    payload = round(int(numel) * int(bytes_per_param) * float(compression), 9)
    return int(math.ceil(payload)) + int(overhead_bytes)


JITTER_DISTS = ("exponential", "uniform", "lognormal")


def jitter_draw(rng, mean: float, dist: str = "exponential", sigma: float = 1.0, size=None):
    """Extra latency of one message (or `size` messages) with the given mean: Exponential(mean),
    Uniform(0, 2 mean), or LogNormal(ln(mean) - sigma^2/2, sigma)."""
    if mean <= 0:
        return 0.0 if size is None else np.zeros(size)
    if dist == "exponential":
        v = rng.exponential(mean, size)
    elif dist == "uniform":
        v = rng.uniform(0.0, 2.0 * mean, size)
    elif dist == "lognormal":
        v = rng.lognormal(math.log(mean) - 0.5 * sigma ** 2, sigma, size)
    else:
        raise ValueError(f"jitter distribution must be one of {', '.join(JITTER_DISTS)}, got {dist!r}")
    return float(v) if size is None else v


class LinkModel(ABC):
    """What every device link declares: its latency (s), the mean of its per-message jitter
    (0: none; drawn from `jitter_dist` with log-space spread `jitter_sigma`), its bandwidth
    `spread` (0: every client alike) and each client's bandwidth (`bandwidth_bps`). Transfer
    times follow: delay (latency + jitter) + bits / bandwidth. A subclass declares the
    attributes it changes (as dataclass fields) and `bandwidth_bps`; `latency` has no
    default here (a dataclass subclass may require it)."""

    latency: float
    jitter: float = 0.0
    spread: float = 0.0
    jitter_dist: str = "exponential"
    jitter_sigma: float = 1.0

    @abstractmethod
    def bandwidth_bps(self, direction: str, client: int = 0, factor: float = 1.0) -> float:
        """Bits per second of `client`'s link in `direction` ('up' or 'down'), scaled by the
        client's spread `factor` where the link has a spread."""

    def spread_factors(self, n: int, rng: Optional[np.random.Generator]) -> np.ndarray:
        """The bandwidth factors of n clients, drawn in bulk: LogNormal(-spread^2/2, spread)
        (mean 1); all 1 without spread (then nothing is drawn)."""
        if self.spread <= 0:
            return np.ones(n)
        return rng.lognormal(-0.5 * self.spread ** 2, self.spread, n)

    def round_draws(self, n: int, rng) -> Optional[np.ndarray]:
        """Jitter of n working clients' download and upload in one round, drawn in bulk from the
        group's round stream: a (2, n) array (row 0 down, row 1 up); None without jitter."""
        if self.jitter <= 0:
            return None
        return jitter_draw(rng, self.jitter, self.jitter_dist, self.jitter_sigma, 2 * n).reshape(2, n)

    def delay(self, rng=None, jitter=None) -> float:
        """Latency of one message: plus its jitter (given, or drawn from `rng`)."""
        if jitter is None:
            jitter = jitter_draw(rng, self.jitter, self.jitter_dist, self.jitter_sigma)
        return self.latency + jitter

    def transfer_time(self, nbytes: int, direction: str, client: int = 0, rng=None, jitter=None,
                      factor: float = 1.0) -> float:
        """Seconds to move `nbytes` in `direction` ('up' or 'down') over this link alone
        (`rng`: jitter draws, unless `jitter` is given; `factor`: the client's bandwidth spread)."""
        return self.delay(rng, jitter) + nbytes * 8.0 / self.bandwidth_bps(direction, client, factor)

    @abstractmethod
    def transfer_times(self, nbytes: int, direction: str, clients: np.ndarray, jitter: np.ndarray,
                       factor: np.ndarray) -> np.ndarray:
        """`transfer_time` of many clients at once, with the same float operations (so the
        same seconds to the last bit)."""


@dataclass
class Link(LinkModel):
    """A client's own link: latency (s), uplink and downlink bandwidth (Mbit/s).
    `jitter`: mean extra latency per message (0: none), drawn from `jitter_dist` (exponential,
    uniform on [0, 2 jitter], or lognormal with log-space spread `jitter_sigma`).
    `spread`: each client's bandwidths are scaled by a factor ~ LogNormal(-spread^2/2, spread)
    (mean 1) drawn once per client (`spread_factors`; the caller keeps each client's factor
    and passes it to every transfer)."""

    latency: float
    up_mbps: float
    down_mbps: float
    jitter: float = 0.0
    spread: float = 0.0
    jitter_dist: str = "exponential"
    jitter_sigma: float = 1.0

    def __post_init__(self):
        if not (self.latency >= 0 and math.isfinite(self.latency)):
            raise ValueError(f"latency must be >= 0, got {self.latency}")
        for k in ("up_mbps", "down_mbps"):
            if not (getattr(self, k) > 0):
                raise ValueError(f"{k} must be > 0, got {getattr(self, k)}")

    def bandwidth_bps(self, direction: str, client: int = 0, factor: float = 1.0) -> float:
        mbps = self.up_mbps if direction == "up" else self.down_mbps
        return mbps * 1e6 * factor

    def transfer_times(self, nbytes: int, direction: str, clients: np.ndarray, jitter: np.ndarray,
                       factor: np.ndarray) -> np.ndarray:
        """`transfer_time` of many clients at once, with the same float operations (so the
        same seconds to the last bit): (latency + jitter) + nbytes * 8 / (mbps * 1e6 * factor)."""
        mbps = self.up_mbps if direction == "up" else self.down_mbps
        return (self.latency + jitter) + nbytes * 8.0 / (mbps * 1e6 * factor)


@dataclass
class InstantLink(LinkModel):
    """A link that takes no time (asked for explicitly: `network: instant`)."""

    latency: float = 0.0
    jitter: float = 0.0

    def spread_factors(self, n, rng):
        return np.ones(n)

    def bandwidth_bps(self, direction, client=0, factor=1.0):
        return math.inf

    def round_draws(self, n, rng):
        return None

    def delay(self, rng=None, jitter=None):
        return 0.0

    def transfer_time(self, nbytes, direction, client=0, rng=None, jitter=None, factor=1.0):
        return 0.0

    def transfer_times(self, nbytes, direction, clients, jitter, factor):
        return np.zeros(len(clients))


# ============================================================================ max-min fairness
def max_min_rates(flows: dict, capacity: dict) -> dict:
    """Max-min fair rates by progressive filling.
    flows: {flow id: [link ids on its path]}, capacity: {link id: bits/s (may be inf)}.
    Repeatedly the link with the smallest fair share (remaining capacity / unfrozen flows
    through it) fixes the rate of all its unfrozen flows."""
    rates = {}
    remaining = dict(capacity)
    active = {f: list(p) for f, p in flows.items()}
    while active:
        count: dict = {}
        for f, path in active.items():
            for l in path:
                count[l] = count.get(l, 0) + 1
        best, share = None, math.inf
        for l, n in count.items():
            s = remaining[l] / n
            if s < share:
                best, share = l, s
        if best is None:   # flows over no finite link
            for f in active:
                rates[f] = math.inf
            break
        done = [f for f, path in active.items() if best in path]
        for f in done:
            rates[f] = share
            for l in active[f]:
                remaining[l] = max(0.0, remaining[l] - share)
            del active[f]
    return rates


class Flow:
    __slots__ = ("id", "path", "bits", "rate", "done", "started", "background")

    def __init__(self, fid, path, bits, done, background=False):
        self.id, self.path, self.bits, self.rate, self.done = fid, path, float(bits), 0.0, done
        self.started = False
        self.background = background


def yielding_rates(flows: dict, background: dict, capacity: dict) -> dict:
    """Max-min fair rates where `background` flows yield: the other flows share the
    capacity max-min fairly as if the background ones were absent, and the background flows
    share what they leave, max-min fairly. Both dicts: {flow id: [link ids on its path]}."""
    rates = max_min_rates(flows, capacity)
    if not background:
        return rates
    left = dict(capacity)
    for f, path in flows.items():
        for link in path:
            left[link] = max(0.0, left[link] - rates[f])
    rates.update(max_min_rates(background, left))
    return rates


class FlowNetwork:
    """Flows over directed links with max-min fair sharing, in SimPy virtual time.

    `send(path, bits, latency)` returns a `Transfer` whose `event` fires when the last bit
    arrives; `Transfer.cancel()` removes the flow (a client that went offline). A flow sent
    with `background=True` yields: it gets only the capacity the other flows leave
    (`yielding_rates`), so it never slows them."""

    EPS = 1e-9   # bits

    def __init__(self, env, capacity: dict):
        self.env = env
        self.capacity = dict(capacity)    # link id -> bits/s
        self.flows: dict = {}
        self._ids = itertools.count()
        self._last = 0.0
        self._gen = 0
        self.recomputes = 0

    def send(self, path: Sequence[Hashable], bits: float, latency: float = 0.0,
             background: bool = False) -> "Transfer":
        tr = Transfer(self, list(path), bits, self.env.event(), background)
        if latency > 0:
            tr._start_ev = self.env.timeout(latency)
            tr._start_ev.callbacks.append(lambda _ev: tr._begin())
        else:
            tr._begin()
        return tr

    # -- flow bookkeeping -----------------------------------------------------------
    def _advance(self):
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            for f in self.flows.values():
                f.bits -= f.rate * dt
        self._last = now

    def _add(self, flow):
        self._advance()
        self.flows[flow.id] = flow
        self._reschedule()

    def _remove(self, flow):
        if flow.id in self.flows:
            self._advance()
            del self.flows[flow.id]
            self._reschedule()

    def _reschedule(self):
        self.recomputes += 1
        self._gen += 1
        gen = self._gen
        fg, bg = {}, {}
        for f in self.flows.values():
            (bg if f.background else fg)[f.id] = f.path
        rates = yielding_rates(fg, bg, self.capacity)
        nxt = math.inf
        for f in self.flows.values():
            f.rate = rates[f.id]
            t = 0.0 if f.bits <= self.EPS else (f.bits / f.rate if f.rate > 0 else math.inf)
            nxt = min(nxt, t)
        if math.isfinite(nxt):
            ev = self.env.timeout(nxt)
            ev.callbacks.append(lambda _ev: self._on_timer(gen))

    def _on_timer(self, gen):
        if gen != self._gen:
            return
        self._advance()
        finished = [f for f in self.flows.values() if f.bits <= self.EPS * max(1.0, f.rate)]
        for f in finished:
            del self.flows[f.id]
        self._reschedule()
        for f in finished:
            f.done.succeed()


class Transfer:
    def __init__(self, net, path, bits, event, background=False):
        self.net, self.event = net, event
        self.flow = Flow(next(net._ids), path, bits, event, background)
        self._start_ev = None
        self.cancelled = False

    def _begin(self):
        if self.cancelled:
            return
        self.flow.started = True
        if self.flow.bits <= 0:
            self.event.succeed()
            return
        self.net._add(self.flow)

    def cancel(self):
        self.cancelled = True
        if self.flow.started:
            self.net._remove(self.flow)


def build_topology(nodes: Sequence[str], links: Sequence[dict]):
    """A networkx graph from YAML-style node names and links {a, b, mbps, latency}."""
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(nodes)
    for ln in links:
        for end in (ln["a"], ln["b"]):
            if end not in g:
                raise ValueError(f"link {ln['a']}-{ln['b']} names unknown node {end!r}")
        g.add_edge(ln["a"], ln["b"], mbps=float(ln["mbps"]), latency=float(ln.get("latency", 0.0)))
    return g


def route(graph, src: str, dst: str):
    """Shortest path by latency (ties: fewest hops): list of directed edges and total latency."""
    import networkx as nx

    path = nx.shortest_path(graph, src, dst, weight=lambda u, v, d: d["latency"] + 1e-12)
    edges = list(zip(path[:-1], path[1:]))
    return edges, sum(graph.edges[u, v]["latency"] for u, v in edges)


@dataclass
class TraceLink(LinkModel):
    """Per-client bandwidths from a links table {trace client: (up_mbps, down_mbps)} (e.g.
    converted from FedScale's device capacities); client k of the group uses the table's
    k-th client (sorted ids, wrapping). Latency and jitter as `Link`."""

    table: dict
    members: Sequence[int]
    latency: float = 0.0
    jitter: float = 0.0
    jitter_dist: str = "exponential"
    jitter_sigma: float = 1.0

    def __post_init__(self):
        ids = sorted(self.table, key=lambda s: (len(s), s))
        if not ids:
            raise ValueError("empty links table")
        self._of = {int(c): self.table[ids[i % len(ids)]] for i, c in enumerate(self.members)}

    def bandwidth_bps(self, direction, client=0, factor=1.0):
        """The table's bandwidth of this client (no spread: `factor` is not used)."""
        up, down = self._of[client]
        return (up if direction == "up" else down) * 1e6

    def transfer_times(self, nbytes, direction, clients, jitter, factor):
        k = 0 if direction == "up" else 1
        bw = np.array([self._of[int(c)][k] for c in clients], dtype=np.float64) * 1e6
        return (self.latency + jitter) + nbytes * 8.0 / bw
