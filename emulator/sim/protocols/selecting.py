"""The engine side of selection (docs/selection.md): a protocol with a `select` block makes
one `Selecting` and calls it twice a round, one line each:

    chosen = yield from self.selecting.select(t, avail)        # before the broadcast
    self.selecting.observe(t, log, items, arrivals)            # after the aggregation

`select` builds the round's `SelectionContext` (round, virtual time, k, deadline, available
ids, the fleet's data sizes, the a-priori profiles, the history, the run's `selection`
stream, the loss probe), asks the selector, checks what it returned where it crosses into
the engine (boundary/selection.py: distinct ids among the available ones; weights positive
and finite; else a `ContractError` naming the selector, the round and the contract), charges a
loss probe's time before the round goes on, and hands any aggregation weights to the
aggregation (`Protocol.selection_weights`). `observe` reads what became of the selected
clients (selection_facts.py), writes it into the history and tells the selector.
A selector that declares nothing (`observes`, `reads_loss`) costs the engine nothing more.
"""
from __future__ import annotations

import numpy as np

from devices.selectors import History, SelectionContext, Selector

from ... import registry
from ...boundary.selection import CheckedSelection
from ...errors import ScenarioError
from ...scenario.selection_params import SelectingProtocol, SelectionParams
from .selection_facts import Probes, Profiles, read_results, round_outcomes


class Selecting:
    def __init__(self, proto, spec):
        self.proto, self.world = proto, proto.world
        w = self.world
        sel = registry.get("selection", spec.model).factory(spec)
        if not isinstance(sel, Selector):
            raise ScenarioError([("protocol.select.model", f"selection model {spec.model!r} made a "
                                  f"{type(sel).__name__}, not a Selector (emulator.api)")])
        self.selector, self.model = sel, spec.model
        self.boundary = CheckedSelection(sel, spec.model)      # what select returns, checked
        self.k = spec.count(w.num_clients) if isinstance(spec, SelectionParams) else None
        self.deadline = proto.p.deadline() if isinstance(proto.p, SelectingProtocol) else None
        self.history = History()
        self.profiles = Profiles(proto)
        self.probes = Probes(proto, self.profiles)
        if sel.observes:
            w.recorder.phases = True               # round logs keep each phase's seconds
        if sel.reads_loss:
            w.executor.loss_stats = True           # training jobs take their loss statistics
        problems = sel.check(self.context(0, np.arange(w.num_clients, dtype=np.int64)))
        if problems:
            raise ScenarioError([(f"protocol.select.{f}", m) for f, m in problems])
        proto.before_record.append(self.record_probe)

    def context(self, t: int, avail) -> SelectionContext:
        w = self.world
        return SelectionContext(round=t, available=avail, num_clients=w.num_clients,
                                rng=w.streams.generator("selection"), now=w.env.now, k=self.k,
                                deadline=self.deadline, n_samples=w.tasks[0].client_sizes, history=self.history,
                                profile_fn=self.profiles, probe_fn=lambda ids, m: self.probes(ids, m, t))

    def select(self, t: int, avail):
        """Generator: round t's selection (ascending ids); a loss probe's phase first."""
        self.probes.start_round()
        got = self.selector.select(self.context(t, avail))
        ids, weights = self.boundary.choice(got, avail, t)
        self.proto.selection_weights = None if weights is None else dict(zip(ids, weights))
        if self.probes.seconds > 0:
            yield self.proto.env.timeout(self.probes.seconds)
        return ids

    def observe(self, t: int, log, items, arrivals) -> None:
        """After round t's aggregation: what became of its selected clients, into the history
        and to the selector (only for a selector that `observes`)."""
        if not self.selector.observes:
            return
        o = round_outcomes(t, log, read_results(items, arrivals), self.profiles)
        self.history.record(o)
        self.selector.observe(o)

    def record_probe(self, world, done) -> None:
        """metrics.csv of a round that probed: its probe phase's seconds and clients probed."""
        if self.probes.probed:
            done.row.update(probe_time=self.probes.seconds, probed=self.probes.probed)
