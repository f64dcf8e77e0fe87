"""A codec's results, checked where they cross (docs/algorithms/compression.md, section 4):
`wire_bytes` and an entropy-coded size are positive integers; `encode` gives a tensor of its input's shape and dtype,
finite where its input was."""
from __future__ import annotations

import torch

from ..codecs.exchange import ExchangeBytes
from ..errors import ContractError
from .component import describe


def wire_bytes(codec, numel: int, bytes_per_param: int, direction: str) -> int:
    nb = codec.wire_bytes(numel, bytes_per_param)
    if isinstance(nb, bool) or not isinstance(nb, int) or nb <= 0:
        raise ContractError(f"gave {nb!r} bytes for a message of {numel} parameters ({direction}); a message's "
                            "bytes are a positive integer computed from its length", describe("codec", codec),
                            "wire_bytes")
    return nb


def exchange_sizes(codec, sizes):
    """An exchange codec's message sizes: non-negative integers, the first upload positive."""
    vals = [sizes.broadcast, sizes.first, sizes.back, sizes.second] if isinstance(sizes, ExchangeBytes) else []
    if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in vals) or vals[1] <= 0:
        raise ContractError(f"gave {sizes!r} as its message sizes; an exchange's sizes are an ExchangeBytes of "
                            "non-negative integers (the first upload positive), from the model's layout alone",
                            describe("codec", codec), "exchange_bytes")
    return sizes


def coded_bytes(codec, nb, t: int, client: int) -> int:
    """An entropy-coded codec's size of one message: a positive integer."""
    if isinstance(nb, bool) or not isinstance(nb, int) or nb <= 0:
        raise ContractError(f"gave {nb!r} entropy-coded bytes for an upload; a message's coded size is a positive "
                            "integer", describe("codec", codec), "encode_coded", t, client=client)
    return nb


def decoded(codec, v: torch.Tensor, out, direction: str, t=None, client=None) -> torch.Tensor:
    """The values the receiver decodes, checked: a tensor like `v`, finite where `v` is."""
    who = describe("codec", codec)
    if not isinstance(out, torch.Tensor) or out.shape != v.shape or out.dtype != v.dtype:
        what = f"a tensor of shape {tuple(out.shape)} and {out.dtype}" if isinstance(out, torch.Tensor) \
            else type(out).__name__
        raise ContractError(f"returned {what} for a {direction} message of shape {tuple(v.shape)} and {v.dtype}; "
                            "encode returns the decoded values in the input's shape and dtype", who, "encode",
                            t, client=client)
    if bool(torch.isfinite(v).all()) and not bool(torch.isfinite(out).all()):
        raise ContractError(f"decoded non-finite values from a finite {direction} message (a value beyond the "
                            "codec's range?); decoded values are finite", who, "encode", t, client=client)
    return out
