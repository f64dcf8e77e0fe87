"""Generated data sets are built without transient copies (docs/client-state.md, "Where the
memory of an idle client goes") and give bit for bit the data the earlier generators gave:
the reference functions below are the generators as they were before that change."""
import math
import tracemalloc

import numpy as np
import pytest

from emulator.scenario import schema as scenario
from emulator.compute.executor import ClientRows
from emulator.workloads import datasets as D
from emulator.workloads.data import RowRanges


# ------------------------------------------------------------ the generators as they were
def old_synthetic_devices(p, num_devices, rng):
    d, C = p.dim, p.classes
    sd = (lambda v: v) if p.scale == "std" else (lambda v: math.sqrt(v))
    sizes = np.floor(rng.lognormal(4, 2, num_devices)).astype(np.int64) + 50
    if p.max_samples_per_client is not None:
        sizes = np.minimum(sizes, p.max_samples_per_client)
    cov_diag = np.arange(1, d + 1, dtype=np.float64) ** (-1.2)
    if p.iid:
        W_shared = rng.normal(0, 1, (d, C))
        b_shared = rng.normal(0, 1, C)
    out = []
    for k in range(num_devices):
        if p.iid:
            W, b, v = W_shared, b_shared, np.zeros(d)
        else:
            u_k = rng.normal(0, sd(p.alpha))
            B_k = rng.normal(0, sd(p.beta))
            W = rng.normal(u_k, 1, (d, C))
            b = rng.normal(u_k, 1, C)
            v = rng.normal(B_k, 1, d)
        x = v + rng.normal(0, 1, (int(sizes[k]), d)) * np.sqrt(cov_diag)
        y = np.argmax(x @ W + b, axis=1)
        out.append((x.astype(np.float32), y.astype(np.int64)))
    return out


def old_synthetic(p, ctx):
    devices = old_synthetic_devices(p, ctx.num_clients, ctx.rng_data)
    xs_tr, ys_tr, xs_te, ys_te, idx = [], [], [], [], []
    offset = 0
    for x, y in devices:
        n = len(y)
        perm = ctx.rng_split.permutation(n)
        k = max(1, int(round(p.test_fraction * n)))
        te, tr = perm[:k], perm[k:]
        xs_tr.append(x[tr]); ys_tr.append(y[tr]); xs_te.append(x[te]); ys_te.append(y[te])
        idx.append(np.arange(offset, offset + len(tr)))
        offset += len(tr)
    return (np.concatenate(xs_tr), np.concatenate(ys_tr), np.concatenate(xs_te), np.concatenate(ys_te), idx)


def old_quadratic_rows(N, d, grad_noise, noise_samples, rng):
    if grad_noise > 0:
        S = noise_samples
        xi = rng.normal(0, grad_noise, (N, S, d))
        xi -= xi.mean(axis=1, keepdims=True)
        ids = np.repeat(np.arange(N), S)[:, None].astype(np.float32)
        x = np.concatenate([ids, xi.reshape(N * S, d).astype(np.float32)], axis=1)
        idx = [np.arange(k * S, (k + 1) * S) for k in range(N)]
    else:
        x = np.arange(N, dtype=np.float32)[:, None]
        idx = [np.array([k]) for k in range(N)]
    return x, idx


def ctx(n, seed):
    return D.DatasetContext(n, np.random.default_rng(seed), np.random.default_rng(seed + 100))


