"""Client-side availability: when a client is online, asked as a time, not a yes/no.

Two kinds of model (declared: `kind`): per-round ("round": decided at each round's start,
held for the round: always, bernoulli, sine, markov, round_trace) and continuous-time ("time":
on/off periods in virtual seconds, a client going offline mid-work is interrupted: markov_time,
diurnal, trace). Every model answers (the abstract methods of `Availability`), at virtual time
`now`: `online_mask(ids, round_, now)`, which of `ids` are online (vectorised); `online_until`,
when a client's online period ends; `next_online`, the earliest time >= now it is online (inf:
never), so an offline client never spins the clock. `RoundAvailability` answers the last two
for every per-round model and asks for `group_mask(round_)`, the group's mask of a round.

One model object serves a whole device group: `bind(members, rngs, labels)` hands it the
group's client ids, a source of random generators (`rngs.round(r)`: the group's stream for
round r; `rngs.client(c)`: client c's own long-lived stream) and, when available, the
clients' label histograms (for label-dependent participation, FedSUM spec P2).
"""
from __future__ import annotations

import bisect
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .trace_files import read_interval_trace  # noqa: F401  (re-exported)

NEVER = math.inf


class Availability(ABC):
    """When clients are online. Required (abstract): `online_mask`, `online_until`,
    `next_online`. Declared: `kind`, "round" or "time" (see the module's doc)."""

    kind = "round"

    def bind(self, members: Sequence[int], rngs, labels: Optional[np.ndarray] = None) -> None:
        self.members = np.asarray(members, dtype=np.int64)
        self._order = np.argsort(self.members, kind="stable")
        self._sorted = self.members[self._order]
        self.rngs = rngs
        self.labels = labels

    def positions(self, ids) -> np.ndarray:
        """Where clients `ids` (members of the group) sit in `members` (NumPy, no loop)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids is self.members:
            return np.arange(len(ids))
        at = np.searchsorted(self._sorted, ids)
        ok = at < len(self._sorted)
        if not ok.all() or (self._sorted[at] != ids).any():
            bad = ids[~ok] if not ok.all() else ids[self._sorted[at] != ids]
            raise KeyError(f"client {int(bad[0])} is not in this group")
        return self._order[at]

    @abstractmethod
    def online_mask(self, ids, round_: int, now: float) -> np.ndarray:
        """Which of `ids` (members of the group) are online at `now`, in `round_`."""

    def online(self, client: int, round_: int, now: float) -> bool:
        return bool(self.online_mask(np.array([client]), round_, now)[0])

    @abstractmethod
    def online_until(self, client: int, now: float) -> float:
        """When the current online period ends (NEVER: not before the round ends, or never)."""

    @abstractmethod
    def next_online(self, client: int, now: float) -> float:
        """The earliest time >= now at which the client is online (NEVER: never)."""


# ============================================================================ per round
class RoundAvailability(Availability):
    """Per-round models: decided at each round's start, held for the round. Required
    (abstract): `group_mask(round_)`, the whole group's mask of a round (asked once a round)."""

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        self._round, self._mask = None, None

    @abstractmethod
    def group_mask(self, round_: int) -> np.ndarray:
        """Whether each member (in `members` order) is online in round `round_`."""

    def online_until(self, client, now):
        return NEVER            # online for the whole round, asked again at the next one

    def next_online(self, client, now):
        return now              # no time to wait for: the round runs, perhaps empty

    def online_mask(self, ids, round_, now):
        if self._round != round_:
            self._mask, self._round = self.group_mask(round_), round_
        return self._mask[self.positions(ids)]


class AlwaysOnline(RoundAvailability):
    """The client is always online."""

    def group_mask(self, round_):
        return np.ones(len(self.members), dtype=bool)


def client_probs(spec, n: int, rng: np.random.Generator, labels: Optional[np.ndarray]) -> np.ndarray:
    """Per-client probabilities from a spec: a number, a list (one per client of the group),
    {uniform: [lo, hi]}, {beta: [a, b]}, or 'labels' (FedSUM spec P2 / FedAWE: phi_c ~ U(0, 1)
    for the first half of the classes, U(0, 0.5) for the rest, one phi per run;
    p_i = sum_c nu_ic phi_c with nu_i the client's empirical label distribution)."""
    if isinstance(spec, (int, float)):
        return np.full(n, float(spec))
    if isinstance(spec, (list, tuple)):
        if len(spec) != n:
            raise ValueError(f"{len(spec)} probabilities for a group of {n} clients")
        return np.asarray(spec, dtype=float)
    if spec == "labels":
        if labels is None:
            raise ValueError("label-dependent probabilities need a labelled dataset")
        C = labels.shape[1]
        half = (C + 1) // 2
        phi = np.concatenate([rng.uniform(0, 1, half), rng.uniform(0, 0.5, C - half)])
        nu = labels / np.maximum(labels.sum(1, keepdims=True), 1)
        return nu @ phi
    if isinstance(spec, dict) and "uniform" in spec:
        lo, hi = spec["uniform"]
        return rng.uniform(lo, hi, n)
    if isinstance(spec, dict) and "beta" in spec:
        a, b = spec["beta"]
        return rng.beta(a, b, n)
    raise ValueError(f"unknown probability spec {spec!r}")


