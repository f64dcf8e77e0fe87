"""The selection blocks (`protocol.select`): each selector's parameter model, its factory,
and what a selector declares it needs of the protocol (docs/selection.md).

- `SelectionParams`, the base of a selection block that declares needs: `count(n)` (its k),
  `needs_deadline()`, `probes()` (a loss probe charged before the round), `gives_weights()`
  (aggregation weights the algorithm must honour). A plugin's plain `Params` needs nothing.
- `SelectingProtocol`, declared by a protocol's parameters with a `select` block: the round's
  `deadline()` and whether a probe phase can be charged before a round (`probe_phase`).
- `selection_problems(sc)`: the scenario check of those needs (exit 2, nothing written).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Optional, Union

from pydantic import Field, field_validator, model_validator

from devices import selectors as sel

from .. import registry
from ..registry import extension_point, register
from .quantities import FiniteParams


extension_point("selection", sel.Selector)       # a registered selector class extends it (devices/selectors.py)

class SelectionParams(FiniteParams):
    """Base of a selection block whose selector declares what it needs of the protocol."""

    def count(self, n: int) -> Optional[int]:
        """Clients asked per round in a fleet of n (the context's k); None: the selector decides."""
        return None

    def needs_deadline(self) -> bool:
        return False

    def probes(self) -> bool:
        return False

    def gives_weights(self) -> bool:
        return False


class SelectingProtocol(ABC):
    """Declared by protocol parameters that have a `select` block."""

    #: a selector's loss probe can be charged as a phase before a round
    probe_phase: ClassVar[bool] = True

    @abstractmethod
    def deadline(self) -> Optional[float]:
        """Seconds after a round's start by which updates must arrive (None: no deadline)."""


def selection_problems(sc) -> list:
    """The needs of `protocol.select` against the protocol and the algorithm, each (YAML path,
    message)."""
    p = sc.protocol
    if not isinstance(p, SelectingProtocol) or not isinstance(p.select, SelectionParams):
        return []
    s, out = p.select, []
    if s.needs_deadline() and p.deadline() is None:
        out.append(("protocol.wait", f"selection model {s.model!r} admits clients against a round deadline; set "
                                     "protocol.wait: {mode: deadline, seconds: ...} (or use the intervals protocol)"))
    if s.probes() and not p.probe_phase:
        out.append(("protocol.select.variant", f"the {p.name} protocol cannot charge a loss probe before its "
                                               "rounds; use variant: rpow_d (no probe) or protocol rounds"))
    if s.gives_weights():
        algo = registry.get("algorithm", sc.algorithm.name).factory
        if not algo.selection_weights:
            out.append(("protocol.select.weights", f"algorithm {sc.algorithm.name!r} does not weigh updates by the "
                                                   "selection's weights; use weights: samples, or an algorithm that "
                                                   "declares selection_weights (fedavg, fedprox, fedavg_active)"))
    return out


# ============================================================================ count
class KOrFraction(SelectionParams):
    k: Optional[int] = Field(None, ge=1, description="clients per round")
    fraction: Optional[float] = Field(None, gt=0, le=1, description="or a fraction of all clients (k = ceil(fraction*N))")

    @model_validator(mode="after")
    def _one(self):
        if (self.k is None) == (self.fraction is None):
            raise ValueError("give exactly one of k or fraction")
        return self

    def count(self, n):
        return sel.count_of(self.k, self.fraction, n)

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.k is not None and self.k > fleet.clients:
            out.append((f"{at}.k", f"{self.k} clients per round, but clients.count is {fleet.clients}"))
        return out


# ============================================================================ without memory
class UniformSelectParams(KOrFraction):
    pass


register("selection", "uniform", UniformSelectParams, "k available clients uniformly without replacement",
         lambda p, ctx=None: sel.UniformSelection(k=p.k, fraction=p.fraction))


class AllSelectParams(SelectionParams):
    pass


register("selection", "all", AllSelectParams, "every available client", lambda p, ctx=None: sel.AllSelection())


class CyclicParams(KOrFraction):
    pass


register("selection", "cyclic", CyclicParams, "fixed order, the next block of k clients each round (wrapping)",
         lambda p, ctx=None: sel.CyclicSelection(k=p.k, fraction=p.fraction))
register("selection", "reshuffled_cyclic", CyclicParams,
         "a new random order every epoch of ceil(N/k) rounds, one block per round",
         lambda p, ctx=None: sel.ReshuffledCyclicSelection(k=p.k, fraction=p.fraction))


class BiasedParams(SelectionParams):
    p: Optional[Union[float, list[float]]] = Field(None, description="probability per client (one number or a list of N)")
    start: Optional[float] = Field(None, ge=0, le=1, description="or a staircase: p_i = max(floor, start - step*floor(i/every))")
    step: float = Field(0.0, ge=0, description="staircase step")
    every: int = Field(1, ge=1, description="clients per stair")
    floor: float = Field(0.0, ge=0, le=1, description="smallest probability")

    @model_validator(mode="after")
    def _one(self):
        if (self.p is None) == (self.start is None):
            raise ValueError("give exactly one of p or start (staircase)")
        return self

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if isinstance(self.p, list) and len(self.p) != fleet.clients:
            out.append((f"{at}.p", f"{len(self.p)} probabilities for clients.count = {fleet.clients} clients"))
        return out


register("selection", "biased", BiasedParams,
         "each available client independently with its own probability (FedSUM App. H.8 staircase)",
         lambda p, ctx=None: sel.BiasedSelection(p=p.p, start=p.start, step=p.step, every=p.every, floor=p.floor))


class SequenceParams(SelectionParams):
    sets: list[list[int]] = Field(min_length=1, description="client ids selected in round 1, 2, ... (0-based ids; [] = nobody)")
    repeat: bool = Field(True, description="start over after the last set (else nobody is selected)")

    @field_validator("sets")
    @classmethod
    def _ids(cls, v):
        if any(c < 0 for s in v for c in s):
            raise ValueError("client ids are >= 0")
        return v

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if any(c >= fleet.clients for s in self.sets for c in s):
            out.append((f"{at}.sets", f"client ids must be below clients.count = {fleet.clients}"))
        return out


register("selection", "sequence", SequenceParams, "a given sequence of client sets, one per round (replay, hand checks)",
         lambda p, ctx=None: sel.SequenceSelection(sets=p.sets, repeat=p.repeat))

from . import selection_learning  # noqa: E402,F401  (registers oort, tifl, fedcs, power_of_choice)
