"""Loss statistics of a training job, taken by the job itself (docs/selection.md, "Loss
statistics"): asked for only when a selector reads them (`Executor.loss_stats`), from the
per-sample losses of each step's own forward pass (a model whose gradient has a closed form,
or per-sample gradient transforms, take them from one extra forward of the batch at the
step's parameters), never by a job of their own.

Per job: the count `n`, sum `s1` and sum of squares `s2` of every per-sample loss of every
step, the unique samples trained, the last mini-batch's count and sum of squares, and the
EMA (weight 0.2, started at the first batch) of the per-batch mean squared loss over the
batches of the first epoch. Accumulated on the device: one synchronisation per job.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

EMA = 0.2


@dataclass(frozen=True)
class LossStats:
    n: int
    s1: float
    s2: float
    unique: int
    last_n: int
    last_s2: float
    ema_s2: float


def unique_rows(plan: list) -> int:
    """Distinct samples a batch plan trains on."""
    return int(len(np.unique(np.concatenate(plan)))) if plan else 0


def epoch_steps(rows: int, batch_size: Optional[int]) -> int:
    """Steps of one pass over `rows` samples (the EMA's first epoch)."""
    return 1 if not batch_size else max(1, math.ceil(rows / batch_size))


class LossAccumulator:
    """One job's statistics, step by step (`add`), read once (`result`)."""

    def __init__(self, plan: list, rows: int, batch_size: Optional[int], device):
        self.unique = unique_rows(plan)
        self.epoch = epoch_steps(rows, batch_size)
        z = lambda: torch.zeros((), dtype=torch.float64, device=device)  # noqa: E731
        self.s1, self.s2, self.last_s2, self.ema = z(), z(), z(), z()
        self.n = self.last_n = 0

    def add(self, h: int, per: torch.Tensor) -> None:
        p = per.detach().reshape(-1).to(torch.float64)
        sq = (p * p).sum()
        self.s1 += p.sum()
        self.s2 += sq
        self.n += len(p)
        self.last_n, self.last_s2 = len(p), sq
        if h < self.epoch and len(p):
            m = sq / len(p)
            self.ema = m if h == 0 else (1 - EMA) * self.ema + EMA * m

    def result(self) -> LossStats:
        vals = torch.stack([self.s1, self.s2, torch.as_tensor(self.last_s2, dtype=torch.float64,
                                                               device=self.s1.device), self.ema]).tolist()
        return LossStats(self.n, vals[0], vals[1], self.unique, self.last_n, vals[2],
                         vals[3] if self.n else math.nan)


class StackAccumulator:
    """The statistics of J stacked jobs (the batched executor): per step, the per-sample
    losses of the k jobs still running and which of their entries are real samples."""

    def __init__(self, plans: list, rows: list, batch_sizes: list, device):
        J = len(plans)
        self.unique = [unique_rows(p) for p in plans]
        self.epoch = torch.tensor([epoch_steps(r, b) for r, b in zip(rows, batch_sizes)], device=device)
        z = lambda: torch.zeros(J, dtype=torch.float64, device=device)  # noqa: E731
        self.n, self.s1, self.s2, self.last_n, self.last_s2, self.ema = z(), z(), z(), z(), z(), z()

    def add(self, h: int, k: int, per: torch.Tensor, valid: torch.Tensor) -> None:
        p = per.detach().to(torch.float64) * valid
        cnt = valid.to(torch.float64).sum(1)
        sq = (p * p).sum(1)
        self.s1[:k] += p.sum(1)
        self.s2[:k] += sq
        self.n[:k] += cnt
        self.last_n[:k], self.last_s2[:k] = cnt, sq
        m = sq / torch.clamp(cnt, min=1.0)
        first = self.epoch[:k] > h
        upd = m if h == 0 else (1 - EMA) * self.ema[:k] + EMA * m
        self.ema[:k] = torch.where(first, upd, self.ema[:k])

    def results(self) -> list:
        cols = torch.stack([self.n, self.s1, self.s2, self.last_n, self.last_s2, self.ema]).tolist()
        return [LossStats(int(n), s1, s2, u, int(ln), ls2, e if n else math.nan)
                for n, s1, s2, ln, ls2, e, u in zip(*cols, self.unique)]
