"""BatchNorm models (vgg11, resnet18) train in the sequential executor: running statistics
are updated by each client's local steps in train mode and follow the aggregation
FedAvg-style (weighted mean with the aggregation's weights); evaluation runs in eval mode on
the global statistics. The batched executor refuses them; auto runs them sequentially."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from emulator.scenario import schema as scenario
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.errors import ScenarioError
from emulator.sim.world import World

from conftest import tiny


def bn_scenario(executor="sequential", model="resnet18", dtype="float32"):
    sc = tiny(**{"run.rounds": 1, "clients.count": 2, "protocol.select": {"model": "all"},
                 "protocol.local_steps": 3, "workload.batch_size": 8, "workload.model": {"name": model},
                 "workload.dataset": {"name": "digits", "test_fraction": 0.05}})
    sc["workload"]["partition"] = {"name": "dirichlet", "alpha": 0.5}      # unequal n_k: real weights
    sc["executor"] = {"name": executor, "dtype": dtype}
    return sc


def float_buffers(m):
    return torch.cat([b.reshape(-1) for b in m.buffers() if b.is_floating_point()])


def params(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def test_resnet18_round_equals_a_hand_written_fedavg_with_batchnorm():
    w = World(scenario.load(bn_scenario()))
    task = w.tasks[0]
    init = copy.deepcopy(task.net.module)          # functional training never touches it
    assert task.net.buffer_dim == float_buffers(init).numel() > 0
    w.run()
    assert w.status == "complete"
    td = w.executor.tasks[0]
    n = task.client_sizes.astype(float)
    ps, bs = [], []
    for cid in range(2):                           # the same batches, plain torch SGD in train mode
        m = copy.deepcopy(init).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        rows = td.client_rows[cid]
        job = TrainJob(0, cid, 1, 3, LocalSpec(None, LocalRule(lr=0.1)), 8)
        for b in w.executor.plan(job):
            idx = rows[torch.from_numpy(b)]
            opt.zero_grad()
            F.cross_entropy(m(td.x[idx]), td.y[idx]).backward()
            opt.step()
        ps.append(params(m))
        bs.append(float_buffers(m))
    wts = n / n.sum()
    assert abs(wts[0] - 0.5) > 0.01                # the weighting is exercised
    want_p = wts[0] * ps[0] + wts[1] * ps[1]
    want_b = wts[0] * bs[0] + wts[1] * bs[1]
    # float32: the functional and the module paths sum in different orders, so compare the
    # error with the size of the round's update (an unweighted mean is 100x further off)
    def rel(got, want, start):
        return float((got - want).norm() / (want - start).norm())
    p0, b0 = params(init), float_buffers(init)
    assert rel(task.algorithm.global_params(), want_p, p0) < 1e-3
    assert rel(task.buffers, want_b, b0) < 1e-4
    assert rel(0.5 * (bs[0] + bs[1]), want_b, b0) > 1e-2
    assert not torch.allclose(task.buffers, float_buffers(init))     # statistics did move
    # evaluation: eval mode on the global parameters and statistics
    m = copy.deepcopy(init)
    torch.nn.utils.vector_to_parameters(task.algorithm.global_params(), m.parameters())
    with torch.no_grad():
        fb = [b for b in m.buffers() if b.is_floating_point()]
        for b, v in zip(fb, torch.split(task.buffers, [b.numel() for b in fb])):
            b.copy_(v.view_as(b))
        m.eval()
        ev = task.evaluate.x, task.evaluate.y
        acc = int((m(ev[0]).argmax(1) == ev[1]).sum()) / len(ev[1])
    row = w.recorder.metrics[-1]
    assert row["test_acc"] == pytest.approx(acc, abs=1e-12)
    with torch.no_grad():                          # train-mode statistics give another answer
        m.train()
        assert int((m(ev[0]).argmax(1) == ev[1]).sum()) / len(ev[1]) != acc
    # the statistics travel with the model: (parameters + running statistics) x 4 bytes each way
    log = w.recorder.rounds[0]
    assert (log.bytes_up == (task.net.dim + task.net.buffer_dim) * 4).all()
    assert (log.bytes_down == (task.net.dim + task.net.buffer_dim) * 4).all()


@pytest.mark.slow
def test_batched_refuses_batchnorm_and_auto_runs_it_sequentially(run_in):
    with pytest.raises(ScenarioError) as e:
        World(scenario.load(bn_scenario("batched")))
    (path, msg), = e.value.problems
    assert path == "executor.name" and "BatchNorm" in msg and "sequential or auto" in msg
    # both train a CPU round's clients on `workers` threads (default: the run's cores) of
    # `executor.threads` torch threads each (default 1): the same kernels give the same bits,
    # whatever the worker count (pytest with or without -n)
    sc = bn_scenario("sequential", "resnet18")
    seq = run_in(sc, "seq")
    auto = run_in(bn_scenario("auto", "resnet18"), "auto")
    assert seq.metrics["test_acc"].tolist() == auto.metrics["test_acc"].tolist()
    assert np.array_equal(np.load(seq.run_dir / "buffers.npy"), np.load(auto.run_dir / "buffers.npy"))
