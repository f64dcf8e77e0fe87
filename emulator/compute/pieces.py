"""Functional pieces of local training (docs/local-training.md, depth a).

A piece is written for ONE job and one local step; the executor runs it as it is on the
sequential path and under `torch.func.vmap` across jobs on the batched path, so it must be
a pure function of its tensor arguments (no in-place writes to them, no Python branching on
their values, no random draws of its own):

- `LossTerm`: an extra term of the local objective, `term(w, ctx) -> scalar`; its gradient
  is taken with `torch.func.grad` and added to the data gradient (FedProx, FedDyn, MOON).
- `PerSampleTransform`: maps each sample's gradient of the data loss, `t(g_i, ctx) -> g_i`,
  before the mini-batch mean (DP-SGD's per-sample clipping).
- `GradTransform`: maps the mini-batch gradient, `t(g, ctx) -> g` (clipping, noise). One that
  declares `needs_noise = True` reads `ctx.noise`, a standard normal vector drawn for it from
  the job's keyed stream `("local_noise", client, round, model, tag)`: the same draws
  whichever executor runs the job and in whatever order.

Pieces are frozen dataclasses: equal pieces (by value) let jobs share one batched kernel.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Mapping, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch.func import functional_call

if TYPE_CHECKING:
    from .flat import FlatModel


class FunctionalModel:
    """The job's model as functions of a flat parameter vector (what a term may call)."""

    def __init__(self, net: "FlatModel"):
        self._net = net

    def forward(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The module's output on `x` at parameters `w` (any vector: the received model too)."""
        if self._net.has_buffers:
            raise ValueError("a loss term cannot run a model with BatchNorm buffers (use an optimizer "
                             "rule or a train function)")
        net = self._net
        views = {n: p.reshape(s) for n, s, p in zip(net.names, net.shapes, torch.split(w, net.numels))}
        return functional_call(net.module, views, (x,))

    def sample_losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample losses of a batch's outputs (the model's own loss)."""
        if self._net.loss == "direct":     # the model returns per-sample losses
            return out.reshape(out.shape[0], -1).mean(1) if out.dim() > 1 else out
        return F.cross_entropy(out, y, reduction="none")


class StepContext(NamedTuple):
    """What a piece may read at one local step of one job."""

    start: torch.Tensor                  # [dim] the vector training started from (the received model)
    vectors: Mapping[str, torch.Tensor]  # the spec's named vectors (client state, ...), each [dim]
    step: torch.Tensor                   # 0-d: the local step, from 0
    batch_size: torch.Tensor             # 0-d (float): samples in this step's mini-batch
    x: torch.Tensor                      # the mini-batch (on the batched path padded to the
    y: torch.Tensor                      #   group's largest batch; padding has weight 0)
    weight: torch.Tensor                 # [B] 1/batch_size per real sample, 0 for padding
    model: FunctionalModel
    noise: Optional[torch.Tensor] = None  # [dim] N(0, I), for a GradTransform with needs_noise


class LossTerm(ABC):
    """An extra term of the local objective: `term(w, ctx)` is a scalar added to the
    mini-batch loss (a mean over samples must use `ctx.weight`, which ignores padding)."""

    @abstractmethod
    def __call__(self, w: torch.Tensor, ctx: StepContext) -> torch.Tensor: ...


class PerSampleTransform(ABC):
    """Maps one sample's gradient of the data loss (`[dim]`) before the mini-batch mean.
    Asking for one makes the executor compute per-sample gradients (vmap over samples)."""

    @abstractmethod
    def __call__(self, g: torch.Tensor, ctx: StepContext) -> torch.Tensor: ...


class GradTransform(ABC):
    """Maps the mini-batch gradient (`[dim]`: data mean plus terms) before the rule's step."""

    #: read `ctx.noise` (one standard normal vector per step, from the job's keyed stream)
    needs_noise: ClassVar[bool] = False

    @abstractmethod
    def __call__(self, g: torch.Tensor, ctx: StepContext) -> torch.Tensor: ...


# ------------------------------------------------------------------- building blocks
def clip_to(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """g scaled to norm <= max_norm (g / max(1, |g| / C)), vmap-safe (no branch on values)."""
    return g * torch.clamp(max_norm / (g.norm() + 1e-12), max=1.0)


@dataclass(frozen=True)
class ProxTerm(LossTerm):
    """mu/2 |w - start|^2 (FedProx's proximal term, as a loss term)."""

    mu: float

    def __call__(self, w, ctx):
        return 0.5 * self.mu * (w - ctx.start).pow(2).sum()


@dataclass(frozen=True)
class ClipPerSample(PerSampleTransform):
    """Each sample's gradient clipped to norm <= max_norm (DP-SGD, Abadi et al. 2016)."""

    max_norm: float

    def __call__(self, g, ctx):
        return clip_to(g, self.max_norm)


@dataclass(frozen=True)
class ClipNorm(GradTransform):
    """The mini-batch gradient clipped to norm <= max_norm (torch's clip_grad_norm_ on one vector)."""

    max_norm: float

    def __call__(self, g, ctx):
        return clip_to(g, self.max_norm)


@dataclass(frozen=True)
class GaussianNoise(GradTransform):
    """g + std * z, z ~ N(0, I) from the job's keyed noise stream."""

    std: float
    needs_noise: ClassVar[bool] = True

    def __call__(self, g, ctx):
        return g + self.std * ctx.noise


@dataclass(frozen=True)
class DPGaussianNoise(GradTransform):
    """DP-SGD's noise (docs/algorithms/dp.md section 4): N(0, (noise_multiplier C)^2) on the sum
    of the per-sample gradients clipped to C, i.e. g + noise_multiplier C / |B| z on their mean."""

    noise_multiplier: float
    clip: float
    needs_noise: ClassVar[bool] = True

    def __call__(self, g, ctx):
        return g + (self.noise_multiplier * self.clip / ctx.batch_size) * ctx.noise
