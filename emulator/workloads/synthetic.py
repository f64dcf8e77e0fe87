"""FedProx Synthetic(alpha, beta) (docs/algorithms/workloads.md 1.3): per-device generated
logistic data with its own per-device split, generated sequentially (every device in turn
from the `data` stream, at set-up) or keyed (each device from its own stream when it first
trains: workloads/keyed.py)."""
from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ..registry import register
from .data import FederatedData, RowRanges
from .datasets import DatasetContext
from .keyed import GeneratedParams, KeyedRows, is_keyed, keyed_test_set


class SyntheticParams(GeneratedParams):
    alpha: float = Field(1.0, ge=0, description="how much local models differ (u_k ~ N(0, alpha))")
    beta: float = Field(1.0, ge=0, description="how much local data differ (B_k ~ N(0, beta))")
    iid: bool = Field(False, description="IID variant: one W, b for all devices, v_k = 0")
    dim: int = Field(60, ge=1, description="feature dimension d")
    classes: int = Field(10, ge=2, description="number of classes C")
    scale: Literal["std", "var"] = Field("std", description="alpha/beta are standard deviations (the public generator) or variances")
    max_samples_per_client: Optional[int] = Field(None, ge=2, description="cap on a device's sample count")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="per-device share held out, pooled for testing")


def synthetic_sizes(p: SyntheticParams, num_devices: int, rng: np.random.Generator) -> np.ndarray:
    """n_k = floor(LogNormal(4, 2)) + 50 per device, capped: the generator's first draw."""
    sizes = np.floor(rng.lognormal(4, 2, num_devices)).astype(np.int64) + 50
    if p.max_samples_per_client is not None:
        sizes = np.minimum(sizes, p.max_samples_per_client)
    return sizes


def synthetic_shared(p: SyntheticParams, rng: np.random.Generator):
    """The draws every device shares, after `synthetic_sizes`: (W, b) of the IID variant, else None."""
    if p.iid:
        W_shared = rng.normal(0, 1, (p.dim, p.classes))
        return W_shared, rng.normal(0, 1, p.classes)
    return None


def synthetic_device(p: SyntheticParams, n: int, rng: np.random.Generator, shared):
    """One device's (x float64, y) of FedProx Synthetic(alpha, beta), drawn from `rng` in the
    generator's order (u_k, B_k, W_k, b_k, v_k, then the n rows)."""
    d, C = p.dim, p.classes
    spread = np.sqrt(np.arange(1, d + 1, dtype=np.float64) ** (-1.2))     # sqrt of the covariance diagonal
    if shared is not None:
        (W, b), v = shared, np.zeros(d)
    else:
        sd = (lambda v: v) if p.scale == "std" else (lambda v: math.sqrt(v))
        u_k = rng.normal(0, sd(p.alpha))
        B_k = rng.normal(0, sd(p.beta))
        W = rng.normal(u_k, 1, (d, C))
        b = rng.normal(u_k, 1, C)
        v = rng.normal(B_k, 1, d)
    x = rng.normal(0, 1, (n, d))
    x *= spread
    x += v                        # v + z * spread, in place (IEEE addition commutes)
    return x, np.argmax(x @ W + b, axis=1)


def synthetic_draws(p: SyntheticParams, sizes: np.ndarray, rng: np.random.Generator):
    """FedProx Synthetic(alpha, beta) (docs/algorithms/workloads.md 1.3): yields each device's
    (x_k float64, y_k) in turn, drawn from `rng` after `synthetic_sizes` (`generation:
    sequential`). One device's arrays live at a time: the caller keeps what it needs
    (docs/client-state.md)."""
    shared = synthetic_shared(p, rng)
    for n in sizes.tolist():
        yield synthetic_device(p, n, rng, shared)


def synthetic_devices(p: SyntheticParams, num_devices: int, rng: np.random.Generator):
    """FedProx Synthetic(alpha, beta): a list of (x_k float32, y_k int64) per device."""
    return [(x.astype(np.float32), y.astype(np.int64))
            for x, y in synthetic_draws(p, synthetic_sizes(p, num_devices, rng), rng)]


