"""A round's jobs as cohorts (docs/engine.md, "Cohorts"), for algorithms whose client side depends on
no client (`Algorithm.cohort_spec`): the arrivals' jobs are one CohortJob, in arrival order,
whose rows (each client's own result) the algorithm aggregates (`aggregate_rows`); the jobs
of clients that started computing but did not arrive are counted (virtual work) and never
computed (nothing reads them).
Both engines of `rounds` use it: the same jobs, counted and computed alike."""
from __future__ import annotations

import numpy as np

from ...compute.jobs import CohortJob


class Cohort:
    """A round's arrivals: clients and planned steps in arrival order, and the future of their
    results, one row each (None: nobody arrived)."""

    __slots__ = ("clients", "steps", "future", "start")

    def __init__(self, clients, steps, future=None, start=None):
        self.clients, self.steps, self.future = clients, steps, future
        self.start = start               # the model the cohort trained from (a codec's reference)

    def __len__(self):
        return len(self.clients)


def submit_cohort(executor, task, t: int, spec, arrived, arrived_steps, late_steps=(),
                  counted: bool = False) -> Cohort:
    """Submit the arrivals' cohort; returns it. `late_steps`: the steps of clients that started
    computing but did not arrive (their jobs are counted, never submitted). `counted`: every
    job was counted as its client started computing (the process engine)."""
    arrived = np.asarray(arrived, dtype=np.int64)
    arrived_steps = np.asarray(arrived_steps, dtype=np.int64)
    if not counted and len(late_steps):
        executor.count_jobs(len(late_steps), int(np.sum(late_steps)))
    cohort = Cohort(arrived, arrived_steps, start=spec.start)
    if len(arrived):
        cohort.future = executor.submit_cohort(CohortJob(task.index, arrived, t, arrived_steps, spec, task.batch_size),
                                               counted)
    return cohort
