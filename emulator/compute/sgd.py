"""Local SGD on flat vectors (docs/local-training.md): one step with PyTorch's
semantics (weight decay, FedProx's proximal term, a control-variate correction, momentum and
Nesterov), for one client's vector or a stack of them, and a LocalRule's step as a callable.
Math only: the executors (compute/executor.py, compute/batched.py) call it."""
from __future__ import annotations

from .training import LocalRule


def sgd_step(w, g, buf, lr, weight_decay=None, prox_mu=None, momentum=None, nesterov=False,
             anchor=None, correction=None):
    """One local SGD step (PyTorch semantics) on flat vectors, or on a stack of them with
    per-row coefficients (columns [J, 1]); a coefficient of None is off. Returns (w, buf);
    `buf` (the momentum buffer) is updated in place once it exists."""
    if weight_decay is not None:
        g = g + weight_decay * w
    if prox_mu is not None:
        g = g + prox_mu * (w - anchor)
    if correction is not None:
        g = g + correction
    if momentum is not None:
        buf = g.clone() if buf is None else buf.mul_(momentum).add_(g)
        d = g + momentum * buf if nesterov else buf
    else:
        d = g
    return w - lr * d, buf


def sgd_update(w, g, buf, rule: LocalRule, h: int, anchor, correction):
    """One local step of `rule` (see LocalRule), on flat vectors. Returns (w, buf)."""
    return sgd_step(w, g, buf, rule.lr_at(h), rule.weight_decay or None, rule.prox_mu or None,
                    rule.momentum or None, rule.nesterov, anchor, correction)


class SgdSteps:
    """`step(w, g, h)` of a LocalRule: sgd_update with the job's anchor, correction and buffer."""

    def __init__(self, rule: LocalRule, anchor, correction):
        self.rule, self.anchor, self.correction, self.buf = rule, anchor, correction, None

    def __call__(self, w, g, h):
        w, self.buf = sgd_update(w, g, self.buf, self.rule, h, self.anchor, self.correction)
        return w
