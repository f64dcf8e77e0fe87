"""What the engine tells a selector about clients (docs/selection.md): their a-priori
`Profiles` from the device models, the loss `Probes` it computes (and charges) for them, and
`round_outcomes`: what became of a round's selected clients, read from the round log and
the results the aggregation already read (never computing anything)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from devices.selectors import Profile, RoundOutcomes, Status

from ...compute.lazy import force
from ...compute.loss_probe import probe_losses
from .base import LocalWorkParams
from .cohort import Cohort


class Profiles:
    """Per-client a-priori estimates (`Profile`), computed for the whole fleet on first use
    (per device group, in NumPy) and kept: step time from the compute model; download and
    upload of this protocol's messages over the client's own link (no jitter, no contention);
    local work = the protocol's planned steps (time-driven protocols: one step)."""

    def __init__(self, proto):
        self.proto = proto
        self._fleet: Optional[tuple] = None

    def fleet(self) -> tuple:
        if self._fleet is None:
            proto, w = self.proto, self.proto.world
            task = w.tasks[0]
            ids = np.arange(w.num_clients, dtype=np.int64)
            step = np.full(len(ids), np.nan)
            for g in np.unique(w.network.group_of):
                members = np.flatnonzero(w.network.group_of == g)
                c = w.clients[int(members[0])]
                step[members] = c.compute.nominal_step_time(members, c.work.get(task.index))
            (_, nb_down), (_, nb_up) = proto.messages(task)
            zero = np.zeros(len(ids))
            down = w.network.link_times(ids, nb_down, "down", zero)
            up = w.network.link_times(ids, nb_up, "up", zero)
            steps = proto.steps_of(ids, task) if isinstance(proto.p, LocalWorkParams) else np.ones(len(ids))
            self._fleet = (step, down, step * steps, up)
        return self._fleet

    def __call__(self, ids) -> Profile:
        ids = np.asarray(ids, dtype=np.int64)
        return Profile(*(a[ids] for a in self.fleet()))


class Probes:
    """Loss probes a selector asks for in one round: the executor computes them (real compute)
    and each probed client's time is charged (docs/selection.md, "Probes"):
    t_i = download of the model + ceil(rows_i / B) steps of its a-priori step time + the
    upload of one number; the round's probe phase lasts max_i t_i, before its broadcast."""

    def __init__(self, proto, profiles: Profiles):
        self.proto, self.profiles = proto, profiles
        self.seconds, self.probed = 0.0, 0

    def start_round(self) -> None:
        self.seconds, self.probed = 0.0, 0

    def __call__(self, ids: np.ndarray, max_samples: Optional[int], round_: int) -> np.ndarray:
        w = self.proto.world
        task = w.tasks[0]
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return np.zeros(0)
        F = probe_losses(w.executor, task.index, task.algorithm.global_params(), task.buffers, ids, round_,
                         max_samples)
        n = task.client_sizes[ids].astype(np.int64)
        rows = n if max_samples is None else np.minimum(n, max_samples)
        B = task.batch_size
        batches = np.ones(len(ids)) if B is None else np.ceil(rows / B)
        step, down, _, _ = self.profiles.fleet()
        nb_report = w.network.message_bytes(1, "up")
        report = w.network.link_times(ids, nb_report, "up", np.zeros(len(ids)))
        t = down[ids] + batches * step[ids] + report
        self.seconds = max(self.seconds, float(np.max(t)))
        self.probed += len(ids)
        return F


def read_results(items, arrivals) -> dict:
    """{client: LossStats or None} of the arrivals the aggregation read (their results are
    resolved: reading them computes nothing)."""
    out = {}
    if isinstance(items, Cohort):
        if items.future is not None:
            stats = force(items.future).loss_stats or [None] * len(items)
            out = dict(zip(items.clients.tolist(), stats))
        return out
    for (cid, u, _), a in zip(items, arrivals):
        if a.vectors is not None:
            out[cid] = force(u.result).loss_stats if u.result is not None else None
    return out


def round_outcomes(t: int, log, read: dict, profiles: Profiles) -> RoundOutcomes:
    """The selected clients of round t's log, in ascending id."""
    rows = np.flatnonzero(log.selected)
    ids = log.clients()[rows]
    order = np.argsort(ids, kind="stable")
    rows, ids = rows[order], ids[order]
    n = len(ids)
    ph = log.phases[:, rows] if log.phases is not None else np.full((3, n), np.nan)
    reason = np.array([log.drop_reason.get(int(r), "") for r in rows], dtype=object)
    agg = np.array([c in read for c in ids.tolist()], dtype=bool)
    status = np.where(agg, Status.AGGREGATED, np.where(reason == "offline", Status.DROPPED, Status.STRAGGLER))
    prof = profiles(ids)
    est = np.where(np.isnan(ph), np.stack([prof.t_down, prof.t_comp, prof.t_up]), ph)
    cols = {k: np.full(n, math.nan) for k in ("loss_sum", "loss_sq", "last_sq", "ema_sq")}
    cols.update({k: np.zeros(n) for k in ("loss_n", "last_n")})
    unique = np.zeros(n, dtype=np.int64)
    for i, c in enumerate(ids.tolist()):
        s = read.get(c)
        if s is not None:
            cols["loss_n"][i], cols["loss_sum"][i], cols["loss_sq"][i] = s.n, s.s1, s.s2
            cols["last_n"][i], cols["last_sq"][i], cols["ema_sq"][i], unique[i] = s.last_n, s.last_s2, s.ema_s2, s.unique
    return RoundOutcomes(round=t, ids=ids, status=status.astype(np.int8), t_down=ph[0], t_comp=ph[1], t_up=ph[2],
                         total=est.sum(0), met_deadline=~np.isnan(ph[2]), cut=reason == "late", unique=unique, **cols)
