"""Several jobs at once on a CPU: Python threads, each with one torch thread and its own
module replica (compute/executor.py). A job alone in its level runs on one torch thread too,
in the caller: two intra-op threads on one small job are slower than one (an OpenMP barrier
per operation; under load, a worker preempted inside a barrier stalls the other: 0.16-0.34 s
against 0.04 s per W1 job, docs/performance-peers.md), and a job computes the same bits
whether it ran alone or beside others."""
from __future__ import annotations

import threading

import torch


class JobThreads:
    """`map(train, jobs)` on `n` Python threads, each with one torch thread and its own
    replica of every module it runs. Threads are started per call (tens of microseconds,
    beside milliseconds of training), so no idle thread outlives a level; jobs are taken
    from a shared counter (clients with more steps do not hold the others up); results come
    back in the jobs' order and the first exception is raised in the caller. A single job
    runs in the caller, on one torch thread and the task's own module."""

    def __init__(self, n: int):
        self.n = n
        self._replicas = [dict() for _ in range(n)]    # worker -> task -> FlatModel

    def _make_replicas(self, jobs, tasks, workers: int):
        """Before the threads start (the original module must not be running while it is
        copied): worker 0 runs the task's own module, the others a replica each."""
        for task in {job.task for job in jobs}:
            for k in range(workers):
                if task not in self._replicas[k]:
                    self._replicas[k][task] = tasks[task].net if k == 0 else tasks[task].net.replica()

    def map(self, train, jobs: list, tasks) -> list:
        if len(jobs) == 1:
            return [self._alone(train, jobs[0], tasks)]
        results = [None] * len(jobs)
        errors = []
        nxt = iter(range(len(jobs)))
        lock = threading.Lock()

        def work(worker):
            torch.set_num_threads(1)
            while not errors:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                try:
                    results[i] = train(jobs[i], self._replicas[worker][jobs[i].task])
                except BaseException as e:       # re-raised in the caller
                    errors.append(e)

        workers = min(self.n, len(jobs))
        self._make_replicas(jobs, tasks, workers)
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            torch.set_num_threads(before)
        if errors:
            raise errors[0]
        return results

    @staticmethod
    def _alone(train, job, tasks):
        """One job in the caller on one torch thread (worker 0's module: the task's own)."""
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return train(job, tasks[job.task].net)
        finally:
            torch.set_num_threads(before)
