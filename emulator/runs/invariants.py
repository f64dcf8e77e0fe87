"""The post-run check (docs/engine.md, "Invariants"): what must hold after every run. A
violated invariant is a bug in flemu, never a warning: the runner writes the run's results
first, then marks it `invalid` with every violation listed (`failures`; exit status 4,
docs/reliability.md); `check` raises them as one InvariantError.

Each invariant is one function `(world, metrics, clients) -> [violation, ...]`, held in
INVARIANTS under the name summary.json lists (`invariants_checked`); `failures` runs them all.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvariantError
from ..sim.recorder import IDLE


def time_monotone(world, metrics, clients) -> list:
    """Virtual time never goes back."""
    if len(metrics) and (np.diff(metrics["virtual_time"].to_numpy()) < -1e-12).any():
        return ["virtual_time decreases between aggregations"]
    return []


def _aggregation_rows(world, metrics) -> list:
    """One aggregation log per (round, model), each with its metrics row and vice versa; every
    model due was trained. Work that no aggregation used (a lost async job) is not one."""
    bad, seen = [], {}
    rec = world.recorder
    for log in rec.aggregations():
        key = (log.round, log.task)
        if key in seen:
            bad.append(f"round {log.round} of model {log.task} is recorded as two aggregations")
            break
        seen[key] = log
    if len(metrics):
        rows = {(int(r), int(m)) for r, m in zip(metrics["round"], metrics["model"]) if r >= 1}
        if rows != set(seen):
            extra = sorted(set(seen) - rows)[:3]
            missing = sorted(rows - set(seen))[:3]
            bad.append(f"aggregations recorded in clients.csv {extra} without a metrics row, "
                       f"metrics rows {missing} without their clients")
    due = world.protocol.models_due()      # every model, or those a multi-model run gave clients to
    for task in world.tasks:
        if task.index in due and not any(log.task == task.index for log in rec.aggregations()):
            bad.append(f"model {task.index} ({task.path}) was never aggregated")
    return bad


def _one_row_per_client(world, clients) -> list:
    """One row per (round, client), whatever the model; a run recorded per job (declared by
    its protocol: JOB logs): every row a job, merged once or lost (dropped)."""
    bad = []
    rec = world.recorder
    per_job = rec.per_job
    rows = [log for log in rec.rounds if log.aggregation] if per_job else rec.rounds
    if rows:
        r = np.concatenate([np.full(log.n, log.round, dtype=np.int64) for log in rows])
        c = np.concatenate([log.clients() for log in rows]).astype(np.int64)
        _, counts = np.unique(r * (world.num_clients + 1) + c, return_counts=True)
        if (counts > 1).any():
            bad.append(f"two rows for one (round, client){' among merged jobs' if per_job else ''}")
    if per_job:
        for log in rec.rounds:
            job = log.extra.get("job")
            if job is None or (job <= 0).any():
                bad.append(f"round {log.round}: rows without a job key in a run recorded per job")
                break
            if not log.aggregation and not log.dropped.all():
                bad.append(f"round {log.round}: a job neither merged nor lost")
                break
    if "job" in clients:
        jobs = clients[clients["job"] > 0]
        if jobs.duplicated(["client", "job"]).any():
            bad.append("a client job is recorded twice")
    return bad


def aggregations(world, metrics, clients) -> list:
    """Aggregation logs match metrics rows; one row per (round, client) or per job."""
    return _aggregation_rows(world, metrics) + _one_row_per_client(world, clients)


def weights(world, metrics, clients) -> list:
    """Aggregation weights sum to the rule's documented total; dropped clients weigh 0."""
    bad = []
    for log in world.recorder.rounds:
        if log.kind == IDLE:      # multi-model: the round's idle clients
            continue
        algo = world.tasks[log.task].algorithm
        wts = log.weight
        if (wts[log.dropped] != 0).any():
            bad.append(f"round {log.round}: a dropped client has a non-zero weight")
        if not log.aggregation and (wts != 0).any():
            bad.append(f"round {log.round}: work no aggregation used has a weight")
        if not np.isfinite(wts).all() or (wts < 0).any():
            bad.append(f"round {log.round}: a weight is negative or not finite")
            continue
        total = algo.weights_total
        if total is not None and (wts != 0).any() and abs(wts.sum() - total) > 1e-6:
            bad.append(f"round {log.round}: weights sum to {wts.sum():.9g}, expected {total}")
    return bad


def steps_fit(world, metrics, clients) -> list:
    """Each client's steps fit in its compute time: every step takes at least the shortest
    step its realised clock drew (a constant or FLOP-based step time exactly; the draws of a
    random one; the slowest piece of a trace)."""
    bad = []
    for log in world.recorder.rounds:
        ct = log.compute_time
        if (ct < -1e-12).any() or not np.isfinite(ct).all():
            bad.append(f"round {log.round}: negative or non-finite compute_time")
        short = ct + 1e-9 * np.maximum(1.0, log.min_compute) < log.min_compute
        if short.any():
            i = int(np.flatnonzero(short)[0])
            bad.append(f"round {log.round} client {int(log.clients()[i])}: {log.steps[i]} steps in "
                       f"{ct[i]:.6g}s < {log.min_compute[i]:.6g}s")
            break
    return bad


