"""The post-run check (DESIGN.md section 3, "Invariants"): what must hold after every run.
A violated invariant is a bug in flemu, raised as InvariantError, never a warning."""
from __future__ import annotations


import numpy as np

from .errors import InvariantError


def check(world, metrics, clients) -> list:
    """Raise InvariantError listing every violation; return the names of the checks run."""
    bad, ran = [], []

    # virtual time never goes back
    ran.append("time_monotone")
    if len(metrics) and (np.diff(metrics["virtual_time"].to_numpy()) < -1e-12).any():
        bad.append("virtual_time decreases between aggregations")

    # aggregation weights sum to the rule's documented total; dropped clients weigh 0
    ran.append("weights")
    for log in world.recorder.rounds:
        algo = world.tasks[log.task].algorithm
        wts = log.weight
        if (wts[log.dropped] != 0).any():
            bad.append(f"round {log.round}: a dropped client has a non-zero weight")
        total = algo.weights_total
        if total is not None and (wts != 0).any() and abs(wts.sum() - total) > 1e-6:
            bad.append(f"round {log.round}: weights sum to {wts.sum():.9g}, expected {total}")

    # each client's steps fit in its compute time
    ran.append("steps_fit")
    for log in world.recorder.rounds:
        st, ct = log.steps, log.compute_time
        if (ct < -1e-12).any() or not np.isfinite(ct).all():
            bad.append(f"round {log.round}: negative or non-finite compute_time")
        for cid in np.flatnonzero(st > 0):
            lo = st[cid] * world.clients[cid].compute.min_step_time()
            if ct[cid] + 1e-9 * max(1.0, lo) < lo:
                bad.append(f"round {log.round} client {cid}: {st[cid]} steps in {ct[cid]:.6g}s < {lo:.6g}s")
                break

    # bytes = parameters x bytes_per_param + overhead, and metrics agree with clients.csv
    ran.append("bytes")
    net = world.network
    for log in world.recorder.rounds:
        for numel, nb, direction in log.messages:
            if nb != net.message_bytes(numel, direction):
                bad.append(f"round {log.round}: a message of {numel} parameters counted as {nb} bytes")
                break
        sent = sum(m[1] for m in log.messages)
        if sent != int(log.bytes_up.sum() + log.bytes_down.sum()):
            bad.append(f"round {log.round}: bytes recorded per client do not add up to the messages sent")
    if len(metrics) and "bytes_up" in metrics:
        per_round = {}
        for log in world.recorder.rounds:
            per_round[(log.round, log.task)] = int(log.bytes_up.sum())
        for r in metrics.itertuples():
            key = (int(r.round), int(getattr(r, "model", 0)))
            if key in per_round and per_round[key] != int(r.bytes_up):
                bad.append(f"round {r.round}: metrics bytes_up {r.bytes_up} != clients {per_round[key]}")
                break

    # communication takes at least the links' latency
    ran.append("comm_latency")
    for log in world.recorder.rounds:
        for cid in np.flatnonzero(log.bytes_up > 0):
            lat = getattr(world.clients[cid].link, "latency", 0.0)
            if log.comm_time[cid] + 1e-9 < 2 * lat:
                bad.append(f"round {log.round} client {cid}: comm_time {log.comm_time[cid]:.6g}s < 2 x latency")
                break

    # gradient steps: never more computed than the fleet performed in virtual time
    ran.append("grad_steps")
    st = world.executor.stats
    if st.steps_computed > st.steps_submitted:
        bad.append(f"{st.steps_computed} steps computed but only {st.steps_submitted} submitted")

    if bad:
        raise InvariantError("post-run invariant check failed (a flemu bug):\n  " + "\n  ".join(bad))
    return ran
