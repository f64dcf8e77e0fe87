"""How many torch threads a job trains on, and how many jobs train at once
(compute/threads.py): each job on `executor.threads` torch threads (1 by default), whether it
shares its level with others or is alone in it (an asynchronous protocol resolves one job at
a time); `workers` defaults to the run's cores / threads; the caller's thread count is given
back; and a job's numbers depend on `threads`, never on `workers`."""
from __future__ import annotations

import threading

import pytest
import torch

from emulator.compute.batched import AutoExecutor, AutoParams, BatchedExecutor, BatchedParams
from emulator.compute.executor import SequentialExecutor, SequentialParams
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import resolve
from emulator.workloads import models

from conftest import executor_on_random_data

CTX = models.ModelContext((1, 16, 16), 10)
SIZES = [40, 40, 40]


def _executor(cls, params, ctx=CTX, sizes=SIZES, cpus=None):
    torch.manual_seed(0)
    net = FlatModel(models.cnn_mnist(models.CnnMnistParams(), ctx), torch.device("cpu"), torch.float64)
    ex = executor_on_random_data(cls, net, ctx.input_shape, sizes, params)
    if cpus is not None:                      # as World builds it: the run's cores given
        ex = cls(ex.tasks, ex.streams, ex.device, params, cpus=cpus)
    return ex, net


def _job(net, c, w=None, steps=3, batch=8):
    return TrainJob(0, c, 1, steps, LocalSpec(net.initial_vector() if w is None else w, LocalRule(lr=0.1)), batch)


def _watch(monkeypatch):
    seen = []
    real = SequentialExecutor.train
    monkeypatch.setattr(SequentialExecutor, "train",
                        lambda self, job, net=None: (seen.append((job.client, threading.get_ident(),
                                                                  torch.get_num_threads())), real(self, job, net))[1])
    return seen


def test_a_job_trains_on_executor_threads_alone_or_beside_others(monkeypatch):
    seen = _watch(monkeypatch)
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for threads in (1, 2):
            for cls, params in ((SequentialExecutor, SequentialParams(workers=2, threads=threads)),
                                (AutoExecutor, AutoParams(workers=2, threads=threads))):
                seen.clear()
                ex, net = _executor(cls, params)
                assert ex.workers == 2
                resolve([ex.submit(_job(net, 1))])                 # alone in its level: in the caller
                assert seen == [(1, threading.get_ident(), threads)]
                assert torch.get_num_threads() == 3                # given back
                seen.clear()
                resolve([ex.submit(_job(net, c)) for c in range(3)])   # a level of three: on the workers
                assert sorted(s[0] for s in seen) == [0, 1, 2] and {s[2] for s in seen} == {threads}
                assert threading.get_ident() not in {s[1] for s in seen}
                assert torch.get_num_threads() == 3
        seen.clear()                                           # one worker: the caller's threads
        ex, net = _executor(SequentialExecutor, SequentialParams(workers=1))
        resolve([ex.submit(_job(net, 1))])
        assert seen == [(1, threading.get_ident(), 3)]
    finally:
        torch.set_num_threads(before)


def test_default_workers_are_the_runs_cores_over_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for cls, P in ((SequentialExecutor, SequentialParams), (BatchedExecutor, BatchedParams),
                       (AutoExecutor, AutoParams)):
            assert _executor(cls, P())[0].workers == 2                       # cpus: torch's count
            assert _executor(cls, P(threads=2))[0].workers == 1
            assert _executor(cls, P(), cpus=5)[0].workers == 5               # cpus as World gives them
            assert _executor(cls, P(threads=2), cpus=5)[0].workers == 2
            assert _executor(cls, P(threads=8), cpus=5)[0].workers == 1
            assert _executor(cls, P(workers=3, threads=2), cpus=1)[0].workers == 3   # as given
            assert _executor(cls, P())[0].params.threads == 1                 # the default
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_workers_never_change_a_jobs_numbers_at_two_threads():
    """28 x 28 inputs, batch 32: two intra-op threads give other bits than one (checked
    below), and a job on two workers of two threads gives the loop's bits on two threads."""
    ctx = models.ModelContext((1, 28, 28), 10)
    out = {}
    for threads, workers in ((1, 1), (2, 1), (2, 2)):
        ex, net = _executor(SequentialExecutor, SequentialParams(workers=workers, threads=threads), ctx, [64] * 4)
        before = torch.get_num_threads()
        torch.set_num_threads(threads)             # the caller's count, as World sets it
        try:
            futs = [ex.submit(_job(net, c, steps=3, batch=32)) for c in range(4)]
            resolve(futs)
        finally:
            torch.set_num_threads(before)
        out[threads, workers] = torch.stack([f.value().params for f in futs])
    assert not torch.equal(out[1, 1], out[2, 1])       # the thread count shows in the bits
    assert torch.equal(out[2, 2], out[2, 1])           # the workers do not
