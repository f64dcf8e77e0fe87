"""One model = one flat parameter vector (DESIGN.md section 3, "Parameters").

`FlatModel` maps a flat vector to the module's named parameters (as views, so autograd
through them yields the flat gradient) and runs the module functionally on it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from ..workloads.models import loss_kind


class FlatModel:
    def __init__(self, module: nn.Module, device: torch.device, dtype: torch.dtype):
        buffers = [n for n, _ in module.named_buffers()]
        if buffers:
            raise ValueError(f"models with buffers (BatchNorm running statistics: {buffers[:3]}) are not "
                             "supported yet; use a model without normalisation buffers")
        self.module = module.to(device=device, dtype=dtype)
        self.device, self.dtype = device, dtype
        self.names, self.shapes, self.numels = [], [], []
        for n, p in self.module.named_parameters():
            self.names.append(n)
            self.shapes.append(tuple(p.shape))
            self.numels.append(p.numel())
        self.dim = int(sum(self.numels))
        self.loss = loss_kind(module)

    def initial_vector(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def views(self, w: torch.Tensor) -> dict:
        out, o = {}, 0
        for n, s, k in zip(self.names, self.shapes, self.numels):
            out[n] = w[o:o + k].view(s)
            o += k
        return out

    def forward(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.views(w), (x,))

    def batch_loss(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = self.forward(w, x)
        if self.loss == "direct":
            return out.mean()
        return F.cross_entropy(out, y)
