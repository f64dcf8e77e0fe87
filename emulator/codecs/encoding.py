"""Codecs applied to a run's messages (docs/algorithms/compression.md section 1).

- `direction_codecs(settings)`: the codec of each direction, from `network.codec` (a
  direction without one: the `ratio` codec of `network.compression`, whose bytes are what they
  always were);
- `UploadEncoding`: one model's upload codec at the server's read step (compression.md 1.3):
  the update against the declared reference (1.1), error feedback through the per-client state
  store (1.2), draws from the client's keyed stream, the relative error for metrics.csv and,
  for an entropy-coded codec, each upload's coded size (section 3);
- `ExchangeEncoding`: an exchange codec's uploads, every read upload of an aggregation at once (2.6);
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
from .base import Codec, EntropyCoded
from .exchange import ExchangeCodec, Layout

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

    def __init__(self, codec: Codec, algorithm, streams, task: int, overhead: int = 0):
        self.codec, self.algo, self.streams, self.task = codec, algorithm, streams, task
        self.reference = algorithm.up_reference
        self.overhead = int(overhead)    # network.overhead_bytes, added to an entropy-coded size
        self.errors: list = []           # relative errors of this aggregation's encoded uploads
        self.coded: dict = {}            # client -> entropy-coded bytes of its upload (EntropyCoded)

    def take_error(self) -> Optional[float]:
        """The mean relative error of the uploads encoded since the last call (None: none)."""
        errs, self.errors = self.errors, []
        return sum(errs) / len(errs) if errs else None

    def take_columns(self) -> tuple:
        """(metrics.csv columns, clients.csv columns) of the uploads encoded since the last call
        (compression.md 3): `codec_error` (NaN: none encoded) and, for an entropy-coded codec,
        `bytes_up_entropy` (their coded bytes with the overhead: the sum, NaN when none was
        encoded, and each client's)."""
        err = self.take_error()
        rows = {"codec_error": float("nan") if err is None else err}
        clients = {}
        if isinstance(self.codec, EntropyCoded):
            coded, self.coded = self.coded, {}
            rows["bytes_up_entropy"] = int(sum(coded.values())) if coded else float("nan")
            clients["bytes_up_entropy"] = coded
        return rows, clients

    def start_of(self, result, client: int, t: int):
        """The model `client`'s job started from (the reference of a "start" upload), or None."""
        if self.reference != "start":
            return None
        if not isinstance(result, JobFuture) or result.job is None:
            raise ContractError("declares up_reference = 'start' but its upload carries no job result (Upload.result) "
                                "to take the start model from", describe("algorithm", self.algo), "upload", t,
                                client=client)
        return result.job.spec.start

    def encode_all(self, t: int, entries: list) -> list:
        """The vectors the server sees of each upload of aggregation t: `entries` are (client,
        vectors, start), in the order read; one message each (an exchange codec: ExchangeEncoding)."""
        return [self.encode(client, t, vectors, start) for client, vectors, start in entries]

    def encode(self, client: int, t: int, vectors: list, start) -> list:
        """The vectors the server sees of `client`'s round-t upload (vectors trained from `start`)."""
        p, refs = self.prepare(client, vectors, start)
        c = self.decode(p, self.streams.keyed("codec", self.task, client, t), t, client)
        return self.finish(client, vectors, refs, p, c)

    def prepare(self, client: int, vectors: list, start) -> tuple:
        """(p, refs): the flat message the codec encodes, p = u + e (error feedback, compression.md
        1.2; u the update against the reference, 1.1), and each vector's reference (None: zero)."""
        refs = [force(start) if self.reference == "start" else None] * len(vectors)
        parts = [v if r is None else v - r for v, r in zip(vectors, refs)]
        u = torch.cat([p.reshape(-1) for p in parts])
        if not self.codec.stateful:
            return u, refs
        states = self.algo.states
        return u + torch.cat([states.row(f"{RESIDUAL}.{j}", client).reshape(-1) for j in range(len(vectors))]), refs

    def finish(self, client: int, vectors: list, refs: list, p: torch.Tensor, c: torch.Tensor) -> list:
        """The residual e <- p - c kept (error feedback), the relative error noted, and the
        decoded `c` cut back into the upload's vectors (their references added)."""
        if self.codec.stateful:
            for j, row in enumerate((p - c).split([v.numel() for v in vectors])):
                self.algo.states.put(f"{RESIDUAL}.{j}", client, row)
        norm = float(p.double().norm())
        self.errors.append(float((c - p).double().norm()) / norm if norm > 0 else 0.0)
        out = []
        for piece, v, r in zip(c.split([v.numel() for v in vectors]), vectors, refs):
            piece = piece.reshape(v.shape)
            out.append(piece if r is None else r + piece)
        return out

    def decode(self, p: torch.Tensor, rng, t: int, client: int) -> torch.Tensor:
        """The codec's decoded values of flat `p`, checked; an entropy-coded codec's size is kept."""
        if not isinstance(self.codec, EntropyCoded):
            return boundary.decoded(self.codec, p, self.codec.encode(p, rng), "up", t, client)
        c, nb = self.codec.encode_coded(p, rng)
        self.coded[client] = self.coded.get(client, 0) + boundary.coded_bytes(self.codec, nb, t, client) + self.overhead
        return boundary.decoded(self.codec, p, c, "up", t, client)


class ExchangeEncoding(UploadEncoding):
    """An exchange codec's uploads (compression.md 2.6): every read upload of an aggregation
    encoded together, the server's shared state (PowerSGD's Q) carried from one aggregation to
    the next. The clients enter the exchange in the order of their ids, whatever the order
    they arrived in."""

    def __init__(self, codec: ExchangeCodec, algorithm, streams, task: int, layout: Layout, overhead: int = 0):
        super().__init__(codec, algorithm, streams, task, overhead)
        self.layout = layout
        self.state = codec.initial_state(layout, streams.keyed("codec.exchange", task))

    def encode_all(self, t: int, entries: list) -> list:
        order = sorted(range(len(entries)), key=lambda i: entries[i][0])
        prepared = {i: self.prepare(*entries[i]) for i in order}
        ps = [prepared[i][0] for i in order]
        decoded, state = self.codec.exchange(ps, self.layout, self.state) if ps else ([], self.state)
        if not isinstance(decoded, (list, tuple)) or len(decoded) != len(ps):
            raise ContractError(f"returned {type(decoded).__name__} for the {len(ps)} uploads of an exchange; it "
                                "returns one decoded tensor per upload", describe("codec", self.codec), "exchange", t)
        self.state = state
        out = [None] * len(entries)
        for i, c in zip(order, decoded):
            client, vectors, _ = entries[i]
            p, refs = prepared[i]
            out[i] = self.finish(client, vectors, refs, p, boundary.decoded(self.codec, p, c, "up", t, client))
        return out
