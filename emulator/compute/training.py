"""How a client trains: the `rule` of a `LocalSpec`, at three depths (docs/local-training.md).

- (a) `LocalRule`: local SGD (momentum, weight decay, prox, correction) plus functional
  pieces (`pieces.py`: loss terms, per-sample and gradient transforms). Batched (vmap) and
  sequential paths alike.
- (b) `OptimizerRule`: any `torch.optim` optimizer steps the client's parameters, on the
  gradient of (a)'s pieces. Sequential path.
- (c) `TrainFunction`: the user's own loop, given the module, the client's batches and the
  step count. Sequential path.

Which executor paths a type may take is declared on the type (`batchable`, and
`why_sequential` for summary.json's `executor_paths`). The number of local steps always
comes from the protocol (the `TrainJob`), never from the rule.
"""
from __future__ import annotations

import types
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Optional, Sequence, Union

import torch

from .pieces import GradTransform, LossTerm, PerSampleTransform


class ClientTraining(ABC):
    """Base of every local-training rule."""

    #: whether the batched executor may stack jobs of this type under torch.func.vmap
    batchable: ClassVar[bool] = False
    #: why jobs of this type run on the sequential loop (recorded in summary.json)
    why_sequential: ClassVar[str] = ""

    @abstractmethod
    def kind(self) -> str:
        """This rule's job kind, as summary.json's `executor_paths` names it."""


def _check_pieces(where: str, pieces: tuple, base: type) -> None:
    for p in pieces:
        if not isinstance(p, base):
            raise TypeError(f"{where}: {p!r} is not a {base.__name__}")
        try:
            hash(p)
        except TypeError:
            raise TypeError(f"{where}: {type(p).__name__} must be hashable by value "
                            "(make it a @dataclass(frozen=True))") from None


@dataclass(frozen=True)
class GradientTraining(ClientTraining):
    """A rule that steps on a gradient built from functional pieces (pieces.py), in this order:
    per-sample transforms on each sample's data gradient, their mean, plus the terms'
    gradients, then the gradient transforms.

    Args:
        terms: `LossTerm`s whose gradients are added to the data gradient.
        per_sample: `PerSampleTransform`s applied to each sample's gradient before the mean.
        transforms: `GradTransform`s applied to the step's gradient, in order.
    """

    terms: tuple = field(default=(), kw_only=True)        # LossTerm, ...
    per_sample: tuple = field(default=(), kw_only=True)   # PerSampleTransform, ...
    transforms: tuple = field(default=(), kw_only=True)   # GradTransform, ...

    def __post_init__(self):
        _check_pieces("terms", self.terms, LossTerm)
        _check_pieces("per_sample", self.per_sample, PerSampleTransform)
        _check_pieces("transforms", self.transforms, GradTransform)

    @property
    def has_pieces(self) -> bool:
        return bool(self.terms or self.per_sample or self.transforms)

    def pieces_key(self) -> tuple:
        return (self.terms, self.per_sample, self.transforms)

    def _label(self, base: str) -> str:
        names = [type(p).__name__ for p in (*self.terms, *self.per_sample, *self.transforms)]
        return "+".join([base, *names])


@dataclass(frozen=True)
class LocalRule(GradientTraining):
    """How each local step updates w (PyTorch SGD semantics), g from the pieces (above):

        g  = grad loss(w; batch)  [+ pieces]             stochastic gradient
        g += weight_decay * w + prox_mu * (w - anchor) + correction
        buf = momentum * buf + g      (buf = g at the first step)
        w  -= lr[h] * (g + momentum * buf if nesterov else buf)

    Args:
        lr: the learning rate: one value, or one per local step (the last repeats).
        momentum: heavy-ball momentum (0: plain SGD).
        weight_decay: L2 coefficient added to the gradient.
        prox_mu: FedProx's proximal coefficient (the anchor is the job's start vector).
        nesterov: Nesterov momentum.
        terms: `LossTerm`s whose gradients are added to the data gradient.
        per_sample: `PerSampleTransform`s applied to each sample's gradient before the mean.
        transforms: `GradTransform`s applied to the step's gradient, in order.
    """

    lr: Union[float, tuple] = 0.01          # constant, or one value per step
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    nesterov: bool = False

    batchable: ClassVar[bool] = True

    def lr_at(self, h: int) -> float:
        if isinstance(self.lr, tuple):
            return self.lr[min(h, len(self.lr) - 1)]
        return self.lr

    def key(self) -> tuple:
        """Jobs with the same key can share one batched kernel."""
        base = (self.momentum != 0, self.weight_decay != 0, self.prox_mu != 0, self.nesterov)
        return base + self.pieces_key() if self.has_pieces else base

    def kind(self) -> str:
        return self._label("local_sgd")


@dataclass(frozen=True)
class OptimizerRule(GradientTraining):
    """`optimizer(params, **options)` (a torch.optim.Optimizer class) steps the client's
    parameters, one tensor per module parameter, fresh at every job (its state does not
    outlive the round); each step's gradient comes from the pieces as for `LocalRule`."""

    optimizer: type = torch.optim.SGD
    options: Mapping[str, Any] = field(default_factory=dict)

    why_sequential: ClassVar[str] = ("a torch.optim optimizer steps one job's own parameter tensors: "
                                     "its jobs run on the sequential loop")

    def __post_init__(self):
        super().__post_init__()
        if not (isinstance(self.optimizer, type) and issubclass(self.optimizer, torch.optim.Optimizer)):
            raise TypeError(f"optimizer: {self.optimizer!r} is not a torch.optim.Optimizer class")

    def kind(self) -> str:
        return self._label(f"optimizer:{self.optimizer.__name__}")


class TrainContext(NamedTuple):
    """What a `TrainFunction` is given besides the module, its batches and the step count."""

    start: torch.Tensor                  # the flat vector the module was loaded from
    vectors: Mapping[str, torch.Tensor]  # the spec's named vectors
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]   # mean loss of (output, y)
    generator: torch.Generator           # seeded from the job's keyed stream ("local_noise", ...)
    client: int
    round: int
    task: int


#: fn(module, batches, steps, ctx) -> mean training loss (or None)
TrainFn = Callable[[torch.nn.Module, Sequence, int, TrainContext], Optional[float]]


@dataclass(frozen=True)
class TrainFunction(ClientTraining):
    """The escape hatch: `fn(module, batches, steps, ctx)` trains `module` (loaded with the
    job's start vector, in train mode) on `batches`, a sequence of `steps` (x, y) mini-batches
    from the job's keyed stream, and returns its mean loss or None. It must read every batch
    (the protocol fixed the step count); the module's parameters afterwards are the result."""

    fn: TrainFn
    name: str = ""                       # label in summary.json (default: the function's name)

    why_sequential: ClassVar[str] = "a user training function runs one module: its jobs run on the sequential loop"

    def kind(self) -> str:
        label = self.name or (self.fn.__name__ if isinstance(self.fn, types.FunctionType) else type(self.fn).__name__)
        return f"train_fn:{label}"
