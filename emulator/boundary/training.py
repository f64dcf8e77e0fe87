"""A local rule's pieces and a train function, checked where their values cross into the
engine's local step (docs/local-training.md): a loss term returns a scalar (a 0-d floating
tensor), a gradient transform (per-sample or mini-batch) returns a tensor of the gradient's
shape and dtype, a train function returns its mean loss as a number or None (finite when the
parameters it trained are). These checks read shapes only, so they hold on the sequential and
the batched (vmap) path alike; a NaN gradient is left to the divergence check (the model goes
non-finite, exit status 3). A violation is a `ContractError` naming the piece (class and file)
and `__call__`; the world adds the round and the virtual time."""
from __future__ import annotations

import math
import numbers

import torch

from ..errors import ContractError
from .component import describe, describe_function


def term_value(term, v):
    """A loss term's value: a 0-d floating tensor."""
    if not isinstance(v, torch.Tensor) or v.dim() != 0 or not v.is_floating_point():
        got = f"a {v.dtype} tensor of shape {tuple(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__
        raise ContractError(f"returned {got}; a loss term returns a scalar (a 0-d floating tensor) added to the "
                            "mini-batch loss", describe("loss term", term), "__call__")
    return v


def transformed(t, g: torch.Tensor, out):
    """A gradient transform's result: a tensor of the gradient's shape and dtype."""
    if not isinstance(out, torch.Tensor) or out.shape != g.shape or out.dtype != g.dtype:
        got = f"a {out.dtype} tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) \
            else type(out).__name__
        raise ContractError(f"returned {got}; a gradient transform returns the gradient's shape "
                            f"{tuple(g.shape)} and dtype {g.dtype}", describe("gradient transform", t), "__call__")
    return out


def train_loss(rule, out, params: torch.Tensor, job) -> float:
    """A train function's mean loss: None (nan) or a real number, finite if `params` are
    (after at least one step)."""
    if out is None:
        return float("nan")
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        out = out.item()
    if isinstance(out, bool) or not isinstance(out, numbers.Real):
        raise _fn_broken(rule, f"returned {type(out).__name__}; a train function returns its mean training loss "
                               "(a number) or None", job)
    out = float(out)
    if not math.isfinite(out) and job.steps and bool(torch.isfinite(params).all()):
        raise _fn_broken(rule, f"returned the loss {out} while the parameters it trained are finite; the loss is "
                               "the mean over its steps (finite), or None", job)
    return out


def batches_read(rule, read: int, job) -> None:
    """A train function trains on every one of its batches (the protocol fixed the steps)."""
    if read != job.steps:
        raise _fn_broken(rule, f"read {read} of its {job.steps} batches; the protocol fixes the number of local "
                               "steps: a train function trains on every batch", job)


def _fn_broken(rule, what: str, job) -> ContractError:
    return ContractError(what, describe_function("train function", rule.fn, rule.kind()), "fn", job.round,
                         client=job.client)