def held_out(p: SyntheticParams, sizes):
    """A device's held-out test rows: `test_fraction` of its samples, rounded half to even (as
    round()), at least one; both generations use it."""
    return np.maximum(1, np.rint(p.test_fraction * sizes).astype(np.int64))


def data_name(p: SyntheticParams) -> str:
    return "synthetic_iid" if p.iid else f"synthetic({p.alpha},{p.beta})"


@register("dataset", "synthetic", SyntheticParams,
          "FedProx Synthetic(alpha, beta): per-device generated logistic data (natural split)")
def synthetic(p: SyntheticParams, ctx: DatasetContext) -> FederatedData:
    """Each device's samples, a random `test_fraction` of them (at least one) pooled for
    testing: written device by device into arrays allocated once (the sizes are drawn first),
    so building the data set holds one device's draws beside the data itself. Keyed generation
    (`generation`, workloads/keyed.py) draws each device when it first trains instead."""
    if is_keyed(p.generation, ctx.num_clients):
        return keyed_synthetic(p, ctx)
    sizes = synthetic_sizes(p, ctx.num_clients, ctx.rng_data)
    n_test = held_out(p, sizes)
    n_train = sizes - n_test
    x_tr = np.empty((int(n_train.sum()), p.dim), dtype=np.float32)
    y_tr = np.empty(len(x_tr), dtype=np.int64)
    x_te = np.empty((int(n_test.sum()), p.dim), dtype=np.float32)
    y_te = np.empty(len(x_te), dtype=np.int64)
    o_tr = o_te = 0
    for (x, y), n, k in zip(synthetic_draws(p, sizes, ctx.rng_data), sizes.tolist(), n_test.tolist()):
        perm = ctx.rng_split.permutation(n)        # its own stream: the order of draws is the old one
        te, tr = perm[:k], perm[k:]
        x_tr[o_tr:o_tr + n - k] = x[tr]
        y_tr[o_tr:o_tr + n - k] = y[tr]
        x_te[o_te:o_te + k] = x[te]
        y_te[o_te:o_te + k] = y[te]
        o_tr += n - k
        o_te += k
    name = data_name(p)
    return FederatedData(name, x_tr, y_tr, x_te, y_te, p.classes, (p.dim,),
                         client_indices=RowRanges(n_train), natural=True,
                         extra={"test_client_indices": RowRanges(n_test)})   # per-client evaluation's rows: test


def keyed_synthetic(p: SyntheticParams, ctx: DatasetContext) -> FederatedData:
    """Synthetic(alpha, beta) generated keyed: the sizes (and the IID variant's shared W, b)
    from the data stream at set-up, each device's rows and its held-out split from its own
    stream (`ctx.device_stream(k)`) when asked; the test set from a seeded sample of devices."""
    sizes = synthetic_sizes(p, ctx.num_clients, ctx.rng_data).astype(np.int32)
    shared = synthetic_shared(p, ctx.rng_data)
    stream = ctx.device_stream

    def make_all(k: int) -> tuple:
        rng = stream(k)
        n = int(sizes[k])
        m = int(held_out(p, np.int64(n)))
        x, y = synthetic_device(p, n, rng, shared)
        perm = rng.permutation(n)
        te, tr = perm[:m], perm[m:]
        return x[tr].astype(np.float32), y[tr].astype(np.int64), x[te].astype(np.float32), y[te].astype(np.int64)

    rows = KeyedRows(sizes - held_out(p, sizes), lambda k: make_all(k)[:2], (p.dim,))
    x_te, y_te, devices = keyed_test_set(make_all, ctx.num_clients, p.test_devices, ctx.test_stream)
    name = data_name(p)
    return FederatedData(name, np.zeros((0, p.dim), np.float32), np.zeros(0, np.int64), x_te, y_te, p.classes,
                         (p.dim,), client_indices=rows, natural=True, extra={"test_devices": devices})