@dataclass
class BernoulliAvailability(RoundAvailability):
    """Client i is online in a round independently with probability p_i
    (FedSUM Case 2 / P2; p fixed, per client, or drawn once per client)."""

    p: object

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        self.probs = client_probs(self.p, len(self.members), rngs.round(0), labels)

    def group_mask(self, round_):
        return self.rngs.round(round_).random(len(self.members)) < self.probs


@dataclass
class SineAvailability(RoundAvailability):
    """FedSUM spec P3: p_i^t = max(0, p_i * (amplitude * sin(2 pi t / period + phase) + 1 - amplitude)),
    t = round - 1 (rounds count from 1), independently per client and round (p_i <= 1 and the
    factor is at most 1, so p_i^t <= 1)."""

    p: object
    amplitude: float
    period: float
    phase: float = 0.0

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        self.probs = client_probs(self.p, len(self.members), rngs.round(0), labels)

    def prob(self, round_: int) -> np.ndarray:
        t = round_ - 1
        f = self.amplitude * math.sin(2 * math.pi * t / self.period + self.phase) + 1 - self.amplitude
        return np.maximum(self.probs * f, 0.0)

    def group_mask(self, round_):
        return self.rngs.round(round_).random(len(self.members)) < self.prob(round_)


@dataclass
class MarkovAvailability(RoundAvailability):
    """Two-state on/off chain per client, one step per round: online -> offline with
    p_on_off, offline -> online with p_off_on; started from the stationary distribution
    P(online) = p_off_on / (p_on_off + p_off_on). The chain's states are kept, so rounds may
    be asked in any order (the async protocol asks each client at its own job count)."""

    p_on_off: float
    p_off_on: float

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        self.stationary = self.p_off_on / (self.p_on_off + self.p_off_on)
        self._states = [rngs.round(0).random(len(self.members)) < self.stationary]   # round 1's state

    def group_mask(self, round_):
        while len(self._states) < round_:
            u = self.rngs.round(len(self._states) + 1).random(len(self.members))
            prev = self._states[-1]
            self._states.append(np.where(prev, u >= self.p_on_off, u < self.p_off_on))
        return self._states[max(round_, 1) - 1].copy()


@dataclass
class RoundTraceAvailability(RoundAvailability):
    """Replays per-round availability from a CSV with columns round, client, available
    (a previous run's clients.csv works). Client k of the group uses the trace's k-th
    client (sorted ids, wrapping); rounds past the trace's last wrap when `repeat`, else
    the client is offline."""

    table: dict             # trace client -> set of rounds online
    last_round: int
    repeat: bool

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        ids = sorted(self.table, key=lambda s: (len(s), s))
        if not ids:
            raise ValueError("empty availability trace")
        self._rows = [self.table[ids[i % len(ids)]] for i in range(len(self.members))]

    def group_mask(self, round_):
        r = round_
        if r > self.last_round:
            if not self.repeat:
                return np.zeros(len(self.members), dtype=bool)
            r = (r - 1) % self.last_round + 1
        return np.array([r in rows for rows in self._rows], dtype=bool)


# ============================================================================ continuous time
class _Timeline(Availability):
    """Per-client alternating on/off periods, generated lazily forward in time.
    Subclasses implement `_first(c)` -> (online at 0?, first switch time) and
    `_next_duration(c, online)`; switches[c] holds increasing switch times."""

    kind = "time"

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        self._on0: dict = {}
        self._sw: dict = {}

    def _timeline(self, c, until):
        if c not in self._sw:
            on0, first = self._first(c)
            self._on0[c], self._sw[c] = on0, [first]
        sw = self._sw[c]
        while sw[-1] <= until and math.isfinite(sw[-1]):
            online_after = self._on0[c] ^ (len(sw) % 2 == 1)   # state after switch len(sw)
            sw.append(sw[-1] + self._next_duration(c, online_after))
        return sw

    def _state(self, c, now):
        sw = self._timeline(c, now)
        n = bisect.bisect_right(sw, now)            # switches at or before now
        return self._on0[c] ^ (n % 2 == 1), n, sw

    def online_mask(self, ids, round_, now):
        return np.array([self._state(int(c), now)[0] for c in ids], dtype=bool)

    def online_until(self, client, now):
        on, n, sw = self._state(client, now)
        return sw[n] if on else now

    def next_online(self, client, now):
        on, n, sw = self._state(client, now)
        return now if on else sw[n]


