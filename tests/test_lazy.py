"""Laziness: a job whose result is never read is never computed; dependencies resolve first."""
import numpy as np
import torch

from emulator.compute.executor import ClientRows, SequentialExecutor, TaskData
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import derived, resolve
from emulator.rng import Streams


def make_exec():
    torch.manual_seed(0)
    net = FlatModel(torch.nn.Linear(4, 3), torch.device("cpu"), torch.float32)
    x = torch.randn(40, 4)
    y = torch.randint(0, 3, (40,))
    rows = ClientRows([np.arange(i * 10, (i + 1) * 10) for i in range(4)], torch.device("cpu"))
    return SequentialExecutor({0: TaskData(net, x, y, rows)}, Streams(0), torch.device("cpu")), net


def job(ex, net, client, start, steps=3, round_=1):
    return ex.submit(TrainJob(0, client, round_, steps, LocalSpec(start, LocalRule(lr=0.1)), 5))


def test_unread_jobs_never_run_and_chains_resolve_in_order():
    ex, net = make_exec()
    w0 = net.initial_vector()
    a = job(ex, net, 0, w0)
    b = job(ex, net, 1, w0)                       # never read
    fuse = lambda r: r.params + 0.5 * (r.params - w0)  # noqa: E731  FedUMF-style start from a's result
    fused = derived(fuse, a)
    c = job(ex, net, 2, fused, round_=2)
    assert ex.stats.grad_evals == 0
    out = resolve([c])[0]
    assert a.done and c.done and not b.done
    assert ex.stats.grad_evals == 6 and ex.stats.jobs_computed == 2
    # same values as computing a first, then c, eagerly
    ex2, _ = make_exec()
    a2 = job(ex2, net, 0, w0)
    start2 = fuse(a2.value())
    c2 = job(ex2, net, 2, start2, round_=2)
    assert torch.equal(out.params, c2.value().params)


def test_batches_depend_only_on_the_key():
    ex, net = make_exec()
    w0 = net.initial_vector()
    x = job(ex, net, 3, w0, steps=7, round_=5)
    job(ex, net, 1, w0).value()
    first = x.value().params
    ex2, _ = make_exec()
    y = job(ex2, net, 3, w0, steps=7, round_=5)
    assert torch.equal(first, y.value().params)
