"""`ExchangeCodec`: a codec whose upload is an exchange over the whole aggregation, not one
message per client (docs/algorithms/compression.md 2.6: PowerSGD needs the server's average of
every client's P before any client can send its Q).

Declared, never discovered: an exchange codec is a `Codec` subclass of this base (checked with
`isinstance`); it runs only under a protocol that declares `exchanges` (the `rounds`
protocol: the second phase is an extra round trip in its virtual time,
sim/protocols/exchange.py). Its sizes come from the model's `Layout`, not from a message's
length alone, and are fixed before any job runs (`ExchangeBytes`):

- `broadcast`: what each download of the model carries besides the model (the shared state
  every client needs to form its first message: PowerSGD's Q);
- `first`: the upload (phase 1);
- `back`: the server's reply to each client whose upload it reads (phase 2, down);
- `second`: that client's second upload (phase 2, up).

A message outside the exchange (a selector's one-value loss report) travels as it is:
`wire_bytes` is `numel x bytes_per_param` and `encode` gives the values unchanged.
"""
from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass

from ..errors import ScenarioError
from .base import Codec


@dataclass(frozen=True)
class Layout:
    """What an exchange codec sees of a model's upload: the shapes of the model's parameters in
    the flat vector's order (`shapes`), the model-sized vectors one upload carries (`vectors`:
    SCAFFOLD's two) and the parameters that travel beside them as they are (`extra`: BatchNorm
    statistics, counted in the bytes, never encoded)."""

    shapes: tuple
    vectors: int = 1
    extra: int = 0

    @property
    def dim(self) -> int:
        """Parameters of one model-sized vector."""
        return sum(math.prod(s) for s in self.shapes)

    def pieces(self) -> list:
        """The flat message cut into its tensors, vector by vector: (numel, (rows, cols)) for
        a tensor of two or more dimensions (reshaped to rows = its first dimension), (numel,
        None) for a vector or a scalar."""
        one = [(math.prod(s), (s[0], math.prod(s[1:])) if len(s) >= 2 else None) for s in self.shapes]
        return one * self.vectors


@dataclass(frozen=True)
class ExchangeBytes:
    """Bytes of each message of one client's exchange, before `network.overhead_bytes`."""

    broadcast: int
    first: int
    back: int
    second: int


class ExchangeCodec(Codec):
    """A codec whose upload is an exchange over the aggregation: required `exchange_bytes`,
    `initial_state` and `exchange`."""

    changes_values = True
    relative = True

    @abstractmethod
    def exchange_bytes(self, layout: Layout, bytes_per_param: int) -> ExchangeBytes:
        """The exchange's message sizes for a model of this layout (before the overhead)."""

    @abstractmethod
    def initial_state(self, layout: Layout, rng):
        """The server's shared state before the first aggregation, drawn only from `rng` (the
        model's own keyed stream)."""

    @abstractmethod
    def exchange(self, ps: list, layout: Layout, state) -> tuple:
        """One aggregation's exchange: `ps` are the flat messages of the clients it reads (each
        an update plus its residual, in the run's dtype). Returns (the values the server decodes
        of each, like `ps`; the shared state for the next aggregation)."""

    def wire_bytes(self, numel, bytes_per_param):
        return int(numel) * int(bytes_per_param)       # a message outside the exchange, as it is

    def encode(self, v, rng):
        return v


def layout_of(task) -> Layout:
    """The layout of a model's upload (the algorithm's `up_vectors` model-sized vectors, plus
    the model's BatchNorm statistics); an algorithm whose upload is not made of model-sized
    vectors cannot be laid out (exit 2, naming network.codec.up)."""
    net, algo = task.net, task.algorithm
    layout = Layout(tuple(tuple(s) for s in net.shapes), int(algo.up_vectors), int(net.buffer_dim))
    if algo.message_numel("up") != layout.vectors * layout.dim:
        raise ScenarioError([("network.codec.up", f"an exchange codec cuts the upload into the model's tensors; "
                                                  f"algorithm {type(algo).__name__}'s upload has "
                                                  f"{algo.message_numel('up')} parameters, not {layout.vectors} "
                                                  f"x {layout.dim} (its up_vectors model-sized vectors)")])
    return layout
