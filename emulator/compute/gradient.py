"""The gradient of one local step from a rule's functional pieces (pieces.py).

One definition serves both paths: the sequential loop calls `sequential` on a job's real
mini-batch; the batched executor runs `stacked()`, the same function under `torch.func.vmap`
across jobs (batches padded with weight-0 samples). So the two compute the same gradient to
float tolerance, and the noise a transform reads comes from the job's own keyed stream
(`noise_stream`), drawn in step order, whichever path runs the job.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.func import grad, grad_and_value, vmap

from ..boundary import training as checked
from .pieces import FunctionalModel, StepContext
from .training import GradientTraining

NOISE_STREAM = "local_noise"


def noise_stream(streams, job) -> np.random.Generator:
    """The job's noise draws: keyed like its mini-batches (client, round, model, tag)."""
    return streams.keyed(NOISE_STREAM, job.client, job.round, job.task, job.tag)


def draw_noise(rng: np.random.Generator, count: int, dim: int, like: torch.Tensor) -> tuple:
    """`count` standard normal vectors (float64 draws, then the run's dtype and device)."""
    return tuple(torch.from_numpy(rng.standard_normal(dim)).to(dtype=like.dtype, device=like.device)
                 for _ in range(count))


class PiecesGradient:
    """g = mean_i per_sample(grad l_i)  [or grad of the mean loss]  + grad(sum terms), then the
    gradient transforms, for one job at one step (see GradientTraining)."""

    def __init__(self, net, rule: GradientTraining):
        if rule.per_sample and net.has_buffers:
            raise ValueError("per-sample transforms need per-sample gradients, which a model with "
                             "BatchNorm buffers does not have")
        self.net, self.rule = net, rule
        self.model = FunctionalModel(net)
        self.noise_count = sum(1 for t in rule.transforms if t.needs_noise)   # draws per step

    def context(self, start, vectors, step, batch_size, x, y, weight) -> StepContext:
        return StepContext(start, vectors, step, batch_size, x, y, weight, self.model)

    def data_grad(self, w, ctx: StepContext) -> tuple:
        """(gradient, loss) of the weighted mini-batch loss; with per-sample transforms, the
        weighted mean of the transformed per-sample gradients."""
        model = self.model
        if not self.rule.per_sample:
            def loss(v):
                return (model.sample_losses(model.forward(v, ctx.x), ctx.y) * ctx.weight).sum()
            return grad_and_value(loss)(w)

        def one(v, x1, y1):
            return model.sample_losses(model.forward(v, x1.unsqueeze(0)), y1.unsqueeze(0))[0]

        G, losses = vmap(grad_and_value(one), in_dims=(None, 0, 0))(w, ctx.x, ctx.y)
        for t in self.rule.per_sample:
            G = vmap(lambda gi, t=t: checked.transformed(t, gi, t(gi, ctx)))(G)
        return ctx.weight.to(G.dtype) @ G, (losses * ctx.weight).sum()

    def finish(self, g, w, ctx: StepContext, noises: tuple):
        """Add the terms' gradient, then apply the transforms (noisy ones read noises[i])."""
        if self.rule.terms:
            g = g + grad(lambda v: sum(checked.term_value(t, t(v, ctx)) for t in self.rule.terms))(w)
        i = 0
        for t in self.rule.transforms:       # each piece's value checked (boundary/training.py: shapes only)
            if t.needs_noise:
                g = checked.transformed(t, g, t(g, ctx._replace(noise=noises[i])))
                i += 1
            else:
                g = checked.transformed(t, g, t(g, ctx))
        return g

    # -- the two paths ------------------------------------------------------------------
    def sequential(self, w, xb, yb, h, start, vectors, bufs, rng, samples: bool = False) -> tuple:
        """(loss, gradient) of step h on a real (unpadded) mini-batch; with `samples`, also
        the batch's per-sample losses (compute/loss_stats.py)."""
        B = len(yb)
        ctx = self.context(start, vectors, torch.tensor(h), torch.tensor(float(B), dtype=w.dtype), xb, yb,
                           torch.full((B,), 1.0 / B, dtype=w.dtype, device=w.device))
        per = None
        if self.rule.per_sample:
            g, loss = self.data_grad(w, ctx)
            if samples:           # per-sample gradients hide the forward: one more, at w
                with torch.no_grad():
                    per = self.net.sample_losses(self.net.forward(w.detach(), xb), yb)
        elif samples:
            loss, g, per = self.net.loss_and_grad(w, xb, yb, bufs, samples=True)
        else:     # the model's own gradient (closed form, BatchNorm buffers)
            loss, g = self.net.loss_and_grad(w, xb, yb, bufs)
        noises = draw_noise(rng, self.noise_count, w.numel(), w) if self.noise_count else ()
        g = self.finish(g, w, ctx, noises)
        return (loss, g, per) if samples else (loss, g)

    def stacked(self):
        """vmap over jobs: (W, X, Y, WT, start, vectors, batch_size, noises, step) -> (G, losses)."""
        def one_job(w, x, y, wt, start, vectors, batch_size, noises, step):
            ctx = self.context(start, vectors, step, batch_size, x, y, wt)
            g, loss = self.data_grad(w, ctx)
            return self.finish(g, w, ctx, noises), loss

        return vmap(one_job, in_dims=(0, 0, 0, 0, 0, 0, 0, 0, None))