def bytes_(world, metrics, clients) -> list:
    """Bytes = parameters x bytes_per_param + overhead, and metrics agree with clients.csv: an
    aggregation's row counts its round's rows, less their bytes that ended after the row was
    written, plus earlier rounds' that ended since (docs/engine.md, "Bytes")."""
    bad = []
    rec, net = world.recorder, world.network
    for log in rec.rounds:
        for numel, nb, direction in log.messages:
            if nb != net.expected_bytes(numel, direction):
                bad.append(f"round {log.round}: a message of {numel} parameters counted as {nb} bytes")
                break
        sent = sum(m[1] for m in log.messages) + log.protocol_bytes
        if sent != int(log.bytes_up.sum() + log.bytes_down.sum()):
            bad.append(f"round {log.round}: bytes recorded per client do not add up to the messages sent")
    if len(metrics) and "bytes_up" in metrics:
        per_round = {(log.round, log.task): (int(log.bytes_up.sum() - log.late_out[0] + log.late_in[0]),
                                             int(log.bytes_down.sum() - log.late_out[1] + log.late_in[1]))
                     for log in rec.aggregations()}
        model = metrics["model"] if "model" in metrics else np.zeros(len(metrics), dtype=np.int64)
        for r, m, up, down in zip(metrics["round"], model, metrics["bytes_up"], metrics["bytes_down"]):
            key = (int(r), int(m))
            if key in per_round and per_round[key] != (int(up), int(down)):
                bad.append(f"round {r}: metrics bytes_up/bytes_down {up}/{down} != "
                           f"clients {per_round[key][0]}/{per_round[key][1]}")
                break
    return bad


def round_time(world, metrics, clients) -> list:
    """A participant's work fits in its round (a run recorded per job: a job spans merges,
    not checked)."""
    if world.recorder.per_job:
        return []
    for log in world.recorder.aggregations():
        rt = log.round_time
        busy = (log.compute_time + log.comm_time)[log.selected]
        if rt is not None and len(busy) and busy.max() > rt * (1 + 1e-9) + 1e-9:
            return [f"round {log.round}: a participant busy {busy.max():.9g}s, longer than its round ({rt:.9g}s)"]
    return []


def comm_latency(world, metrics, clients) -> list:
    """Communication takes at least the links' latency."""
    bad = []
    for log in world.recorder.rounds:
        ids = log.clients()
        for i in np.flatnonzero(log.bytes_up > 0):
            lat = world.clients[int(ids[i])].link.latency
            if log.comm_time[i] + 1e-9 < 2 * lat:
                bad.append(f"round {log.round} client {int(ids[i])}: comm_time {log.comm_time[i]:.6g}s < 2 x latency")
                break
    return bad


def delay(world, metrics, clients) -> list:
    """The delay metrics in metrics.csv are the ones clients.csv gives (docs/algorithms/fedsum.md 2.1)."""
    bad = []
    if not (len(metrics) and "tau" in metrics and len(clients) and not world.recorder.participants_only):
        return bad
    from ..measures.participation import delay_metrics
    for task in world.tasks:
        m = metrics[(metrics["model"] == task.index) & (metrics["round"] >= 1)]
        c = clients if "model" not in clients else clients[clients["model"] == task.index]
        act = c[c["weight"] > 0].groupby("round")["client"].apply(np.asarray)
        rounds = m["round"].astype(int).tolist()
        d = delay_metrics([act.get(r, np.zeros(0, np.int64)) for r in rounds], world.num_clients)
        if not np.array_equal(d["tau"], m["tau"].to_numpy()):
            bad.append(f"model {task.index}: metrics.csv tau {m['tau'].to_numpy()[:6]}... differs from the "
                       f"delay clients.csv gives {d['tau'][:6]}...")
    return bad


def grad_steps(world, metrics, clients) -> list:
    """Gradient steps: never more computed than the fleet performed in virtual time."""
    st = world.executor.stats
    if st.steps_computed > st.steps_submitted:
        return [f"{st.steps_computed} steps computed but only {st.steps_submitted} submitted"]
    return []


#: every invariant, in the order they run, under the name summary.json lists
INVARIANTS = [("time_monotone", time_monotone), ("aggregations", aggregations), ("weights", weights),
              ("steps_fit", steps_fit), ("bytes", bytes_), ("round_time", round_time),
              ("comm_latency", comm_latency), ("delay", delay), ("grad_steps", grad_steps)]


NAMES = [name for name, _ in INVARIANTS]


def failures(world, metrics, clients) -> list:
    """Every violation of every invariant (empty: all hold)."""
    bad = []
    for _, fn in INVARIANTS:
        bad += fn(world, metrics, clients)
    return bad


def check(world, metrics, clients) -> list:
    """Raise InvariantError listing every violation; return the names of the checks run."""
    bad = failures(world, metrics, clients)
    if bad:
        raise InvariantError("post-run invariant check failed (a flemu bug):\n  " + "\n  ".join(bad))
    return list(NAMES)
