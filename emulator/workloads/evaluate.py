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


class PerClientEval:
    """Each client's loss and accuracy on its own local test rows (docs/fairness.md): one
    forward over the concatenated rows of the evaluated clients (in chunks of `batch` rows, as
    the global evaluation), reduced per client by an index-add, never a forward per client.

    `x`, `y`: the data set's arrays the local rows index (`local.source`), on the run's device;
    the local rows of every client are gathered once, client after client."""

    def __init__(self, net, x: torch.Tensor, y: torch.Tensor, local, batch: int = 4096):
        self.net, self.local, self.batch = net, local, batch
        idx = torch.as_tensor(local.rows, dtype=torch.long, device=x.device)
        self.x, self.y = x.index_select(0, idx), y.index_select(0, idx)
        self.sizes = local.sizes()

    @torch.no_grad()
    def __call__(self, w: torch.Tensor, clients: np.ndarray, buffers=None) -> tuple:
        """(n, mean loss, accuracy) of each of `clients` (ascending ids, each with rows), as
        NumPy arrays (int64, float64, float64)."""
        clients = np.asarray(clients, dtype=np.int64)
        n = self.sizes[clients]
        total = int(n.sum())
        dev = self.x.device
        owner = torch.repeat_interleave(torch.arange(len(clients), device=dev),
                                        torch.as_tensor(n, device=dev))
        pos = None
        if total != len(self.y):             # a sample of the clients: their rows only
            pos = torch.as_tensor(self.local.positions(clients), dtype=torch.long, device=dev)
        loss = torch.zeros(len(clients), dtype=torch.float64, device=dev)
        correct = torch.zeros(len(clients), dtype=torch.int64, device=dev)
        for s in range(0, total, self.batch):
            if pos is None:
                xb, yb = self.x[s:s + self.batch], self.y[s:s + self.batch]
            else:
                at = pos[s:s + self.batch]
                xb, yb = self.x.index_select(0, at), self.y.index_select(0, at)
            out = self.net.forward(w, xb, buffers)        # eval mode
            ob = owner[s:s + self.batch]
            loss.index_add_(0, ob, F.cross_entropy(out, yb, reduction="none").double())
            correct.index_add_(0, ob, (out.argmax(1) == yb).long())
        nn = n.astype(np.float64)
        return n, loss.cpu().numpy() / nn, correct.cpu().numpy() / nn
