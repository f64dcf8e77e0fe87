"""Several jobs at once on a CPU: Python threads, each with `threads` torch threads and its
own module replica (compute/executor.py), and how many of them a run gets.

The rule (docs/performance.md, "A busy machine"): every job and every evaluation runs on
`executor.threads` torch threads, 1 by default, and a run trains `cores / threads` jobs at
once (`workers`). Two intra-op threads on one small job wait for each other at every
operation's barrier, and OpenMP spins while it waits: on a busy machine a preempted thread
stalls its partner, which burns its own time slice spinning (quickstart on two intra-op
threads at load 7-10: 96-175 s and 52-64 CPU s for 10 rounds, against 10-20 s and 5-7 CPU s
on one). One thread per job never waits on another, and two jobs at once on one thread each
keep both cores of a quiet machine busy. A job computes the same bits whether it ran alone
or beside others, so a run's numbers depend on `threads`, never on `workers` or the cores.
"""
from __future__ import annotations

import threading

import torch


def default_workers(cpus: int, threads: int) -> int:
    """Jobs trained at once when the scenario does not say: the run's cores / `threads`."""
    return max(1, int(cpus) // max(1, int(threads)))


class JobThreads:
    """`map(train, jobs)` on `n` Python threads, each with `threads` torch threads and its own
    replica of every module it runs. Threads are started per call (tens of microseconds,
    beside milliseconds of training), so no idle thread outlives a level; jobs are taken
    from a shared counter (clients with more steps do not hold the others up); results come
    back in the jobs' order and the first exception is raised in the caller. A single job
    runs in the caller, on `threads` torch threads and the task's own module."""

    def __init__(self, n: int, threads: int = 1):
        self.n, self.threads = n, threads
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
            torch.set_num_threads(self.threads)
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

    def _alone(self, train, job, tasks):
        """One job in the caller on `threads` torch threads (worker 0's module: the task's own)."""
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return train(job, tasks[job.task].net)
        finally:
            torch.set_num_threads(before)
