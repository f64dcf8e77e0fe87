"""A protocol's aggregation step (docs/engine.md, "After an aggregation"): resolve the uploads the
algorithm reads (lazily: the others are never computed), call the algorithm, record its
weights and columns; then `finish_aggregation` builds the metrics row and runs what follows
an aggregation as callbacks `(world, Aggregated)`: the protocol's `before_record` list
(divergence check, evaluation when due: they may add columns), the row is appended (a
diverged run stops here), then its `after_record` list (keep the last good model, report
progress). A protocol or a user adds a callback to either list. A mixin of `Protocol`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ...algorithms.base import Arrival, Rows
from ...codecs.encoding import ExchangeEncoding, UploadEncoding
from ...codecs.exchange import ExchangeCodec, layout_of
from ...compute.lazy import Lazy, force, resolve
from ...errors import DivergedError
from .cohort import Cohort


class Aggregating:
    """Aggregation and what follows it, a mixin of `Protocol`."""

    def aggregate(self, task, t: int, items: list, log, round_of=None) -> tuple:
        """Two phases: the algorithm first says which uploads it will read (`reads`: DMS
        filters here), only those are resolved (batched, with any lazy metadata such as
        probes); then it aggregates and its result (weights, per-client columns) is recorded.
        Unread uploads keep `vectors=None`: their training is never computed.
        `items` are (client, upload, steps); the upload's meta may carry `n_samples`
        (this round's data size) and `tau` (iterations). Returns (arrivals, Aggregation)."""
        arrivals, commit = self.read_uploads(task, t, items, round_of)
        return arrivals, commit(log)

    def read_uploads(self, task, t: int, items, round_of=None) -> tuple:
        """`aggregate`'s first half: the uploads the algorithm reads, resolved and decoded as
        the server sees them. Returns (arrivals, commit): `commit(log)` calls the algorithm and
        records its result, returning the Aggregation. A protocol that spends virtual time
        between the two (an exchange codec's second phase: protocols/exchange.py) commits only
        once that time has passed, so a run the time budget ends in between aggregates nothing."""
        if isinstance(items, Cohort):            # a round's cohort (protocols/cohort.py)
            return self.read_cohort(task, t, items)
        sw = self.selection_weights          # the round's selection weights (protocols/selecting.py), or None
        arrivals = [Arrival(client=cid, round=t if round_of is None else round_of(cid), vectors=None,
                            n_samples=int(u.meta.get("n_samples", task.client_sizes[cid])), steps=steps,
                            train_loss=float("nan"), meta=u.meta, selection_weight=None if sw is None else sw[cid])
                    for cid, u, steps in items]
        need = task.checked.reads(t, arrivals) if arrivals else set()
        lazy_meta = [v for _, u, _ in items for v in u.meta.values() if isinstance(v, Lazy)]
        read = [(a, u) for a, (_, u, _) in zip(arrivals, items) if a.client in need]
        enc = self.upload_encoding(task)
        starts = None if enc is None else [enc.start_of(u.result, a.client, t) for a, u in read]   # before the jobs run
        resolve([v for _, u in read for v in u.vectors] + [u.result for _, u in read if u.result is not None]
                + lazy_meta)
        for a, u in read:
            a.vectors = [force(v) for v in u.vectors]
            task.checked.uploaded(a.client, t, a.vectors)       # the declared size and dtype (boundary/)
            if u.result is not None:
                a.train_loss = force(u.result).loss_mean
        if enc is not None:              # as the server decodes them (docs/algorithms/compression.md 1.3)
            seen = enc.encode_all(t, [(a.client, a.vectors, s) for (a, _), s in zip(read, starts)])
            for (a, _), vectors in zip(read, seen):             # t: this merge, unique per upload
                a.vectors = vectors
        for a in arrivals:
            a.meta = {k: force(v) for k, v in a.meta.items()}

        def commit(log):
            agg = self.with_codec_error(enc, task.checked.aggregate(t, arrivals, log))
            self.record_aggregation(log, agg)
            if task.buffers is not None:
                self.average_buffers(task, agg, read)
            return agg
        return arrivals, commit

    def read_cohort(self, task, t: int, cohort) -> tuple:
        """`read_uploads` of a cohort (every arrival read, as `cohort_spec` promises): its
        results go to the algorithm as columns (`Rows`), with no object per client. Returns
        (rows, commit)."""
        enc = self.upload_encoding(task)
        if cohort.future is None:
            res_params, loss = [], np.zeros(0)
        else:
            res = force(cohort.future)
            res_params, loss = res.params, res.loss_mean
            task.checked.uploaded_rows(t, res_params[0].numel())    # one job's spec: every row alike
            if enc is not None:                  # as the server decodes them (docs/algorithms/compression.md 1.3)
                entries = [(c, [p], cohort.start) for c, p in zip(cohort.clients.tolist(), res_params)]
                res_params = [vectors[0] for vectors in enc.encode_all(t, entries)]
        sw = self.selection_weights
        rows = Rows(clients=cohort.clients, n_samples=task.client_sizes[cohort.clients].astype(np.int64),
                    steps=cohort.steps, params=res_params, train_loss=loss,
                    selection_weight=None if sw is None else np.array([sw[c] for c in cohort.clients.tolist()]))

        def commit(log):
            agg = self.with_codec_error(enc, task.checked.aggregate_rows(t, rows, log))
            self.record_aggregation(log, agg)
            return agg
        return rows, commit

    def upload_encoding(self, task):
        """The model's upload codec where it changes values (None: it does not; built once)."""
        if task.index not in self._encodings:
            w = self.world
            codec, overhead = w.network.codecs["up"], w.network.overhead
            if isinstance(codec, ExchangeCodec):            # compression.md 2.6
                enc = ExchangeEncoding(codec, task.algorithm, w.streams, task.index, layout_of(task), overhead)
            else:
                enc = UploadEncoding(codec, task.algorithm, w.streams, task.index, overhead) \
                    if codec.changes_values else None
            self._encodings[task.index] = enc
        return self._encodings[task.index]

    @staticmethod
    def with_codec_error(enc, agg):
        """The aggregation with metrics.csv's `codec_error` and, for an entropy-coded codec,
        `bytes_up_entropy` in metrics.csv and clients.csv (compression.md 3), when a codec changes values."""
        if enc is not None:
            rows, clients = enc.take_columns()
            agg.round_cols = {**agg.round_cols, **rows}
            agg.client_cols = {**agg.client_cols, **clients}
        return agg

    @staticmethod
    def record_aggregation(log, agg) -> None:
        """clients.csv: each client's weight and the algorithm's per-client columns."""
        log.aggregation = True
        if agg.weights:
            log.weight[log.positions(np.fromiter(agg.weights, np.int64, len(agg.weights)))] = \
                np.fromiter(agg.weights.values(), np.float64, len(agg.weights))
        for col, vals in agg.client_cols.items():
            for cid, v in vals.items():
                if isinstance(v, str):
                    log.set_extra(col, cid, v, dtype=object, default="")
                else:
                    log.set_extra(col, cid, v)

    @staticmethod
    def average_buffers(task, agg, read) -> None:
        """BatchNorm running statistics follow the clients' FedAvg-style, with the
        aggregation's own weights: b <- b + sum_i w_i (b_i - b). Weights summing to 1 give
        the weighted mean sum_i w_i b_i (FedAvg, FedProx, DMS); FedAsync's mixing weight
        alpha_k gives (1 - alpha_k) b + alpha_k b_i. Clients of weight 0 do not count."""
        b = task.buffers
        step = torch.zeros_like(b)
        for a, u in read:
            wgt = agg.weights.get(a.client, 0.0)
            if wgt and u.result is not None:
                bi = force(u.result).buffers
                if bi is not None:
                    step += wgt * (bi.to(b) - b)
        task.buffers = b + step

    def finish_aggregation(self, task, t: int, arrivals: list, log, extra: Optional[dict] = None) -> dict:
        """After an aggregation: build the metrics row, run the `before_record` callbacks
        (divergence check, evaluation when due; each may add columns), append the row, stop
        a diverged run, then run the `after_record` callbacks (keep the model as the last
        good one, report progress). Returns the row."""
        w = self.world
        w.rounds_done = max(w.rounds_done, t)
        row, train_loss = self.metrics_row(task, t, arrivals, log, extra)
        done = Aggregated(task, t, row, train_loss, log=log)
        for callback in self.before_record:
            callback(w, done)
        w.recorder.metric(row)
        log.round_time = row.get("round_time")
        if done.diverged is not None:
            raise done.diverged
        for callback in self.after_record:
            callback(w, done)
        return row

    def row_bytes(self, task, log) -> dict:
        """The bytes an aggregation's metrics row counts, each byte in one row, final when
        the row is written (docs/engine.md, "Bytes"): its log's recorded rows, the transfers
        that ended of its work still running (FedUMF's background work: `OpenSheets.report`),
        and the model's bytes that ended after their own round's row was written."""
        u, d = self.open_sheets.report(log)
        up, down = int(log.bytes_up.sum()) + u, int(log.bytes_down.sum()) + d
        late = self.world.recorder.take_late(task.index)
        log.late_in += late
        return {"bytes_up": up + late[0], "bytes_down": down + late[1]}

    def metrics_row(self, task, t: int, arrivals, log, extra: Optional[dict]) -> tuple:
        """The aggregation's metrics row (before evaluation) and its train loss (None: no
        arrival reported one)."""
        if isinstance(arrivals, Rows):
            ok = (arrivals.steps > 0) & ~np.isnan(arrivals.train_loss)
            losses, nw = arrivals.train_loss[ok], arrivals.n_samples[ok].astype(float)
        else:
            losses = [a.train_loss for a in arrivals if a.steps > 0 and not math.isnan(a.train_loss)]
            nw = np.array([a.n_samples for a in arrivals if a.steps > 0 and not math.isnan(a.train_loss)], float)
        train_loss = float(np.dot(nw, losses) / nw.sum()) if len(losses) else float("nan")
        row = {"round": t, "model": task.index, "virtual_time": self.env.now, "wall_time": self.world.wall(),
               "participants": len(arrivals), "selected": int(log.selected.sum()),
               "dropped": int(log.dropped.sum()),
               **self.row_bytes(task, log), "train_loss": train_loss}
        if extra:
            row.update(extra)
        return row, (train_loss if len(losses) else None)


@dataclass
class Aggregated:
    """What an after-aggregation callback sees: the model's task, the round, the metrics row
    being built (a `before_record` callback may add columns), the round's train loss (None:
    no arrival reported one), the divergence found (None: none) and the round's log."""

    task: object
    round: int
    row: dict
    train_loss: Optional[float]
    diverged: Optional[DivergedError] = None
    log: object = None


def check_divergence(world, done: Aggregated) -> None:
    """A model or train loss that is no longer finite stops the run (after its row is kept)."""
    try:
        world.check_finite(done.task, done.round, done.train_loss)
    except DivergedError as e:
        done.diverged = e


def evaluate_when_due(world, done: Aggregated) -> None:
    """Evaluate every `run.eval_every` rounds (or at the first aggregation at or after each
    point of the `eval_every_seconds` grid) and at the last round, unless diverged; the
    clients' own evaluation (`evaluation:`) goes with the global one."""
    run, t, now = world.sc.run, done.round, world.env.now
    last = run.rounds is not None and t >= run.rounds
    due = t % run.eval_every == 0
    if run.eval_every_seconds is not None:     # a virtual-time grid instead of a round count
        # grid point k x eval_every_seconds, computed from k (a running sum would drift)
        due = now >= world.next_eval_k * run.eval_every_seconds
        while world.next_eval_k * run.eval_every_seconds <= now:
            world.next_eval_k += 1
    if done.diverged is None and (due or last):
        done.row.update(world.evaluate(done.task))
        done.row.update(world.evaluate_clients(done.task, done.round, done.log))


def keep_last_good(world, done: Aggregated) -> None:
    """The model is finite: keep it as the last good one (what a later divergence leaves)."""
    world.keep_last_good(done.task)


def report_progress(world, done: Aggregated) -> None:
    """The run's progress callback, if any, with the recorded row."""
    if world.progress is not None:
        world.progress(done.row)


#: the callbacks a protocol runs after each aggregation (its `before_record` / `after_record`
#: lists start as copies of these; a protocol or a user may add its own)
BEFORE_RECORD = (check_divergence, evaluate_when_due)
AFTER_RECORD = (keep_last_good, report_progress)
