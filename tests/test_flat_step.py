"""FlatModel.step_loss_and_grad (compute/flat.py): a local step's loss and gradient on the
bound module copy are `loss_and_grad`'s, bit for bit, whatever the model does with its
parameters (frozen, unused), its loss kind and its train / eval mode."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from emulator.compute.flat import FlatModel
from emulator.workloads import models

CTX = models.ModelContext((1, 16, 16), 10)


class Odd(nn.Module):
    """A frozen layer, a parameter the forward never uses, and dropout."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(256, 16)
        self.frozen = nn.Linear(16, 10)
        self.frozen.requires_grad_(False)
        self.unused = nn.Parameter(torch.ones(3))
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.frozen(self.drop(torch.relu(self.a(x.flatten(1)))))


class Regression(models.DirectLoss, nn.Module):
    """Per-sample squared error of a linear map (a `DirectLoss`: forward = per-sample losses)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 1)

    def forward(self, x):
        return self.lin(x.flatten(1)).squeeze(1) ** 2


MODELS = {
    "logreg": lambda: models.logreg(models.LogRegParams(), CTX),
    "mlp": lambda: models.mlp(models.MlpParams(hidden=32), CTX),
    "cnn_mnist": lambda: models.cnn_mnist(models.CnnMnistParams(), CTX),
    "odd": Odd,
    "regression": Regression,
}


def _steps(net, fn, x, y, mode_at=None):
    """Five SGD steps from the initial vector with `fn`: every loss and gradient."""
    w, out = net.initial_vector(), []
    for h in range(5):
        if mode_at is not None:
            net.module.train(mode_at(h))
        torch.manual_seed(h)                      # dropout draws the same masks both ways
        loss, g = fn(w, x[8 * h:8 * h + 8], y[8 * h:8 * h + 8])
        out.append((loss, g))
        w = w - 0.1 * g
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_step_gradient_is_loss_and_grad_bit_for_bit(model, dtype):
    torch.manual_seed(0)
    net = FlatModel(MODELS[model](), torch.device("cpu"), dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, *CTX.input_shape, generator=g, dtype=dtype)
    y = torch.randint(0, 10, (40,), generator=g)
    mode = lambda h: h % 2 == 0               # noqa: E731  train, eval, train, ...: dropout on and off
    ref = _steps(net, net.loss_and_grad, x, y, mode)
    got = _steps(net, net.step_loss_and_grad, x, y, mode)
    for (l0, g0), (l1, g1) in zip(ref, got):
        assert torch.equal(l0, l1) and torch.equal(g0, g1)
    if model == "odd":
        piece = dict(zip(net.names, torch.split(g0, net.numels)))
        assert piece["frozen.weight"].abs().sum() > 0          # the frozen layer is trained, as in loss_and_grad
        assert torch.equal(piece["unused"], torch.zeros(3, dtype=dtype))   # never used: a zero gradient


def test_a_replica_steps_on_its_own_bound_module():
    """Two threads each step a replica: a replica must not share the bound copy of the module."""
    torch.manual_seed(0)
    net = FlatModel(MODELS["mlp"](), torch.device("cpu"), torch.float64)
    x, y = torch.randn(8, *CTX.input_shape, dtype=torch.float64), torch.randint(0, 10, (8,))
    net.step_loss_and_grad(net.initial_vector(), x, y)
    twin = net.replica()
    w = net.initial_vector() + 1.0
    _, g_twin = twin.step_loss_and_grad(w, x, y)
    assert twin._bound[0] is not net._bound[0] and twin._bound[1].data_ptr() != net._bound[1].data_ptr()
    assert torch.equal(g_twin, net.loss_and_grad(w, x, y)[1])
