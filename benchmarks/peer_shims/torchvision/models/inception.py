"""The Inception blocks piq subclasses at import; constructing one raises."""
import torch.nn as nn


def absent(*args, **kwargs):
    raise ImportError("torchvision is a stub in this venv (benchmarks/peer_shims): not usable")


class InceptionA(nn.Module):
    def __init__(self, *args, **kwargs):
        absent()


InceptionC = InceptionE = InceptionA
