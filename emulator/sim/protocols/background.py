"""Background training: clients that train without uploading, their result read rounds
later (FedUMF's unselected clients, docs/algorithms/fedumf.md 2.6).

An unselected, online client downloads the round's broadcast and is busy for its compute
time; it competes with nothing but its availability and never delays a round: over shared
links its transfers yield to the round's (sim/network.py), and a multicast broadcast is one
flow whoever receives it. When its job
ends in virtual time the algorithm keeps the result (lazily: the job is computed only if a
later round reads it). It produces nothing when:
- the client goes offline while working (continuous-time availability): `offline`;
- it is unselected again while the job still runs: the old job is abandoned for the new
  round's (`superseded`);
- it is selected while the job still runs (`unfinished`): the algorithm's `unfinished` rule
  says what then: `skip` abandons it; `partial` keeps the steps completed so far (a job of
  that many steps: the same batches as the first steps of the full one); `wait` lets it
  finish and the client starts its round after it;
- the run ends first (`run_end`).
Stopped work keeps the compute time it had used; clients.csv marks background rows with
`trained` and `background_stop` (why it stopped), never `dropped` (that is for participants).
Its row in its round's log is recorded once, when the work ends or stops (perhaps rounds
later); its download's bytes count in its round's metrics row if the download ended by the
round's aggregation, else in the model's next metrics row (docs/engine.md, "Bytes").
"""
from __future__ import annotations

from ...compute.jobs import TrainJob
from ..client import State
from .outcome import steps_done


class Background:
    def __init__(self, protocol):
        self.proto = protocol
        self.env = protocol.env
        self.running: dict = {}        # client -> (process, work, spec)

    def start(self, client, task, t: int, bc, log, draws=None) -> None:
        """Client trains `local_steps` from this round's broadcast without uploading."""
        old = self.running.get(client.id)
        if old is not None and old[0].is_alive:
            old[0].interrupt("superseded")           # only the latest update is kept (spec 2.5)
        sheet = self.proto.open_sheet(log, task, drop=False)    # its row in round t's log, never dropped
        proc = self.env.process(self._train(client, task, t, bc, sheet, draws))
        self.running[client.id] = (proc, None, None)

    def _train(self, client, task, t, bc, sheet, draws=None):
        proto, algo, log = self.proto, task.algorithm, sheet.log
        work = proto.begin(client, task, t, sheet, draws)
        work.background = True             # its transfers yield to the round's (sim/network.py)
        log.set_extra("trained", client.id, True, dtype=bool, default=False)
        proc = self.env.active_process

        def body():
            yield from proto.download(work)
            spec = task.checked.background_spec(client.id, t, bc)
            self.running[client.id] = (proc, work, spec)
            fut = yield from proto.compute(work, spec, proto.local_steps(client.id, task))
            algo.keep(client.id, t, fut, spec)
            proto.set_state(client, State.DONE, t, "background")

        def stopped(cid, reason):
            log.set_extra("background_stop", cid, reason, dtype=object, default="")
            if reason in ("offline", "superseded"):
                algo.forget(cid, reason)

        yield from proto.guard(work, body(), stopped)
        sheet.close(self.env.now)         # into round t's log, once: perhaps after the round closed

    def settle(self, client, task, t: int, mode: str):
        """Client is selected in round t: what becomes of its background job if it still runs.
        Returns the process to wait for (mode `wait`), else None."""
        entry = self.running.get(client.id)
        if entry is None or not entry[0].is_alive:
            return None
        proc, work, spec = entry
        if mode == "wait":
            return proc
        if mode == "partial" and work is not None and work.phase == State.COMPUTING:
            sheet, i = work.sheet, work.row      # computing since its download ended
            done = steps_done(sheet.steps[i], self.env.now - sheet.down[i], sheet.dur[i])
            if done > 0:      # the completed steps: a shorter job on the same batches
                ex = self.proto.world.executor
                fut = ex.submit(TrainJob(task.index, client.id, work.round, done, spec, task.batch_size))
                task.algorithm.keep(client.id, work.round, fut, spec)
                proc.interrupt("partial")
                return None
        task.algorithm.forget(client.id, "unfinished")     # now: the client fuses nothing this round
        proc.interrupt("unfinished")
        return None

    def stop_all(self, reason: str = "run_end"):
        """Stop every job still running (the run is over): their compute time so far counts."""
        alive = [p for p, _, _ in self.running.values() if p.is_alive]
        for p in alive:
            p.interrupt(reason)
        if alive:
            yield self.env.timeout(0)
