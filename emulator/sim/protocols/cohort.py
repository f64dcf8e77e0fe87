"""A round's jobs as cohorts (DESIGN.md section 3), for algorithms whose client side depends on
no client (`Algorithm.cohort_spec`): the arrivals' jobs are one CohortJob, in arrival order,
whose rows (each client's own result) the algorithm aggregates (`aggregate_rows`); the
clients that started computing but did not arrive are a second cohort that nothing reads, so
it is never computed.
Both engines of `rounds` use it: the same jobs, counted and computed alike."""
from __future__ import annotations

import numpy as np

from ...compute.jobs import CohortJob


class Cohort:
    """A round's arrivals: clients and planned steps in arrival order, and the future of their
    results, one row each (None: nobody arrived)."""

    __slots__ = ("clients", "steps", "future")

    def __init__(self, clients, steps, future=None):
        self.clients, self.steps, self.future = clients, steps, future

    def __len__(self):
        return len(self.clients)


def submit_cohorts(executor, task, t: int, spec, arrived, arrived_steps, late, late_steps,
                   counted: bool = False) -> Cohort:
    """Submit the arrivals' cohort and the late clients' one (if any); returns the arrivals'.
    `counted`: their jobs were counted as each client started (the process engine)."""
    arrived = np.asarray(arrived, dtype=np.int64)
    arrived_steps = np.asarray(arrived_steps, dtype=np.int64)
    if len(late):
        executor.submit_cohort(CohortJob(task.index, np.asarray(late, dtype=np.int64), t,
                                         np.asarray(late_steps, dtype=np.int64), spec, task.batch_size), counted)
    cohort = Cohort(arrived, arrived_steps)
    if len(arrived):
        cohort.future = executor.submit_cohort(CohortJob(task.index, arrived, t, arrived_steps, spec, task.batch_size),
                                               counted)
    return cohort
