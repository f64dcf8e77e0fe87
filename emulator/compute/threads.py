"""Several jobs at once on a CPU: Python threads, each with one torch thread and its own
module replica (compute/executor.py)."""
from __future__ import annotations

import threading

import torch


class JobThreads:
    """`map(train, jobs)` on `n` Python threads, each with one torch thread and its own
    replica of every module it runs. Threads are started per call (tens of microseconds,
    beside milliseconds of training), so no idle thread outlives a level; jobs are taken
    from a shared counter (clients with more steps do not hold the others up); results come
    back in the jobs' order and the first exception is raised in the caller."""

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
