"""FedAsync's pieces that the closed forms of tests/test_tsfl.py leave out: several arrivals
merged in one call (in client order, each against the version the previous one made), the
mixing weights alpha * s(k) it reports, the FedBuff delta buffer with K > 1, the worker's
local rule, and its declarations.
Written for the survivors of `make mutate MUTATE=fedasync` (docs/mutation.md)."""
import math

import numpy as np
import pytest
import torch

from emulator import registry
from emulator.scenario import schema as scenario
from emulator.algorithms.base import AlgoContext, Arrival
from emulator.algorithms.fedasync import FedAsync


def fedasync(**kw):
    p = scenario.member("algorithm", "fedasync", lr=0.1, **kw)
    return FedAsync(p, AlgoContext(0, 1, 2, np.ones(2), torch.zeros(1), None))


def test_arrivals_of_one_call_merge_in_client_order_with_their_weights():
    """Clients 1 and 0 both trained from version 0 and arrive together: client 0 first
    (k = 0, s = 1): x = 0.6 * 1 = 0.6; then client 1 (k = 1, s = 2^-1/2, alpha_k = 0.6 / sqrt 2):
    x = (1 - alpha_k) 0.6 + alpha_k 3. The weights are alpha * s(k), no simplex."""
    a = fedasync(alpha=0.6)
    agg = a.aggregate(0, [Arrival(1, 0, [torch.tensor([3.0])], 1, 1, 0.0),
                          Arrival(0, 0, [torch.tensor([1.0])], 1, 1, 0.0)])
    al = 0.6 / math.sqrt(2)
    assert float(a.x) == pytest.approx((1 - al) * 0.6 + al * 3.0, abs=1e-6) and a.version == 2
    assert agg.weights == pytest.approx({0: 0.6, 1: al}) and agg.round_cols == {"staleness": 1}
    assert FedAsync.weights_total is None            # 0.6 + 0.42 != 1: the sum is not checked


def test_fedbuff_delta_buffer_averages_the_updates():
    """buffer 2, delta mode: x <- x + (server_lr / 2) sum s(k_i) (x_i - x_0) = 0 + 0.25 (1 + 3)."""
    a = fedasync(buffer=2, buffer_mode="delta", server_lr=0.5, staleness={"function": "constant"})
    a.broadcast(0)
    a.aggregate(0, [Arrival(0, 0, [torch.tensor([1.0])], 1, 1, 0.0)])
    assert float(a.x) == 0.0 and a.version == 0
    a.aggregate(0, [Arrival(1, 0, [torch.tensor([3.0])], 1, 1, 0.0)])
    assert float(a.x) == pytest.approx(1.0) and a.version == 1


def test_worker_trains_from_the_download_with_the_proximal_weight():
    a = fedasync(prox_rho=0.02)
    a.x = torch.tensor([1.5])
    spec = a.local_spec(0, 0, a.broadcast(0))
    assert torch.equal(spec.start, torch.tensor([1.5]))
    assert (spec.rule.lr, spec.rule.prox_mu) == (0.1, 0.02)
    assert fedasync().local_spec(0, 0, a.broadcast(0)).rule.prox_mu == 0.005


def test_declarations():
    entry = registry.get("algorithm", "fedasync")
    assert entry.factory is FedAsync and FedAsync.name == "fedasync"
    assert FedAsync.supports == frozenset({"async"})
