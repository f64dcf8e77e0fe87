"""The `Codec` extension point: what a message becomes on the wire (docs/algorithms/compression.md).

A codec maps a client's flat message to the values the receiver sees (`encode`) and gives the
exact bytes of one message from its length alone (`wire_bytes`), so transfer times are known
before any job runs. Error feedback (compression.md 1.2) is the engine's, not each codec's:
a `stateful` codec encodes the update plus its client's residual (codecs/encoding.py).

Declared, never discovered:
- `changes_values`: whether `encode` may change the values (False: `none`, `ratio`);
- `relative`: whether it encodes an update, which needs a reference the receiver holds
  (True: refused on the download, compression.md 1.4);
- `stateful`: an instance with error feedback keeps a residual per client;
- `EntropyCoded` (a capability base, checked with `isinstance`): the codec also gives each
  message's data-dependent entropy-coded size (QSGD's Elias coding), reported in the run's
  records and never used for time (compression.md 3).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar, Optional

import numpy as np
import torch
from pydantic import Field, model_validator

from .. import registry
from ..registry import Params


class Codec(ABC):
    """A codec: `wire_bytes(numel, bytes_per_param)` and `encode(v, rng)` are required."""

    #: whether `encode` may change the values (False: bytes only)
    changes_values: ClassVar[bool] = True
    #: whether it encodes an update (needs a reference: refused on the download)
    relative: ClassVar[bool] = True
    #: whether this instance keeps a per-client residual (error feedback)
    stateful: bool = False

    def __init__(self, params: Params):
        self.p = params

    @abstractmethod
    def wire_bytes(self, numel: int, bytes_per_param: int) -> int:
        """Bytes of one message of `numel` parameters (before `network.overhead_bytes`): a
        positive integer from the length and the codec's parameters alone."""

    @abstractmethod
    def encode(self, v: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """The values the receiver decodes from flat `v` (same shape and dtype); random draws
        only from `rng` (the client's keyed stream of this message)."""


class EntropyCoded(ABC):
    """Capability of a codec: each message also has an entropy-coded size that depends on its
    values (compression.md 3: `bytes_up_entropy`); its time still follows `wire_bytes`."""

    @abstractmethod
    def encode_coded(self, v: torch.Tensor, rng: np.random.Generator) -> tuple:
        """(the decoded values, exactly what `encode(v, rng)` gives from the same draws; the
        message's entropy-coded bytes before `network.overhead_bytes`, a positive integer)."""


class FeedbackCodec(Codec):
    """A codec whose params declare `error_feedback`: stateful when it is on."""

    def __init__(self, params: Params):
        super().__init__(params)
        self.stateful = bool(params.error_feedback)


def count(p, numel: int) -> int:
    """k of a sparsifier: its `k` (at most numel) or max(1, ceil(fraction x numel))."""
    if p.k is not None:
        return min(int(p.k), numel)
    return max(1, min(numel, math.ceil(round(p.fraction * numel, 9))))


class SparseParams(Params):
    k: Optional[int] = Field(None, ge=1, description="entries kept per message (or `fraction`)")
    fraction: Optional[float] = Field(None, gt=0, le=1, description="or the share of the message's entries kept: k = max(1, ceil(fraction x n))")
    error_feedback: bool = Field(True, description="keep what is not sent and add it to the next upload (Stich et al. 2018)")

    @model_validator(mode="after")
    def _one_size(self):
        if (self.k is None) == (self.fraction is None):
            raise ValueError("give exactly one of `k` or `fraction`")
        return self


registry.extension_point("codec", Codec, functions=False)    # a class: the schema reads its declarations
