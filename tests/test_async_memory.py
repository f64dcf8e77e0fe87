"""Memory linear in what happens (issue 19): an async run records one row per client job, not
an N-wide block per merge (the old recorder allocated N rows per job: time and memory grew as
N x merges). The recorder's arrays over the same 20 merges must grow with the jobs that ran
(at most merges + N: each client's job in flight at the end), not with N x merges."""
import numpy as np
import pytest

from emulator.scenario import schema as scenario
from emulator.sim.world import World

from conftest import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _recorder(n: int, merges: int = 20):
    sc = tiny(**{"clients.count": n, "protocol": {"name": "async", "local_steps": 1},
                 "algorithm": {"name": "fedasync", "lr": 0.05}, "run.rounds": merges, "run.eval_every": merges})
    sc["clients"]["groups"][0]["compute"] = {"model": "uniform", "low": 0.05, "high": 0.5}
    w = World(scenario.load(sc))
    w.run()
    rec = w.recorder
    rows = sum(log.n for log in rec.rounds)
    nbytes = sum(a.nbytes for log in rec.rounds for a in [*log.cols.values(), log.min_compute, *log.extra.values()])
    return rows, nbytes, len(rec.aggregations())


def test_async_recorder_grows_with_jobs_not_with_clients_times_merges():
    small = _recorder(20)
    big = _recorder(400)
    assert small[2] == big[2] == 20                      # the same 20 merges
    for n, (rows, nbytes, merges) in ((20, small), (400, big)):
        assert merges <= rows <= merges + n              # merged jobs, plus at most one open job per client
        assert rows < n * merges / 10                    # the old layout: n rows per merge
    per_row = big[1] / big[0]
    assert per_row == pytest.approx(small[1] / small[0], rel=0.01)   # the same columns per row
    assert big[1] < 20 * 400 * per_row / 10              # far from N x merges rows of bytes
