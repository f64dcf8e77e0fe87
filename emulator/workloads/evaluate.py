"""Evaluation of a global parameter vector: test accuracy/loss, or the quadratic's gap."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


class ClassificationEval:
    def __init__(self, net, x_test: torch.Tensor, y_test: torch.Tensor, batch: int = 4096):
        self.net, self.x, self.y, self.batch = net, x_test, y_test, batch

    @torch.no_grad()
    def __call__(self, w: torch.Tensor, buffers=None) -> dict:
        n = len(self.y)
        if n == 0:
            return {}
        correct, loss = 0, 0.0
        for s in range(0, n, self.batch):
            out = self.net.forward(w, self.x[s:s + self.batch], buffers)   # eval mode
            yb = self.y[s:s + self.batch]
            loss += float(F.cross_entropy(out, yb, reduction="sum"))
            correct += int((out.argmax(1) == yb).sum())
        return {"test_acc": correct / n, "test_loss": loss / n}


class TrainAndTestEval:
    """Test metrics plus the same on the whole training set (`run.eval_train`):
    full_train_loss, full_train_acc."""

    def __init__(self, test: ClassificationEval, train: ClassificationEval):
        self.test, self.train = test, train
        self.x, self.y = test.x, test.y

    def __call__(self, w: torch.Tensor, buffers=None) -> dict:
        out = self.test(w, buffers)
        tr = self.train(w, buffers)
        if tr:
            out.update(full_train_loss=tr["test_loss"], full_train_acc=tr["test_acc"])
        return out


class QuadraticEval:
    """F(w) = (1/N) sum_k F_k(w) and the gap F(w) - F(w*) (docs/algorithms/workloads.md 1.4)."""

    def __init__(self, extra: dict):
        self.F, self.f_star, self.w_star = extra["F"], extra["f_star"], extra["w_star"]

    def __call__(self, w: torch.Tensor, buffers=None) -> dict:
        wn = w.detach().double().cpu().numpy()
        f = self.F(wn)
        gap = f - self.f_star
        return {"test_loss": f, "gap": gap,
                "log10_gap": math.log10(gap) if gap > 0 else float("-inf"),
                "dist_to_opt": float(np.linalg.norm(wn - self.w_star))}
