"""The model zoo (docs/algorithms/workloads.md section 3). vgg11 and resnet18 hold BatchNorm buffers
(running statistics, handled outside the parameter vector: compute/flat.py).

Each factory takes its params and a `ModelContext` (input shape, classes, dataset extras)
and returns a torch.nn.Module. `loss` says how a batch's output becomes a loss:
'cross_entropy' (logits vs labels) or 'direct' (the model returns per-sample losses).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import Field, field_validator

from ..errors import ScenarioError
from ..registry import Params, register


@dataclass
class ModelContext:
    input_shape: tuple
    num_classes: int
    extra: dict = field(default_factory=dict)
    path: str = "workload.model"


def _flat_dim(ctx):
    return int(np.prod(ctx.input_shape))


class StartsAtZero:
    """Capability of a model (a mix-in of its module): all-zero parameters are a fair start,
    since its loss is convex in them (no hidden units whose symmetry a zero start would tie).
    `multi_model`'s `init: auto` starts such a model at 0 (Alg. 1 line 1,
    docs/algorithms/multimodel.md A17); any other at its framework init."""


class LogRegParams(Params):
    pass


class LogReg(StartsAtZero, nn.Sequential):
    """Flatten, then Linear(d, C): the logits of multinomial logistic regression (convex)."""

    def __init__(self, inputs: int, classes: int):
        super().__init__(nn.Flatten(), nn.Linear(inputs, classes))


@register("model", "logreg", LogRegParams, "multinomial logistic regression: Linear(d, C)")
def logreg(p, ctx):
    return LogReg(_flat_dim(ctx), ctx.num_classes)


class MlpParams(Params):
    hidden: Union[int, list[int]] = Field(200, description="hidden width h, or one width per hidden layer "
                                                          "([200, 200]: McMahan's 2NN)")

    @field_validator("hidden")
    @classmethod
    def _widths(cls, v):
        ws = [v] if isinstance(v, int) else v
        if not ws or any(w < 1 for w in ws):
            raise ValueError("hidden widths must be >= 1 (and at least one layer)")
        return v


@register("model", "mlp", MlpParams, "Linear(d, h) ReLU ... Linear(h, C): one hidden layer per width")
def mlp(p, ctx):
    widths = [p.hidden] if isinstance(p.hidden, int) else list(p.hidden)
    layers, d = [nn.Flatten()], _flat_dim(ctx)
    for w in widths:
        layers += [nn.Linear(d, w), nn.ReLU()]
        d = w
    return nn.Sequential(*layers, nn.Linear(d, ctx.num_classes))


def _need_image(ctx, name, min_side):
    if len(ctx.input_shape) != 3 or min(ctx.input_shape[1:]) < min_side:
        raise ScenarioError([(f"{ctx.path}.name", f"model {name} needs image inputs (C, H, W) with H, W >= {min_side}; "
                              f"the dataset gives {tuple(ctx.input_shape)}; use logreg or mlp")])


class CnnMnist(nn.Module):
    """Conv(C->10,5) ReLU MaxPool2 . Conv(10->20,5) ReLU MaxPool2 . FC(320,50) ReLU . FC(50,10)
    (the T-SFL paper's MNIST net; 21,840 parameters on 1x28x28)."""

    def __init__(self, in_ch, side_h, side_w, classes, hidden=50):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, 10, 5)
        self.conv2 = nn.Conv2d(10, 20, 5)
        h = ((side_h - 4) // 2 - 4) // 2
        w = ((side_w - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(20 * h * w, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class CnnMnistParams(Params):
    hidden: int = Field(50, ge=1, description="width of the hidden FC layer")


@register("model", "cnn_mnist", CnnMnistParams,
          "2 conv (10, 20 ch, 5x5) + FC 320-50-10; 21,840 params on MNIST")
def cnn_mnist(p, ctx):
    _need_image(ctx, "cnn_mnist", 16)
    c, h, w = ctx.input_shape
    return CnnMnist(c, h, w, ctx.num_classes, p.hidden)


class CnnMcMahan(nn.Module):
    """McMahan et al. 2017 'CNN': Conv(C->32,5,pad2) ReLU MaxPool2 . Conv(32->64,5,pad2) ReLU MaxPool2
    . FC(3136,512) ReLU . FC(512,10) (1,663,370 parameters on 1x28x28)."""

    def __init__(self, in_ch, side_h, side_w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * (side_h // 4) * (side_w // 4), 512)
        self.fc2 = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class NoParams(Params):
    pass


@register("model", "cnn_mcmahan", NoParams, "McMahan et al.'s 2-conv 32/64 CNN; 1,663,370 params on MNIST")
def cnn_mcmahan(p, ctx):
    _need_image(ctx, "cnn_mcmahan", 4)
    c, h, w = ctx.input_shape
    return CnnMcMahan(c, h, w, ctx.num_classes)


def _conv_stack(in_ch, cfg, batchnorm):
    layers, c = [], in_ch
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1)] + ([nn.BatchNorm2d(v)] if batchnorm else []) + [nn.ReLU()]
            c = v
    return nn.Sequential(*layers), c


class CnnFmnist(nn.Module):
    """T-SFL's F-MNIST network as docs/algorithms/tsfl.md 6.4 fixes it: [conv32, conv32, M, conv64, conv64, M,
    conv128, conv128, M] (3x3 pad 1, ReLU) -> flatten 1152 -> FC(1152, 10); 297,962 params."""

    def __init__(self, in_ch, h, w, classes):
        super().__init__()
        self.features, c = _conv_stack(in_ch, [32, 32, "M", 64, 64, "M", 128, 128, "M"], False)
        self.fc = nn.Linear(c * (h // 8) * (w // 8), classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


@register("model", "cnn_fmnist", NoParams, "T-SFL's F-MNIST CNN: six 3x3 convs in 3 pooled stages + FC; 297,962 params")
def cnn_fmnist(p, ctx):
    _need_image(ctx, "cnn_fmnist", 8)
    c, h, w = ctx.input_shape
    return CnnFmnist(c, h, w, ctx.num_classes)


class Vgg11(nn.Module):
    """CIFAR VGG11 (docs/algorithms/tsfl.md 6.4): [64,M,128,M,256,256,M,512,512,M,512,512,M], each 3x3 conv
    -> BatchNorm -> ReLU, then FC(512, 10); 9,231,114 trainable params on 3x32x32."""

    def __init__(self, in_ch, classes):
        super().__init__()
        self.features, c = _conv_stack(in_ch, [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"], True)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.short(x))


class ResNet18(nn.Module):
    """CIFAR-style ResNet-18 (docs/algorithms/tsfl.md 6.4): 3x3 stem, no stem pooling, basic blocks [2,2,2,2]
    with 64-512 channels, BatchNorm, global average pool, FC(512, 10); 11,173,962 params."""

    def __init__(self, in_ch, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_ch, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, c = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(c, cout, stride), BasicBlock(cout, cout, 1)]
            c = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


@register("model", "vgg11", NoParams, "CIFAR VGG11 with BatchNorm (9,231,114 params; sequential/auto executor)")
def vgg11(p, ctx):
    _need_image(ctx, "vgg11", 32)
    return Vgg11(ctx.input_shape[0], ctx.num_classes)


@register("model", "resnet18", NoParams, "CIFAR ResNet-18 with BatchNorm (11,173,962 params; sequential/auto executor)")
def resnet18(p, ctx):
    _need_image(ctx, "resnet18", 8)
    return ResNet18(ctx.input_shape[0], ctx.num_classes)


class DirectLoss:
    """A model whose forward returns the per-sample losses themselves (the training loss is
    their mean; no labels, no cross-entropy). Any other model returns class logits."""


class ClosedFormLoss(DirectLoss, abc.ABC):
    """A model whose batch loss and gradient have a closed form: `FlatModel.loss_and_grad`
    calls `loss_and_grad(w, x)` (under no_grad) instead of autograd (unless the model has
    BatchNorm buffers). Its forward returns per-sample losses (a `DirectLoss`)."""

    @abc.abstractmethod
    def loss_and_grad(self, w: torch.Tensor, x: torch.Tensor) -> tuple:
        """(mean loss of the batch x, its gradient at the flat parameters w)."""


class QuadraticModel(ClosedFormLoss, StartsAtZero, nn.Module):
    """Parameters = w in R^d. A sample is (client id[, noise xi]); its loss is
    F_k(w) = 1/2 w^T A_k w - (b_k + xi)^T w + mu/2 ||w||^2 + const_k (docs/algorithms/workloads.md 1.4;
    client_quadratic sets const_k = 1/2 c_k^T A_k c_k so that F_k = 1/2 (w - c_k)^T A_k (w - c_k)).
    A_k is stored as its nonzero q x q block at offset s_k (rows and columns s_k .. s_k + q - 1)."""

    def __init__(self, blocks: np.ndarray, offsets: np.ndarray, b: np.ndarray, mu: float, const=None, init=None):
        super().__init__()
        d = b.shape[1]
        # float64 here: the run's dtype is applied by FlatModel (.to), so a float64 run keeps
        # every digit of A, b, c (float32 first would round them)
        w0 = torch.zeros(d, dtype=torch.float64) if init is None else torch.as_tensor(init, dtype=torch.float64)
        self.w = nn.Parameter(w0)
        # plain attributes, not buffers: constants of the objective, moved by _apply
        self.B = torch.as_tensor(blocks, dtype=torch.float64)
        self.b = torch.as_tensor(b, dtype=torch.float64)
        self.const = torch.as_tensor(np.zeros(len(b)) if const is None else const, dtype=torch.float64)
        self.mu = float(mu)
        self.q = int(self.B.shape[1])
        self.offsets = [int(o) for o in np.asarray(offsets)]
        self.index = torch.as_tensor(np.asarray(offsets, dtype=np.int64)[:, None] + np.arange(self.q)[None, :])

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self.B, self.b, self.const = fn(self.B), fn(self.b), fn(self.const)
        self.index = self.index.to(self.B.device)
        return self

    def loss_and_grad(self, w, x):
        """Mean loss of a batch and its exact gradient at w, in closed form (no autograd:
        the per-step cost of the quadratic is then the block products themselves):
        grad F_k(w) = A_k w - (b_k + xi) + mu w."""
        if x.shape[0] == 1 and x.shape[1] == 1:            # one client, exact gradient: the common case
            k = int(x[0, 0])
            s = self.offsets[k]
            wb = w[s:s + self.q]
            Bw = torch.mv(self.B[k], wb)
            g = w * self.mu - self.b[k]
            g[s:s + self.q] += Bw
            loss = 0.5 * torch.dot(wb, Bw) - torch.dot(self.b[k], w) + 0.5 * self.mu * torch.dot(w, w) + self.const[k]
            return loss, g
        k = x[:, 0].long()
        idx = self.index[k]                                # (n, q)
        wb = w[idx]
        Bw = torch.einsum("nij,nj->ni", self.B[k], wb)
        lin = self.b[k]
        if x.shape[1] > 1:
            lin = lin + x[:, 1:].to(w.dtype)
        loss = (0.5 * (wb * Bw).sum(1) - lin @ w + 0.5 * self.mu * (w @ w) + self.const[k]).mean()
        g = torch.zeros_like(w).index_add_(0, idx.reshape(-1), Bw.reshape(-1)) / len(k)
        return loss, g - lin.mean(0) + self.mu * w

    def forward(self, x):
        k = x[:, 0].long()
        w = self.w
        wb = w[self.index[k]]                             # (n, q): the block's coordinates
        quad = 0.5 * torch.einsum("ni,nij,nj->n", wb, self.B[k], wb)
        lin = self.b[k]
        if x.shape[1] > 1:
            lin = lin + x[:, 1:].to(w.dtype)
        return quad - lin @ w + 0.5 * self.mu * (w @ w) + self.const[k]


@register("model", "quadratic", NoParams, "parameters = w of the quadratic dataset (its only model)")
def quadratic_model(p, ctx):
    if "blocks" not in ctx.extra:
        raise ScenarioError([(f"{ctx.path}.name", "model quadratic needs dataset quadratic or client_quadratic")])
    e = ctx.extra
    return QuadraticModel(e["blocks"], e["offsets"], e["b"], e["mu"], e.get("const"), e.get("init"))


def loss_kind(module: nn.Module) -> str:
    """"direct" for a `DirectLoss` model (forward = per-sample losses), else "cross_entropy"."""
    return "direct" if isinstance(module, DirectLoss) else "cross_entropy"


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def forward_macs(module: nn.Module, input_shape: tuple) -> int:
    """Multiply-accumulates of one forward pass of one sample, counted from Conv2d and
    Linear layers (pooling and activations not counted, as docs/algorithms/workloads.md section 3)."""
    macs = 0
    hooks = []

    def conv_hook(m, inp, out):
        nonlocal macs
        k = m.kernel_size[0] * m.kernel_size[1] * (m.in_channels // m.groups)
        macs += int(out[0].numel()) * k

    def lin_hook(m, inp, out):
        nonlocal macs
        macs += m.in_features * m.out_features

    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(lin_hook))
    was_training = module.training
    module.eval()           # BatchNorm: no running-statistics update, works on one sample
    try:
        with torch.no_grad():
            p0 = next(module.parameters(), None)      # the run's dtype and device
            kw = {} if p0 is None else {"dtype": p0.dtype, "device": p0.device}
            module(torch.zeros((1,) + tuple(input_shape), **kw))
    finally:
        module.train(was_training)
        for h in hooks:
            h.remove()
    return macs
