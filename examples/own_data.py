"""Your own data and model in code: four Gaussian blobs in 8 dimensions, built with NumPy
(a fixed seed, so every process that imports this plugin builds the same arrays), and a
small nn.Module of your own. Use with `plugins: [own_data.py]`, `dataset: {name: blobs}`,
`model: {name: tiny_mlp}` and any partition."""
import numpy as np
import torch.nn as nn

from emulator.api import register_arrays, register_module

rng = np.random.default_rng(2024)
centres = rng.normal(0.0, 3.0, size=(4, 8))
y = rng.integers(0, 4, size=1200)
x = centres[y] + rng.normal(0.0, 1.0, size=(1200, 8))
register_arrays("blobs", x[:1000], y[:1000], x[1000:], y[1000:], description="four Gaussian blobs in 8-D (NumPy)")


class TinyMLP(nn.Module):
    def __init__(self, inputs: int, classes: int, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


register_module("tiny_mlp", lambda ctx: TinyMLP(int(np.prod(ctx.input_shape)), ctx.num_classes),
                description="Linear(d, 16) ReLU Linear(16, C), written in the plugin")
