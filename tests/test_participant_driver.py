"""A round's participants run without a SimPy process each (sim/simpy_internals.py): the
driver must resume them exactly where and when a SimPy process would, so that the same
events happen in the same order (the engines' equivalence and stored results rest on it)."""
import simpy

from emulator.sim.simpy_internals import Driver, start_all


def _scenario(env, trace, name, delays, after=None, offline=None):
    """A participant-like generator: optional `after` event, then timeouts (0 s included),
    optionally racing an `offline` event; records every resume (time, name, step)."""
    def gen():
        try:
            if after is not None:
                yield after
                trace.append((env.now, name, "after"))
            for k, d in enumerate(delays):
                ev = env.timeout(d)
                yield ev if offline is None else ev | offline
                if not ev.processed:
                    trace.append((env.now, name, f"offline@{k}"))
                    return
                trace.append((env.now, name, k))
            trace.append((env.now, name, "done"))
        except simpy.Interrupt as stop:
            trace.append((env.now, name, f"stopped:{stop.cause}"))
    return gen()


def _run(driver):
    """The same round twice over: participants started from a server process at t = 1, the
    round closing at t = 4 with the late ones interrupted; other events at equal times."""
    env = simpy.Environment()
    trace = []
    done_before = env.event()
    done_before.succeed()

    def server():
        yield env.timeout(1.0)
        trace.append((env.now, "server", "start"))
        specs = [("a", [1.0, 0.0, 1.0]), ("b", [0.0, 0.0, 2.0]), ("c", [1.0, 1.0, 5.0]),
                 ("d", [0.5, 0.0, 1.5]), ("e", [0.0, 0.0, 0.0])]
        gens = [_scenario(env, trace, n, d) for n, d in specs]
        gens.append(_scenario(env, trace, "f", [0.5, 0.0], after=done_before))     # already processed
        off = env.timeout(1.5)
        gens.append(_scenario(env, trace, "g", [1.0, 1.0], offline=off))          # offline at 2.5
        if driver == "process":
            parts = [env.process(g) for g in gens]
        else:
            parts = [Driver(g) for g in gens]
            start_all(env, parts)
        yield env.timeout(0.0)
        trace.append((env.now, "server", "after-start"))
        yield env.timeout(3.0)                                   # closes at t = 4
        late = [p for p in parts if p.is_alive]
        for p in late:              # (a process records its stop at an urgent event, a
            p.interrupt("late")     # Participation at once: close_round waits 0 s for both)
        yield env.timeout(0)
        trace.append((env.now, "server", f"closed:{len(late)}"))

    def other():                                                 # equal-time events elsewhere
        for _ in range(4):
            yield env.timeout(1.0)
            trace.append((env.now, "other", "tick"))

    env.process(other())
    env.process(server())
    env.run(until=20)
    return trace


def test_participation_resumes_as_a_process_would():
    want, got = _run("process"), _run("participation")
    assert got == want
    # what the comparison covers: equal-time resumes, 0 s waits, an already-processed event,
    # an offline race and an interruption all happened
    assert (2.0, "a", 0) in got and (1.0, "e", "done") in got and (1.0, "f", "after") in got
    assert (2.5, "g", "offline@1") in got
    assert (4.0, "c", "stopped:late") in got
