"""Where a W1-het job's wall time goes under flemu's `auto` executor (Linux: /proc schedstat).

    .venv/bin/python -m benchmarks.job_time [RUNS]

Each job on a worker thread is timed three ways from its thread's /proc/thread-self/schedstat:
on a CPU, runnable but waiting for a core (other processes hold them), and neither (blocked:
waiting for the GIL or a lock). On this shared 2-core machine (W1-het E0, 1 + 4 rounds, 4 runs
at load 6.9-8.2): 16-23 % on a CPU, 75-82 % waiting for a core, 2-3 % blocked. A slow `auto`
round under load is CPU starvation by other processes, not the two workers waiting on each
other (docs/performance-peers.md).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np


def _schedstat() -> tuple:
    """(seconds on a CPU, seconds runnable on a run queue) of the calling thread."""
    on, queued, _ = open("/proc/thread-self/schedstat").read().split()
    return int(on) / 1e9, int(queued) / 1e9


def main(runs: int = 3):
    import emulator.compute.threads as threads
    from benchmarks.emulation import scenario
    from benchmarks.common import build_world, log

    spans = []
    real_map = threads.JobThreads.map

    def timed_map(self, train, jobs, tasks):
        def timed(job, net):
            t0, (c0, q0) = time.perf_counter(), _schedstat()
            out = train(job, net)
            c1, q1 = _schedstat()
            spans.append((time.perf_counter() - t0, c1 - c0, q1 - q0))
            return out
        return real_map(self, timed, jobs, tasks)

    threads.JobThreads.map = timed_map
    try:
        for _ in range(runs):
            world, _ = build_world(scenario("E0", 5))
            spans.clear()
            load = os.getloadavg()[0]
            c0, t0 = time.process_time(), time.perf_counter()
            world.run()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            w, c, q = np.array(spans).sum(0)
            log(f"load {load:.1f}: run wall {wall:.2f} s, CPU {cpu:.2f} s ({cpu / wall:.2f} cores, {world.executor.workers} "
                f"workers); {len(spans)} jobs, {w:.2f} s: on a CPU {c / w:.0%}, waiting for a core {q / w:.0%}, "
                f"blocked (GIL, locks) {(w - c - q) / w:.0%}")
    finally:
        threads.JobThreads.map = real_map


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
