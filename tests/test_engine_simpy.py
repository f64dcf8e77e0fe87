"""SimPy's private API, used in one module only (emulator/sim/simpy_internals.py), checked
against SimPy's own semantics: simpy is pinned, and an upgrade that changes what these rest
on fails here (the participant driver is checked in test_participant_driver.py)."""
import importlib.metadata

import simpy

import pytest

from emulator.sim.simpy_internals import at_instant, call_now, closing_time


def _order(make_close):
    env = simpy.Environment()
    order = []
    close = make_close(env, 2.0)
    close.callbacks.append(lambda _e: order.append(("close", env.now)))

    def proc():
        yield env.timeout(2.0)
        order.append(("a", env.now))
        yield env.timeout(0)                      # created at the closing instant itself
        order.append(("b", env.now))
    env.process(proc())
    other = env.timeout(2.0)
    other.callbacks.append(lambda _e: order.append(("other", env.now)))
    env.run()
    return order, close


def test_closing_time_fires_after_every_event_of_its_instant():
    order, close = _order(closing_time)
    assert order == [("other", 2.0), ("a", 2.0), ("b", 2.0), ("close", 2.0)]
    assert close.processed and close.ok and close.value is None
    # a plain timeout created first fires first at that instant: the upload at 2.0 made at 2.0
    # would miss the deadline
    plain, _ = _order(lambda env, d: env.timeout(d))
    assert plain[0] == ("close", 2.0) and plain.index(("close", 2.0)) < plain.index(("b", 2.0))


def test_call_now_runs_where_a_new_process_would_start():
    for how in ("process", "call_now"):
        env = simpy.Environment()
        order = []

        def server():
            yield env.timeout(1.0)
            due = env.timeout(0)                  # already due at this instant
            due.callbacks.append(lambda _e: order.append("due"))

            def body():
                order.append("started")
                yield env.timeout(0)
            if how == "process":
                env.process(body())
            else:
                call_now(env, lambda: next(body()))
            order.append("server")
            yield env.timeout(0)
            order.append("server resumed")
        env.process(server())
        env.run()
        if how == "process":
            want = order
        else:
            assert order == want == ["server", "started", "due", "server resumed"]


def test_simpy_is_the_pinned_version():
    assert importlib.metadata.version("simpy") == "4.1.2"


def test_at_instant_fires_at_the_instant_a_process_reaches():
    """A client's upload ends at ((0.1 + 0.1) + 0.1) + 0.05 = 0.35000000000000003 after three
    timeouts; from 0.1 no delay reaches that instant (0.1 + 0.25000000000000006 is
    0.3500000000000001), so a timeout would close the vector engine's round an ulp late.
    `at_instant` fires there exactly, at NORMAL priority in scheduling order (after a timeout
    for that instant scheduled before it, before one scheduled after), and refuses the past."""
    chain = simpy.Environment(initial_time=0.1)

    def client():
        for d in (0.1, 0.1, 0.05):
            yield chain.timeout(d)
    chain.process(client())
    chain.run()
    when = chain.now
    assert when == 0.35000000000000003 and 0.1 + (when - 0.1) != when
    env = simpy.Environment(initial_time=0.1)
    order = []
    for name, make in (("before", lambda: env.timeout(0.25)), ("at", lambda: at_instant(env, 0.35)),
                       ("after", lambda: env.timeout(0.25))):
        make().callbacks.append(lambda _e, name=name: order.append((name, env.now)))
    exact = at_instant(env, when)
    exact.callbacks.append(lambda _e: order.append(("exact", env.now)))
    env.run()
    assert order == [("before", 0.35), ("at", 0.35), ("after", 0.35), ("exact", when)]
    assert exact.ok and exact.value is None
    with pytest.raises(ValueError, match="before now"):
        at_instant(env, 0.3)
