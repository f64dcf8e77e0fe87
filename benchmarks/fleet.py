"""One fleet-scale engine run in a fresh process (benchmark P4):
    python -m benchmarks.fleet CLIENTS PER_ROUND ROUNDS
prints one JSON line: clients, per_round, rounds, setup_s, s_per_round, peak_rss_mb, engine.
s_per_round: the mean wall time of rounds 2..R-1 (round 1 carries the initial evaluation, round R
the final one: at 10^6 clients evaluating the test set costs more than the rounds)."""
from __future__ import annotations

import json
import resource
import sys
import time

import numpy as np


def main(argv=None):
    n, k, rounds = (int(v) for v in (argv or sys.argv[1:])[:3])
    from benchmarks.common import _register_noop, build_world
    from benchmarks.engine import p3_scenario
    _register_noop()
    sc = p3_scenario(n, rounds)
    sc["protocol"]["select"] = {"model": "uniform", "k": k}
    world, setup = build_world(sc)
    t = time.perf_counter()
    world.run()
    wall = time.perf_counter() - t
    m = world.recorder.metrics_frame()
    per_round = np.diff(m[m["model"] == 0].sort_values("round")["wall_time"].to_numpy(float))[1:-1]
    print(json.dumps({"clients": n, "per_round": k, "rounds": rounds, "setup_s": setup, "run_s": wall,
                      "s_per_round": float(per_round.mean()),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "engine": world.protocol.engine}))


if __name__ == "__main__":
    main()