def same(a, b):
    """Bit for bit: dtype, shape and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


SETTINGS = [   # (clients, seed, synthetic options): uncapped lognormal sizes (some devices hold
    #          thousands of samples), 50 x 0.25 = 12.5 (round half to even), 2 samples (one held
    #          out), 0.9 x 2 (a device with no training row), iid, variances, other shapes
    (12, 0, dict(alpha=1.0, beta=1.0)),
    (40, 1, dict(alpha=0.5, beta=0.5, max_samples_per_client=50, test_fraction=0.25)),
    (25, 2, dict(alpha=0.0, beta=0.0, max_samples_per_client=2)),
    (9, 3, dict(alpha=1.0, beta=1.0, max_samples_per_client=2, test_fraction=0.9)),
    (20, 4, dict(iid=True, max_samples_per_client=300)),
    (15, 5, dict(alpha=2.0, beta=0.3, scale="var", dim=7, classes=3, max_samples_per_client=77)),
]


@pytest.mark.parametrize("n,seed,opts", SETTINGS)
def test_synthetic_is_bit_identical_to_the_earlier_generator(n, seed, opts):
    p = scenario.member("dataset", "synthetic", **opts)
    new = D.synthetic(p, ctx(n, seed))
    x_tr, y_tr, x_te, y_te, idx = old_synthetic(p, ctx(n, seed))
    assert same(new.x_train, x_tr) and same(new.y_train, y_tr)
    assert same(new.x_test, x_te) and same(new.y_test, y_te)
    assert len(new.client_indices) == len(idx) == n
    assert all(same(a, b) for a, b in zip(new.client_indices, idx))
    # the per-device lists (tests and users call them) are the same arrays too
    for (xa, ya), (xb, yb) in zip(D.synthetic_devices(p, n, np.random.default_rng(seed)),
                                  old_synthetic_devices(p, n, np.random.default_rng(seed))):
        assert same(xa, xb) and same(ya, yb)


@pytest.mark.parametrize("grad_noise", [0.0, 0.3])
def test_quadratic_rows_are_bit_identical_to_the_earlier_layout(grad_noise):
    p = scenario.member("dataset", "client_quadratic", dim=5, grad_noise=grad_noise, noise_samples=6)
    new = D.client_quadratic(p, ctx(7, 0))
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, (7, 5)); rng.normal(0.0, 1.0, (7, 5))      # a and c come first
    assert same(new.extra["blocks"], np.stack([np.diag(row) for row in a]))
    x, idx = old_quadratic_rows(7, 5, grad_noise, 6, rng)
    assert same(new.x_train, x) and len(new.client_indices) == 7
    assert all(same(a, b) for a, b in zip(new.client_indices, idx))


def test_synthetic_holds_one_device_beside_the_data():
    """Traced (numpy reports its buffers to tracemalloc) peak while building 600 devices of
    50 samples: the data's own 7.44 MB plus one device's draws and the 2 x 8 B per client of
    sizes; the earlier generator held every device's float32 copy, then the split copies,
    then the concatenation (about 2.5 x the data)."""
    p = scenario.member("dataset", "synthetic", max_samples_per_client=50)
    D.synthetic(p, ctx(3, 0))                      # one-time allocations of a first call (caches)
    tracemalloc.start()
    try:
        d = D.synthetic(p, ctx(600, 0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    data = sum(a.nbytes for a in (d.x_train, d.y_train, d.x_test, d.y_test))
    assert data == 600 * 50 * (60 * 4 + 8)
    assert d.client_indices.bounds.nbytes == 601 * 8
    assert peak < data + 200_000, (peak, data)


def test_row_ranges_hand_out_each_clients_rows():
    r = RowRanges([3, 0, 2])
    assert len(r) == 3 and r.bounds.tolist() == [0, 3, 3, 5]
    assert [a.tolist() for a in r] == [[0, 1, 2], [], [3, 4]]
    assert r[-1].tolist() == [3, 4] and r[2].dtype == np.int64
    with pytest.raises(IndexError):
        r[3]
    with pytest.raises(IndexError):
        r[-4]
    rows = ClientRows(r, "cpu")                    # what the executor reads
    assert rows[2].tolist() == [3, 4] and rows.host(0).tolist() == [0, 1, 2] and len(rows) == 3


def test_clients_with_the_same_batches_share_one_work_map():
    """The world's clients: each holds {model: Work} for its batch (min(batch_size, samples));
    clients of a group whose batches agree hold the same map, not a copy each."""
    from conftest import tiny
    from emulator.sim.world import World
    from emulator.workloads.models import forward_macs
    sc = tiny(**{"workload.partition": {"name": "lognormal", "sigma": 1.0}, "workload.batch_size": 60,
                 "clients.count": 12})
    w = World(scenario.load(sc))
    t = w.tasks[0]
    macs = forward_macs(t.net.module, t.data.input_shape)
    batches = np.minimum(60, t.client_sizes)
    assert len(set(batches.tolist())) < 12 and (batches < 60).any()      # some share batch 60, some less
    for c, b in zip(w.clients, batches.tolist()):
        assert list(c.work) == [0] and c.work[0].batch == b and c.work[0].flops_per_step == 6.0 * macs * b
    maps = {}
    for c, b in zip(w.clients, batches.tolist()):
        assert maps.setdefault(b, c.work) is c.work
    assert len({id(c.work) for c in w.clients}) == len(set(batches.tolist()))
