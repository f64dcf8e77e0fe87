"""Depths (b) and (c) of local training on the sequential loop (docs/local-training.md):
a `torch.optim` optimizer stepping the client's parameters (`OptimizerSteps`), and a user's
own training function (`train_function`)."""
from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..boundary import training
from .gradient import NOISE_STREAM
from .pieces import FunctionalModel
from .training import OptimizerRule, TrainContext, TrainFunction


class OptimizerSteps:
    """`step(w, g, h)`: the rule's optimizer (fresh per job) steps one parameter tensor per
    module parameter, whose gradient is g's slice; returns the new flat vector."""

    def __init__(self, rule: OptimizerRule, net, w: torch.Tensor):
        self.numels = net.numels
        self.params = [torch.nn.Parameter(p.reshape(s).clone())
                       for p, s in zip(torch.split(w, net.numels), net.shapes)]
        self.opt = rule.optimizer(self.params, **dict(rule.options))

    def __call__(self, w, g, h):
        for p, gi in zip(self.params, torch.split(g, self.numels)):
            p.grad = gi.reshape(p.shape).clone()
        self.opt.step()
        return torch.cat([p.detach().reshape(-1) for p in self.params])


class JobBatches(Sequence):
    """A job's mini-batches as (x, y), made when read; remembers which were read."""

    def __init__(self, batch_at, plan):
        self._at, self._plan = batch_at, plan
        self.read: set = set()

    def __len__(self):
        return len(self._plan)

    def __getitem__(self, h):
        if not isinstance(h, int):
            raise TypeError("batches are indexed by step number")
        if not -len(self._plan) <= h < len(self._plan):
            raise IndexError(h)
        h %= len(self._plan)
        self.read.add(h)
        return self._at(self._plan[h])


def _float_buffers(net, module) -> list:
    named = dict(module.named_buffers())
    return [named[n] for n in net.buffer_names]


def train_function(executor, job, net, w, bufs, batches: JobBatches) -> tuple:
    """Run a TrainFunction job on a copy of the module loaded with w (and the BatchNorm
    buffers): returns (parameters, buffers, mean loss)."""
    rule: TrainFunction = job.spec.rule
    module = copy.deepcopy(net.module)
    with torch.no_grad():
        vector_to_parameters(w, module.parameters())
        if bufs is not None:
            vector_to_parameters(bufs, _float_buffers(net, module))
    module.train()
    model = FunctionalModel(net)
    gen = torch.Generator().manual_seed(executor.streams.int_seed(NOISE_STREAM, job.client, job.round,
                                                                   job.task, job.tag))
    ctx = TrainContext(start=w.clone(), vectors=executor.spec_vectors(job.spec),
                       loss=lambda out, y: model.sample_losses(out, y).mean(), generator=gen,
                       client=job.client, round=job.round, task=job.task)
    out = rule.fn(module, batches, job.steps, ctx)
    training.batches_read(rule, len(batches.read), job)       # its contract (boundary/training.py)
    params = parameters_to_vector(module.parameters()).detach().clone()
    new_bufs = None
    if bufs is not None:
        new_bufs = torch.cat([b.detach().reshape(-1) for b in _float_buffers(net, module)]).clone()
    return params, new_bufs, training.train_loss(rule, out, params, job)
