"""Partitions: how a centralised dataset is split among clients (docs/algorithms/workloads.md section 2).

Every partitioner draws from the `partition` stream and returns one index array per
client; sizes always sum to the number of training samples.
"""
from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from ..errors import ScenarioError
from ..registry import Params, register
from .data import IndexRows


def largest_remainder(shares: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to `shares` that sum exactly to `total`."""
    shares = np.asarray(shares, dtype=np.float64)
    raw = shares / shares.sum() * total
    out = np.floor(raw).astype(np.int64)
    rest = total - int(out.sum())
    if rest > 0:
        order = np.argsort(-(raw - out), kind="stable")
        out[order[:rest]] += 1
    return out


def _cut(perm: np.ndarray, sizes: np.ndarray) -> list:
    return [np.sort(a) for a in np.split(perm, np.cumsum(sizes)[:-1])]


class SizesSpec(Params):
    """Client sizes for a partition: LogNormal(0, sigma) shares, or a repeating pattern."""
    lognormal: Optional[float] = Field(None, gt=0, description="client sizes proportional to LogNormal(0, sigma)")
    pattern: Optional[list[int]] = Field(None, min_length=1, description="client i gets pattern[i mod len] samples (e.g. [200] for equal sizes)")

    @model_validator(mode="after")
    def _one(self):
        if (self.lognormal is None) == (self.pattern is None):
            raise ValueError("give exactly one of lognormal or pattern")
        if self.pattern is not None and min(self.pattern) < 1:
            raise ValueError("pattern sizes must be >= 1")
        return self


class IidParams(Params):
    pass


@register("partition", "iid", IidParams, "a seeded permutation cut into equal parts (sizes differ by at most 1)")
def iid(p, y, num_clients, rng, path):
    n = len(y)
    sizes = np.full(num_clients, n // num_clients)
    sizes[: n % num_clients] += 1
    return _cut(rng.permutation(n), sizes)


class LabelOrder(Params):
    """Label-skewed partitions may place their clients in label order: device groups are
    contiguous blocks of client ids, so `order: label` makes a device class hold labels of its
    own (slow phones that see mostly some digits), the correlation the selection study needs."""

    order: Literal["drawn", "label"] = Field(
        "drawn", description="drawn: clients as drawn; label: clients sorted by their mean label (then by "
                             "their first sample), so contiguous device groups hold correlated labels")


def in_label_order(parts: list, y: np.ndarray) -> list:
    """The same parts, sorted by mean label (ties: first sample index); no random draw."""
    key = [(float(np.mean(y[a])) if len(a) else float("inf"), int(a[0]) if len(a) else -1) for a in parts]
    return [parts[i] for i in sorted(range(len(parts)), key=key.__getitem__)]


class DirichletParams(LabelOrder):
    alpha: float = Field(gt=0, description="concentration; smaller = more label skew")
    min_size: int = Field(1, ge=0, description="redraw until every client has at least this many samples (100 tries)")
    sizes: Optional[SizesSpec] = Field(None, description="client sizes, e.g. {lognormal: 0.3} or {pattern: [200]}: each client then draws its own Dir(alpha) label mixture and samples without replacement")


@register("partition", "dirichlet", DirichletParams,
          "label skew (Hsu et al. 2019): per class, shares over clients ~ Dir(alpha)")
def dirichlet(p, y, num_clients, rng, path):
    if p.sizes is not None:
        return _dirichlet_with_sizes(p, y, num_clients, rng, path)
    classes = np.unique(y)
    by_class = {c: np.flatnonzero(y == c) for c in classes}
    for _ in range(100):
        parts = [[] for _ in range(num_clients)]
        for c in classes:
            idx = by_class[c][rng.permutation(len(by_class[c]))]
            q = rng.dirichlet(np.full(num_clients, p.alpha))
            counts = largest_remainder(q, len(idx))
            for k, a in enumerate(np.split(idx, np.cumsum(counts)[:-1])):
                parts[k].append(a)
        parts = [np.sort(np.concatenate(a)) for a in parts]
        if min(len(a) for a in parts) >= p.min_size:
            return parts
    raise ScenarioError([(f"{path}.min_size", f"no Dirichlet({p.alpha}) draw gave every one of {num_clients} "
                          f"clients at least {p.min_size} samples in 100 tries; lower min_size or raise alpha")])


def _dirichlet_with_sizes(p, y, num_clients, rng, path):
    """Per-client label proportions ~ Dir(alpha) and lognormal sizes; samples without replacement."""
    if p.sizes.pattern is not None:
        sizes = np.array([p.sizes.pattern[i % len(p.sizes.pattern)] for i in range(num_clients)])
        if sizes.sum() > len(y):
            raise ScenarioError([(f"{path}.sizes.pattern", f"the pattern asks for {int(sizes.sum())} samples; "
                                  f"the data set has {len(y)}")])
    else:
        sizes = _lognormal_sizes(p.sizes.lognormal, len(y), num_clients, max(p.min_size, 1), rng, path)
    classes = np.unique(y)
    pools = {c: list(np.flatnonzero(y == c)[rng.permutation(int((y == c).sum()))]) for c in classes}
    parts = []
    for k in range(num_clients):
        q = rng.dirichlet(np.full(len(classes), p.alpha))
        want = largest_remainder(q, int(sizes[k]))
        mine = []
        short = 0
        for c, w in zip(classes, want):
            take = min(w, len(pools[c]))
            mine += [pools[c].pop() for _ in range(take)]
            short += w - take
        while short > 0:  # a class ran out: fill from the largest remaining classes
            c = max(classes, key=lambda c: len(pools[c]))
            mine.append(pools[c].pop())
            short -= 1
        parts.append(np.sort(np.array(mine, dtype=np.int64)))
    return parts


class ShardsParams(LabelOrder):
    classes_per_client: int = Field(2, ge=1, description="shards (hence at most this many labels) per client")


@register("partition", "shards", ShardsParams,
          "McMahan et al. 2017: sort by label, cut into K*c equal shards, c random shards per client")
def shards(p, y, num_clients, rng, path):
    n_shards = num_clients * p.classes_per_client
    if n_shards > len(y):
        raise ScenarioError([(f"{path}.classes_per_client",
                              f"{n_shards} shards for {len(y)} samples; lower classes_per_client or clients.count")])
    order = np.argsort(y, kind="stable")
    sizes = np.full(n_shards, len(y) // n_shards)
    sizes[: len(y) % n_shards] += 1
    pieces = np.split(order, np.cumsum(sizes)[:-1])
    assign = rng.permutation(n_shards)
    return [np.sort(np.concatenate([pieces[s] for s in assign[k::num_clients]])) for k in range(num_clients)]


def _lognormal_sizes(sigma, n, num_clients, min_size, rng, path):
    if min_size * num_clients > n:
        raise ScenarioError([(path, f"{num_clients} clients x min_size {min_size} exceeds {n} samples")])
    raw = rng.lognormal(0.0, sigma, num_clients)
    sizes = largest_remainder(raw, n - min_size * num_clients) + min_size
    return sizes


class LognormalParams(Params):
    sigma: float = Field(gt=0, description="log-space spread of client sizes")
    min_size: int = Field(1, ge=1, description="smallest client size")


@register("partition", "lognormal", LognormalParams,
          "unbalanced sizes ~ LogNormal(0, sigma) scaled to the data set, labels IID within clients")
def lognormal(p, y, num_clients, rng, path):
    sizes = _lognormal_sizes(p.sigma, len(y), num_clients, p.min_size, rng, f"{path}.min_size")
    return _cut(rng.permutation(len(y)), sizes)


class NaturalParams(Params):
    pass


@register("partition", "natural", NaturalParams, "the data set's own per-device split (synthetic, quadratic)")
def natural(p, y, num_clients, rng, path):  # the world uses data.client_indices directly
    raise AssertionError("natural partition is applied by the world, not called")


def partition_data(data, spec, num_clients: int, rng, path: str):
    """Fill data.client_indices according to `spec` (a validated partition block)."""
    name = spec.name
    if name == "natural":
        if not data.natural:
            raise ScenarioError([(f"{path}.name", f"dataset {data.name} has no per-device split; "
                                  "use iid, dirichlet, shards or lognormal")])
        if len(data.client_indices) != num_clients:
            raise ScenarioError([(f"{path}.name", f"dataset has {len(data.client_indices)} devices, "
                                  f"clients.count is {num_clients}")])
        return data
    if data.task == "quadratic":
        raise ScenarioError([(f"{path}.name", "the quadratic belongs to its clients; only `natural` applies")])
    if len(data.y_train) < num_clients:
        raise ScenarioError([(path, f"{len(data.y_train)} training samples cannot be split among {num_clients} clients")])
    from ..registry import get
    parts = get("partition", name).factory(spec, data.y_train, num_clients, rng, path)
    if isinstance(spec, LabelOrder) and spec.order == "label":
        parts = in_label_order(parts, data.y_train)
    data.client_indices = IndexRows(parts)      # one flat array, not an array object per client
    data.natural = False
    return data
