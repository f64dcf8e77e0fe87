"""Codecs applied to a run's messages (docs/algorithms/compression.md section 1).

- `direction_codecs(settings)`: the codec of each direction, from `network.codec` (a
  direction without one: the `ratio` codec of `network.compression`, whose bytes are what they
  always were);
- `UploadEncoding`: one model's upload codec at the server's read step (compression.md 1.3):
  the update against the declared reference (1.1), error feedback through the per-client state
  store (1.2), draws from the client's keyed stream, the relative error for metrics.csv;
- `cast_broadcast`: a download codec applied to the broadcast (1.4).
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import registry
from ..algorithms.base import Broadcast
from ..boundary import codec as boundary
from ..compute.jobs import JobFuture
from ..compute.lazy import force
from ..boundary.component import describe
from ..errors import ContractError
from .base import Codec

RESIDUAL = "codec.residual"        # per-client state kind of upload vector j: f"{RESIDUAL}.{j}"


def build(spec) -> Codec:
    """The codec a validated `network.codec.<dir>` block names."""
    return registry.get("codec", spec.name).factory(spec)


def direction_codecs(settings) -> dict:
    """{"up": codec, "down": codec} of the scenario's `network` block."""
    from .builtins import Ratio, RatioParams
    chosen = settings.codec
    out = {}
    for d in ("up", "down"):
        spec = None if chosen is None else getattr(chosen, d)
        out[d] = Ratio(RatioParams(ratio=getattr(settings.compression, d))) if spec is None else build(spec)
    return out


def cast_broadcast(codec: Codec, bc: Broadcast, rng_of) -> Broadcast:
    """The broadcast as the clients decode it (compression.md 1.4): unchanged by a bytes-only codec.
    `rng_of()` gives the broadcast's own keyed stream (one message, decoded alike by every client)."""
    if not codec.changes_values:
        return bc
    rng = rng_of()
    return Broadcast([boundary.decoded(codec, v, codec.encode(v, rng), "down") for v in bc.vectors], bc.round)


class UploadEncoding:
    """One model's upload codec, applied where the server reads an upload."""

    def __init__(self, codec: Codec, algorithm, streams, task: int):
        self.codec, self.algo, self.streams, self.task = codec, algorithm, streams, task
        self.reference = algorithm.up_reference
        self.errors: list = []           # relative errors of this aggregation's encoded uploads

    def take_error(self) -> Optional[float]:
        """The mean relative error of the uploads encoded since the last call (None: none)."""
        errs, self.errors = self.errors, []
        return sum(errs) / len(errs) if errs else None

    def start_of(self, result, client: int, t: int):
        """The model `client`'s job started from (the reference of a "start" upload), or None."""
        if self.reference != "start":
            return None
        if not isinstance(result, JobFuture) or result.job is None:
            raise ContractError("declares up_reference = 'start' but its upload carries no job result (Upload.result) "
                                "to take the start model from", describe("algorithm", self.algo), "upload", t,
                                client=client)
        return result.job.spec.start

    def encode(self, client: int, t: int, vectors: list, start) -> list:
        """The vectors the server sees of `client`'s round-t upload (vectors trained from `start`)."""
        refs = [force(start) if self.reference == "start" else None] * len(vectors)
        parts = [v if r is None else v - r for v, r in zip(vectors, refs)]
        u = torch.cat([p.reshape(-1) for p in parts])
        rng = self.streams.keyed("codec", self.task, client, t)
        states = self.algo.states
        p = u                        # error feedback (compression.md 1.2): p = u + e, c = C(p), e <- p - c
        if self.codec.stateful:
            p = u + torch.cat([states.row(f"{RESIDUAL}.{j}", client).reshape(-1) for j in range(len(vectors))])
        c = boundary.decoded(self.codec, p, self.codec.encode(p, rng), "up", t, client)
        if self.codec.stateful:
            for j, row in enumerate((p - c).split([v.numel() for v in vectors])):
                states.put(f"{RESIDUAL}.{j}", client, row)
        norm = float(p.double().norm())
        self.errors.append(float((c - p).double().norm()) / norm if norm > 0 else 0.0)
        out = []
        for piece, v, r in zip(c.split([v.numel() for v in vectors]), vectors, refs):
            piece = piece.reshape(v.shape)
            out.append(piece if r is None else r + piece)
        return out