@dataclass
class MarkovTimeAvailability(_Timeline):
    """On and off periods ~ Exponential(mean_on), Exponential(mean_off) seconds, started
    from the stationary state (online with probability mean_on / (mean_on + mean_off);
    by memorylessness the first period is a fresh draw)."""

    mean_on: float
    mean_off: float

    def _first(self, c):
        rng = self.rngs.client(c)
        on = rng.random() < self.mean_on / (self.mean_on + self.mean_off)
        return on, rng.exponential(self.mean_on if on else self.mean_off)

    def _next_duration(self, c, online):
        return self.rngs.client(c).exponential(self.mean_on if online else self.mean_off)


@dataclass
class DiurnalAvailability(_Timeline):
    """Time is cut into slots of `slot` seconds; in the slot starting at s a client is online
    with probability p(s) = clip(mean + amplitude * sin(2 pi (s + shift_i) / period + phase), 0, 1)
    (period 86400: a 24 h day), independently per slot. `spread` shifts each client's day by a
    uniform random offset in [0, spread * period) (time zones)."""

    mean: float
    amplitude: float
    period: float
    slot: float
    phase: float = 0.0
    spread: float = 0.0
    max_scan_slots: int = 1_000_000

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        self._shift: dict = {}
        self._k: dict = {}      # client -> (slot starting its next period, state in that period)

    def prob(self, t, c):
        """Client c's probability of being online in a slot starting at t (once its day is shifted)."""
        return min(1.0, max(0.0, self.mean + self.amplitude * math.sin(
            2 * math.pi * (t + self._shift[c]) / self.period + self.phase)))

    def _slot_online(self, c, k):
        return self.rngs.client(c).random() < self.prob(k * self.slot, c)

    def _first(self, c):
        self._shift[c] = self.rngs.client(c).uniform(0, self.spread * self.period) if self.spread > 0 else 0.0
        if self.mean - self.amplitude >= 1:          # p = 1 in every slot: online for good, nothing to draw
            return True, NEVER
        on = self._slot_online(c, 0)
        k = 1
        while self._slot_online(c, k) == on:
            k += 1
            if k > self.max_scan_slots:
                return on, NEVER
        self._k[c] = (k, not on)     # slot k starts the next period, with state `not on`
        return on, k * self.slot

    def _next_duration(self, c, online):
        k, state = self._k[c]
        j = k + 1
        while self._slot_online(c, j) == state:
            j += 1
            if j - k > self.max_scan_slots:
                return NEVER
        self._k[c] = (j, not state)
        return (j - k) * self.slot


@dataclass
class TraceAvailability(Availability):
    """Replays online intervals from a CSV (see `read_interval_trace`). Client k of the group
    uses the trace's k-th client (sorted ids, wrapping). With a period the trace repeats."""

    trace: dict
    repeat: bool = True

    kind = "time"

    def bind(self, members, rngs, labels=None):
        super().bind(members, rngs, labels)
        ids = sorted(self.trace, key=lambda s: (len(s), s))
        if not ids:
            raise ValueError("empty availability trace")
        self._of = {int(c): self.trace[ids[i % len(ids)]] for i, c in enumerate(self.members)}

    def _local(self, c, now):
        starts, ends, period = self._of[c]
        if period and self.repeat:
            base = math.floor(now / period) * period
            return starts, ends, period, base, now - base
        return starts, ends, None, 0.0, now

    def _where(self, starts, ends, t):
        i = bisect.bisect_right(starts, t) - 1
        return i, (i >= 0 and t < ends[i])

    def online_mask(self, ids, round_, now):
        out = np.zeros(len(ids), dtype=bool)
        for j, c in enumerate(ids):
            starts, ends, _, _, t = self._local(int(c), now)
            out[j] = self._where(starts, ends, t)[1]
        return out

    def online_until(self, client, now):
        t = now
        for _ in range(10_000):      # an interval ending at the period joins one starting at 0
            starts, ends, period, base, local = self._local(client, t)
            i, on = self._where(starts, ends, local)
            if not on:
                return t
            t = base + ends[i]
            if not (period and self.repeat and ends[i] >= period):
                return t
        return NEVER

    def next_online(self, client, now):
        starts, ends, period, base, t = self._local(client, now)
        i, on = self._where(starts, ends, t)
        if on:
            return now
        if i + 1 < len(starts):
            return base + starts[i + 1]
        if period and self.repeat and starts:
            return base + period + starts[0]
        return NEVER
