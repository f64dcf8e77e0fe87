"""The built-in codecs, each as docs/algorithms/compression.md section 2 states it: its
encoding and its exact wire size (fixed-width: values, indices, scales)."""
from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field

from devices.network import message_bytes

from ..registry import Params, register
from .base import Codec, EntropyCoded, FeedbackCodec, SparseParams, count
from .elias import qsgd_bits


class NoCodec(Codec):
    """No compression: n x bytes_per_param bytes, values untouched."""

    changes_values = False
    relative = False

    def wire_bytes(self, numel, bytes_per_param):
        return int(numel) * int(bytes_per_param)

    def encode(self, v, rng):
        return v


class RatioParams(Params):
    ratio: float = Field(1.0, gt=0, le=1, description="the parameter bytes are scaled by this ratio")


class Ratio(Codec):
    """Bytes only: ceil(n x bytes_per_param x ratio); the values are NOT changed (network.compression)."""

    changes_values = False
    relative = False

    def wire_bytes(self, numel, bytes_per_param):
        return message_bytes(numel, bytes_per_param, 0, self.p.ratio)      # compression.md 2, `ratio`

    def encode(self, v, rng):
        return v


class _Cast(Codec):
    changes_values = True
    relative = False
    dtype: torch.dtype

    def wire_bytes(self, numel, bytes_per_param):
        return 2 * int(numel)

    def encode(self, v, rng):
        return v.to(self.dtype).to(v.dtype)                                 # compression.md 2.1


class Fp16(_Cast):
    """IEEE half precision: 2 bytes a value; values rounded to fp16."""
    dtype = torch.float16


class Bf16(_Cast):
    """bfloat16: 2 bytes a value; values rounded to bf16."""
    dtype = torch.bfloat16


class QSGDParams(Params):
    s: int = Field(15, ge=1, le=1 << 16, description="quantisation levels s (a level takes ceil(log2(s+1)) bits)")
    bucket: int = Field(512, ge=1, description="entries per bucket, each with its own fp32 norm")


class QSGD(Codec, EntropyCoded):
    """QSGD (Alistarh et al. 2017): stochastic s-level quantisation per bucket, unbiased; its
    Elias-coded size is reported beside the fixed-width one (compression.md 2.2)."""

    def wire_bytes(self, numel, bytes_per_param):
        n, b, s = int(numel), self.p.bucket, self.p.s
        bits = 32 * math.ceil(n / b) + n * (1 + math.ceil(math.log2(s + 1)))
        return (bits + 7) // 8                                              # compression.md 2.2

    def encode(self, v, rng):
        return self.encode_coded(v, rng)[0]

    def encode_coded(self, v, rng):
        n, b, s = v.numel(), self.p.bucket, self.p.s
        nb = -(-n // b)
        x = np.zeros(nb * b)
        x[:n] = v.detach().reshape(-1).to(torch.float64).cpu().numpy()
        x = x.reshape(nb, b)
        norm = np.linalg.norm(x, axis=1).astype(np.float32).astype(np.float64)[:, None]   # fp32 on the wire
        safe = np.where(norm > 0, norm, 1.0)
        ell = np.where(norm > 0, np.minimum(s, np.abs(x) * s / safe), 0.0)
        lo = np.floor(ell)
        level = lo + (rng.random(ell.shape) < ell - lo)                     # E[level] = ell
        out = (norm * np.sign(x) * level / s).reshape(-1)[:n]
        lengths = np.minimum(b, n - b * np.arange(nb))
        coded = (qsgd_bits(level, lengths) + 7) // 8                        # compression.md 2.2, Elias
        return torch.from_numpy(out).to(device=v.device, dtype=v.dtype).reshape(v.shape), coded


def _fp32(x: torch.Tensor) -> torch.Tensor:
    """Values as they travel: rounded to fp32, back in the run's dtype."""
    return x.to(torch.float32).to(x.dtype)


class TopK(FeedbackCodec):
    """Top-k (Stich et al. 2018): the k largest magnitudes with their indices; error feedback by default."""

    def wire_bytes(self, numel, bytes_per_param):
        return 8 * count(self.p, int(numel))                                # compression.md 2.3

    def encode(self, v, rng):
        k = count(self.p, v.numel())
        flat = v.reshape(-1)
        idx = torch.sort(flat.abs(), descending=True, stable=True).indices[:k]   # ties: lower index first
        out = torch.zeros_like(flat)
        out[idx] = _fp32(flat[idx])
        return out.reshape(v.shape)


class RandK(FeedbackCodec):
    """Rand-k: k entries at indices drawn from the client's stream (a 64-bit seed on the wire)."""

    def wire_bytes(self, numel, bytes_per_param):
        return 4 * count(self.p, int(numel)) + 8                            # compression.md 2.4

    def encode(self, v, rng):
        n = v.numel()
        k = count(self.p, n)
        flat = v.reshape(-1)
        idx = torch.from_numpy(rng.choice(n, size=k, replace=False)).to(flat.device)
        out = torch.zeros_like(flat)
        kept = _fp32(flat[idx])
        out[idx] = kept if self.stateful else kept * (n / k)               # unbiased without EF
        return out.reshape(v.shape)


class SignParams(Params):
    error_feedback: bool = Field(True, description="keep what is not sent and add it to the next upload (Karimireddy et al. 2019)")


class SignSGD(FeedbackCodec):
    """Scaled sign (Karimireddy et al. 2019): ||p||_1/n x sign(p), one bit a value; error feedback by default."""

    def wire_bytes(self, numel, bytes_per_param):
        return -(-int(numel) // 8) + 4                                      # compression.md 2.5

    def encode(self, v, rng):
        scale = float(np.float32(float(v.detach().abs().double().sum()) / v.numel()))
        return torch.where(v >= 0, scale, -scale).to(v.dtype)


register("codec", "none", Params, "no compression: n x bytes_per_param bytes, values untouched", NoCodec)
register("codec", "ratio", RatioParams, "bytes scaled by `ratio`; the values are NOT changed (network.compression)", Ratio)
register("codec", "fp16", Params, "IEEE half precision: 2 bytes a value, values rounded to fp16", Fp16)
register("codec", "bf16", Params, "bfloat16: 2 bytes a value, values rounded to bf16", Bf16)
register("codec", "qsgd", QSGDParams, "QSGD (Alistarh et al. 2017): stochastic s-level quantisation per bucket, unbiased", QSGD)
register("codec", "topk", SparseParams, "top-k magnitudes + 32-bit indices (Stich et al. 2018), error feedback by default", TopK)
register("codec", "randk", SparseParams, "k random entries, indices from a shared seed; error feedback by default (else scaled n/k, unbiased)", RandK)
register("codec", "signsgd", SignParams, "scaled sign ||p||_1/n sign(p), 1 bit a value (Karimireddy et al. 2019), error feedback", SignSGD)
