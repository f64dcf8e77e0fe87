"""One model = one flat parameter vector (docs/architecture.md section 3, "Parameters").

`FlatModel` maps a flat vector to the module's named parameters (as views, so autograd
through them yields the flat gradient) and runs the module functionally on it.

Models with BatchNorm keep their floating-point buffers (running mean and variance) in a
second flat vector, outside the parameters: algorithms never see it (no correction, decay
or control variate touches running statistics). Training runs the module in train mode on
a copy of the round's buffers, which BatchNorm updates in place; evaluation runs it in eval
mode on the global buffers. How the global buffers follow the clients' is the protocol's
business (FedAvg-style averaging, `sim/protocols/base.py`). Integer buffers
(`num_batches_tracked`) are not tracked: they only matter for BatchNorm(momentum=None).

A training step's gradient (`step_loss_and_grad`) runs on a second copy of the module whose
parameters are views of one flat vector: the step copies w into it and calls the module,
without `functional_call`'s per-call swap of every parameter (a few % of a small CNN's step,
all of it under the GIL, which two worker threads share). Same operations, same bits.
"""
from __future__ import annotations

import copy
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from ..workloads.models import ClosedFormLoss, loss_kind


def _layout(named):
    names, shapes, numels = [], [], []
    for n, t in named:
        names.append(n)
        shapes.append(tuple(t.shape))
        numels.append(t.numel())
    return names, shapes, numels


class FlatModel:
    def __init__(self, module: nn.Module, device: torch.device, dtype: torch.dtype):
        self.module = module.to(device=device, dtype=dtype)
        self.device, self.dtype = device, dtype
        self.names, self.shapes, self.numels = _layout(self.module.named_parameters())
        self.dim = int(sum(self.numels))
        float_buffers = [(n, b) for n, b in self.module.named_buffers() if b.is_floating_point()]
        self.buffer_names, self.buffer_shapes, self.buffer_numels = _layout(float_buffers)
        self.buffer_dim = int(sum(self.buffer_numels))
        self._b0 = (torch.cat([b.detach().reshape(-1) for _, b in float_buffers]).clone()
                    if float_buffers else None)
        self.loss = loss_kind(module)
        # the module's own closed-form gradient replaces autograd (not with BatchNorm buffers)
        self.closed_form = isinstance(module, ClosedFormLoss) and not self.has_buffers
        self._bound = None            # (module copy, its flat parameter vector, its parameters)

    def replica(self) -> "FlatModel":
        """The same model on its own module (for a second thread: `functional_call` swaps a
        module's parameters while it runs)."""
        twin = copy.copy(self)
        twin.module = copy.deepcopy(self.module)
        twin._bound = None
        return twin

    @property
    def has_buffers(self) -> bool:
        return self.buffer_dim > 0

    def initial_vector(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def initial_buffers(self) -> Optional[torch.Tensor]:
        """The module's float buffers at construction (None: it has none)."""
        return None if self._b0 is None else self._b0.clone()

    @staticmethod
    def _views(v, names, shapes, numels) -> dict:
        # one split (its backward is one concatenation), not a slice per tensor (each slice's
        # backward writes a full-size gradient: 15x slower on ResNet-18's 62 tensors)
        return {n: piece.view(s) for n, s, piece in zip(names, shapes, torch.split(v, numels))}

    def views(self, w: torch.Tensor) -> dict:
        return self._views(w, self.names, self.shapes, self.numels)

    def forward(self, w: torch.Tensor, x: torch.Tensor, buffers: Optional[torch.Tensor] = None,
                train: bool = False) -> torch.Tensor:
        """The module's output at parameters w. With buffers (BatchNorm): train mode normalises
        with batch statistics and updates `buffers` in place; eval mode uses them."""
        tensors = self.views(w)
        if self.has_buffers:
            if buffers is None:
                raise ValueError("this model has BatchNorm buffers: pass them to forward")
            tensors.update(self._views(buffers, self.buffer_names, self.buffer_shapes, self.buffer_numels))
            self.module.train(train)
        return functional_call(self.module, tensors, (x,))

    def loss_and_grad(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                      buffers: Optional[torch.Tensor] = None, samples: bool = False) -> tuple:
        """(mean loss, its gradient at w) of a training batch: the module's own closed form
        when it declares one (`ClosedFormLoss`: the quadratic), else autograd. With `samples`,
        also the batch's per-sample losses (detached; from the same forward, or, for a closed
        form, from one forward at w)."""
        if self.closed_form:
            with torch.no_grad():
                loss, g = self.module.loss_and_grad(w, x)
                return (loss, g, self.sample_losses(self.forward(w, x), y)) if samples else (loss, g)
        w = w.detach().requires_grad_(True)
        out = self.forward(w, x, buffers, train=True)
        loss = self.mean_loss(out, y)
        (g,) = torch.autograd.grad(loss, w)
        return (loss.detach(), g, self.sample_losses(out.detach(), y)) if samples else (loss.detach(), g)

    def step_loss_and_grad(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, samples: bool = False) -> tuple:
        """`loss_and_grad` of a local step of a model without buffers, on the bound copy (see
        the module doc); the same bits. Models with buffers or a closed form take `loss_and_grad`."""
        if self.closed_form or self.has_buffers:
            return self.loss_and_grad(w, x, y, samples=samples)
        module, flat, params = self._bound or self._bind()
        if module.training != self.module.training:
            module.train(self.module.training)
        with torch.no_grad():
            flat.copy_(w)
        out = module(x)
        loss = self.mean_loss(out, y)
        grads = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
        g = torch.cat([g.reshape(-1) for g in grads])
        return (loss.detach(), g, self.sample_losses(out.detach(), y)) if samples else (loss.detach(), g)

    def _bind(self) -> tuple:
        """A copy of the module whose parameters are views of one flat vector (made on first use)."""
        module = copy.deepcopy(self.module)
        flat = torch.zeros(self.dim, dtype=self.dtype, device=self.device)
        params = [p for _, p in module.named_parameters()]
        for p, piece, shape in zip(params, torch.split(flat, self.numels), self.shapes):
            p.data = piece.view(shape)
            p.requires_grad_(True)       # as every piece of w in `loss_and_grad`
        self._bound = (module, flat, params)
        return self._bound

    def batch_loss(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                   buffers: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Mean loss of a training batch (train mode: BatchNorm updates `buffers`)."""
        return self.mean_loss(self.forward(w, x, buffers, train=True), y)

    def sample_losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample losses from the module's output (mean_loss is their mean)."""
        if self.loss == "direct":
            return out.reshape(out.shape[0], -1).mean(1) if out.dim() > 1 else out
        return F.cross_entropy(out, y, reduction="none")

    def mean_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch's mean loss from the module's output: per-sample losses (a `DirectLoss`
        model) or logits against labels."""
        if self.loss == "direct":
            return out.mean()
        return F.cross_entropy(out, y)
