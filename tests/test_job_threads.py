"""How many torch threads a job trains on when an executor has `workers` (compute/threads.py):
one, whether the job shares its level with others or is alone in it (an asynchronous
protocol resolves one job at a time), and the caller's thread count is given back."""
from __future__ import annotations

import threading

import torch

from emulator.compute.batched import AutoExecutor, AutoParams
from emulator.compute.executor import SequentialExecutor, SequentialParams
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import resolve
from emulator.workloads import models

from conftest import executor_on_random_data

CTX = models.ModelContext((1, 16, 16), 10)
SIZES = [40, 40, 40]


def _executor(cls, params):
    torch.manual_seed(0)
    net = FlatModel(models.cnn_mnist(models.CnnMnistParams(), CTX), torch.device("cpu"), torch.float64)
    return executor_on_random_data(cls, net, CTX.input_shape, SIZES, params), net


def _job(net, c, w=None):
    return TrainJob(0, c, 1, 3, LocalSpec(net.initial_vector() if w is None else w, LocalRule(lr=0.1)), 8)


def _watch(monkeypatch):
    seen = []
    real = SequentialExecutor.train
    monkeypatch.setattr(SequentialExecutor, "train",
                        lambda self, job, net=None: (seen.append((job.client, threading.get_ident(),
                                                                  torch.get_num_threads())), real(self, job, net))[1])
    return seen


def test_a_lone_job_trains_on_one_torch_thread_in_the_caller(monkeypatch):
    seen = _watch(monkeypatch)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for cls, params in ((SequentialExecutor, SequentialParams(workers=2)), (AutoExecutor, AutoParams())):
            seen.clear()
            ex, net = _executor(cls, params)
            assert ex.workers == 2
            resolve([ex.submit(_job(net, 1))])                 # alone in its level
            assert seen == [(1, threading.get_ident(), 1)]
            assert torch.get_num_threads() == 2                # given back
            seen.clear()
            resolve([ex.submit(_job(net, c)) for c in range(3)])   # a level of three: on the workers
            assert sorted(s[0] for s in seen) == [0, 1, 2] and {s[2] for s in seen} == {1}
            assert threading.get_ident() not in {s[1] for s in seen}
            assert torch.get_num_threads() == 2
        seen.clear()                                           # one worker: the caller's threads
        ex, net = _executor(SequentialExecutor, SequentialParams())
        resolve([ex.submit(_job(net, 1))])
        assert seen == [(1, threading.get_ident(), 2)]
    finally:
        torch.set_num_threads(before)

