"""An algorithm's verbs, called through their boundary (docs/write-your-own.md, "What each base
requires"): the engine calls `task.checked.<verb>` and gets the algorithm's value checked, or a
`ContractError` naming the algorithm, the method, the round and the contract.

- `broadcast(t)`: a `Broadcast` whose vectors are tensors of the declared download size
  (`down_vectors` x dim) in the run's dtype;
- `local_spec`, `cohort_spec`, `background_spec`: a `LocalSpec` (None too, for `cohort_spec`)
  whose rule is a `ClientTraining` (a `LocalRule`'s numbers finite) and whose vectors are
  model-sized tensors of the run's dtype, or lazy values checked when they are computed;
- `upload`: an `Upload` (vectors a list, `meta` a dict); its vectors, once resolved
  (`uploaded`), are tensors of the declared upload size in the run's dtype;
- `aggregation`: an `Aggregation` whose weights map clients of the aggregation to finite,
  non-negative numbers that sum to `weights_total` (when it is not None and a weight is
  non-zero), and whose `client_cols` / `round_cols` are mappings; afterwards the global
  model is a model-sized tensor of the run's dtype.

A non-finite weight computed from non-finite uploads is divergence (`DivergedError`), not a
contract violation: the training blew up before the algorithm saw it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from ..algorithms.base import Aggregation, Broadcast, Upload
from ..compute.jobs import LocalSpec
from ..compute.lazy import Lazy, derived
from ..compute.training import ClientTraining, LocalRule
from ..errors import ContractError, DivergedError
from .component import describe

#: how far an aggregation's weights may be from `weights_total` (the post-run check's tolerance)
WEIGHTS_TOL = 1e-6
SPEC_VECTORS = ("start", "anchor", "correction")


class CheckedAlgorithm:
    """The verbs of one model's algorithm (`task.algorithm`), each checked where it crosses."""

    def __init__(self, task, name: str):
        self.algo = algo = task.algorithm
        self.who = describe("algorithm", algo, name)
        self.dim = int(algo.ctx.dim)
        self.dtype = algo.ctx.x0.dtype
        self.down, self.up = algo.message_numel("down"), algo.message_numel("up")

    def broken(self, method: str, t, what: str, client=None) -> ContractError:
        return ContractError(what, self.who, method, t, client=None if client is None else int(client))

    # -- down -------------------------------------------------------------------------------
    def broadcast(self, t: int) -> Broadcast:
        bc = self.algo.broadcast(t)
        if not isinstance(bc, Broadcast) or not isinstance(bc.vectors, (list, tuple)):
            raise self.broken("broadcast", t, f"returned {_kind(bc)}; broadcast(t) returns a Broadcast whose "
                                              "vectors are a list of tensors (emulator.api)")
        self.message(bc.vectors, self.down, "broadcast", t, "down_vectors")
        return bc

    def message(self, vectors, want: int, method: str, t, declared: str, client=None) -> None:
        """Tensors in the run's dtype whose sizes add up to the declared message size."""
        got = 0
        for i, v in enumerate(vectors):
            if not isinstance(v, torch.Tensor):
                raise self.broken(method, t, f"vector {i} is {_kind(v)}; a message's vectors are torch tensors", client)
            if v.dtype != self.dtype:
                raise self.broken(method, t, f"vector {i} is {v.dtype}; the run's vectors are {self.dtype} "
                                             "(executor.dtype)", client)
            got += v.numel()
        if got != want:
            raise self.broken(method, t, f"{'sent' if method == 'broadcast' else 'uploaded'} {got} parameters; "
                                         f"the algorithm declares {want} ({declared} = {want // max(self.dim, 1)} "
                                         f"x dim {self.dim})", client)

    # -- how a client trains ------------------------------------------------------------------
    def local_spec(self, client: int, t: int, received) -> LocalSpec:
        return self.spec(self.algo.local_spec(client, t, received), "local_spec", t, client)

    def background_spec(self, client: int, t: int, received) -> LocalSpec:
        return self.spec(self.algo.background_spec(client, t, received), "background_spec", t, client)

    def cohort_spec(self, t: int, received):
        spec = self.algo.cohort_spec(t, received)
        return None if spec is None else self.spec(spec, "cohort_spec", t)

    def spec(self, spec, method: str, t: int, client=None) -> LocalSpec:
        if not isinstance(spec, LocalSpec):
            raise self.broken(method, t, f"returned {_kind(spec)}; {method} returns a LocalSpec (emulator.api)",
                              client)
        rule = spec.rule
        if not isinstance(rule, ClientTraining):
            raise self.broken(method, t, f"its LocalSpec's rule is {_kind(rule)}; a rule is a LocalRule, "
                                         "OptimizerRule or TrainFunction (docs/local-training.md)", client)
        if isinstance(rule, LocalRule):
            self.rule_numbers(rule, method, t, client)
        for field in SPEC_VECTORS:
            v = getattr(spec, field)
            if v is not None or field == "start":
                setattr(spec, field, self.vector(v, f"its LocalSpec's {field}", method, t, client))
        if not isinstance(spec.vectors, dict):
            raise self.broken(method, t, f"its LocalSpec's vectors are {_kind(spec.vectors)}; a dict of "
                                         "named model-sized vectors", client)
        for k in list(spec.vectors):
            spec.vectors[k] = self.vector(spec.vectors[k], f"its LocalSpec's vectors[{k!r}]", method, t, client)
        return spec

    def rule_numbers(self, rule: LocalRule, method: str, t: int, client) -> None:
        lrs = rule.lr if isinstance(rule.lr, tuple) else (rule.lr,)
        for name, vals in (("lr", lrs), ("momentum", (rule.momentum,)), ("weight_decay", (rule.weight_decay,)),
                           ("prox_mu", (rule.prox_mu,))):
            for x in vals:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                    raise self.broken(method, t, f"its LocalRule's {name} is {x!r}; a LocalRule's numbers are "
                                                 "finite floats", client)

    def vector(self, v, what: str, method: str, t: int, client):
        """A model-sized tensor of the run's dtype; a lazy one is checked when computed."""
        if isinstance(v, Lazy):
            return derived(lambda x: self.vector(x, what, method, t, client), v)
        if not isinstance(v, torch.Tensor):
            raise self.broken(method, t, f"{what} is {_kind(v)}; a LocalSpec's vectors are torch tensors of "
                                         f"the model's {self.dim} parameters", client)
        if v.numel() != self.dim or v.dtype != self.dtype:
            raise self.broken(method, t, f"{what} has {v.numel()} values of {v.dtype}; a model vector has "
                                         f"dim = {self.dim} values of {self.dtype}", client)
        return v

    # -- up -----------------------------------------------------------------------------------
    def upload(self, client: int, t: int, result) -> Upload:
        up = self.algo.upload(client, t, result)
        if not isinstance(up, Upload) or not isinstance(up.vectors, (list, tuple)) or not isinstance(up.meta, dict):
            raise self.broken("upload", t, f"returned {_kind(up)}; upload returns an Upload whose vectors are a "
                                           "list (tensors or lazy values) and whose meta is a dict", client)
        return up

    def uploaded(self, client: int, t: int, vectors: list) -> None:
        """An upload's vectors, resolved: the declared upload size, the run's dtype."""
        self.message(vectors, self.up, "upload", t, "up_vectors", client)

    def uploaded_rows(self, t: int, numel: int) -> None:
        """A cohort's trained parameters (one row each), resolved."""
        if numel != self.up:
            raise self.broken("upload", t, f"uploaded {numel} parameters; the algorithm declares {self.up} "
                                           f"(up_vectors x dim {self.dim})")

    # -- the server's step ----------------------------------------------------------------------
    def reads(self, t: int, arrivals) -> set:
        """The clients whose uploads `aggregate` reads: some of the arrivals."""
        need = self.algo.reads(t, arrivals)
        try:
            need = {int(c) for c in need}
        except (TypeError, ValueError):
            raise self.broken("reads", t, f"returned {_kind(need)}; reads returns the client ids (integers) "
                                          "of the arrivals whose vectors aggregate reads") from None
        stray = need - {a.client for a in arrivals}
        if stray:
            raise self.broken("reads", t, f"named client {min(stray)}, which did not arrive; reads picks among "
                                          "the arrivals")
        return need

    def aggregate(self, t: int, arrivals, log) -> Aggregation:
        return self.aggregation(self.algo.aggregate(t, arrivals), "aggregate", t, log, arrivals)

    def aggregate_rows(self, t: int, rows, log) -> Aggregation:
        return self.aggregation(self.algo.aggregate_rows(t, rows), "aggregate_rows", t, log, rows)

    def aggregation(self, agg, method: str, t: int, log, arrivals) -> Aggregation:
        if not isinstance(agg, Aggregation):
            raise self.broken(method, t, f"returned {_kind(agg)}; {method} returns an Aggregation "
                                         "(emulator.api): the clients' weights and any columns")
        for field in ("weights", "client_cols", "round_cols"):
            if not isinstance(getattr(agg, field), Mapping):
                raise self.broken(method, t, f"its Aggregation's {field} is {_kind(getattr(agg, field))}; "
                                             "a mapping")
        if agg.weights:
            self.weights(agg.weights, method, t, log, arrivals)
        x = self.algo.global_params()
        if not isinstance(x, torch.Tensor) or x.numel() != self.dim or x.dtype != self.dtype:
            raise self.broken(method, t, f"left the global model as {_kind(x)}"
                                         f"{f' of {x.numel()} {x.dtype} values' if isinstance(x, torch.Tensor) else ''}"
                                         f"; global_params() is a tensor of dim = {self.dim} values of {self.dtype}")
        return agg

    def weights(self, weights: Mapping, method: str, t: int, log, arrivals) -> None:
        """Finite, non-negative numbers for clients of this aggregation, summing to
        `weights_total` (plain Python: most aggregations weigh a handful of clients)."""
        try:
            ids = [int(c) for c in weights]
            w = [float(v) for v in weights.values()]
        except (TypeError, ValueError) as e:
            raise self.broken(method, t, f"gave weights {_preview(weights)} ({e}); weights map client ids "
                                         "(integers) to numbers") from None
        stray = _stray(ids, log)
        if stray is not None:
            raise self.broken(method, t, f"gave a weight to client {stray}, which is not in this aggregation; "
                                         "weights are for the clients it aggregated")
        for i, x in enumerate(w):
            if not 0.0 <= x < math.inf:          # NaN, inf or negative
                if math.isfinite(x):
                    raise self.broken(method, t, f"gave client {ids[i]} the weight {x:.9g}; weights are "
                                                 "non-negative")
                if not _inputs_finite(arrivals):
                    raise DivergedError(f"diverged at round {t}: clients uploaded non-finite parameters "
                                        "(lower algorithm.lr?)")
                raise self.broken(method, t, f"gave client {ids[i]} the weight {x}; weights are finite and "
                                             "non-negative")
        total = self.algo.weights_total
        if total is not None and any(w) and abs(math.fsum(w) - total) > WEIGHTS_TOL:
            raise self.broken(method, t, f"gave weights summing to {math.fsum(w):.9g}; this algorithm's weights "
                                         f"sum to weights_total = {total:g} (declare weights_total = None "
                                         "if they are not a weighted mean)")


def _inputs_finite(arrivals) -> bool:
    """Whether every upload the aggregation read is finite (else its weights may be NaN by
    divergence, not by the algorithm's fault)."""
    vecs = getattr(arrivals, "params", None)
    if vecs is None:
        vecs = [v for a in arrivals if a.vectors is not None for v in a.vectors]
    return all(bool(torch.isfinite(v).all()) for v in vecs if isinstance(v, torch.Tensor))


def _stray(ids: list, log):
    """A client id without a row in this aggregation's log, or None."""
    n = log.num_clients
    for c in ids:
        if not 0 <= c < n:
            return c
    if log.ids is None:                      # a row for every client
        return None
    try:
        log.positions(ids)
    except KeyError as e:
        return int(e.args[0])
    return None


def _kind(x) -> str:
    if x is None:
        return "None"
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, Lazy):
        return f"a lazy value ({type(x).__name__})"
    return f"a {type(x).__name__}"


def _preview(d: Mapping) -> str:
    items = list(d.items())[:3]
    more = ", ..." if len(d) > 3 else ""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in items) + more + "}"
