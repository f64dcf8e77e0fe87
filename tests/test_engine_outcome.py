"""What both engines record of a participant, written once (sim/protocols/outcome.py)."""
import numpy as np

from emulator.sim.protocols.outcome import multicast_first, steps_done


def test_steps_done_floor_guard_and_zero_duration():
    # 3 of 10 steps after 0.3 s of 1 s (0.3 * 10 / 1 = 2.9999999999999996: the guard makes it 3)
    assert steps_done(10, 0.3, 1.0) == 3
    assert steps_done(10, 0.29, 1.0) == 2 and steps_done(10, 1.0, 1.0) == 10
    # a 0 s computation has done every step, whenever it is stopped (the process engine's
    # stop, the vector engine and FedUMF's `partial` agree; `partial` said 0 before)
    assert steps_done(7, 0.0, 0.0) == 7
    got = steps_done(np.array([10, 10, 7, 4]), np.array([0.3, 0.29, 0.0, 0.5]), np.array([1.0, 1.0, 0.0, 2.0]))
    assert got.dtype == np.int64 and got.tolist() == [3, 2, 7, 1]
    # scalars and arrays give the same numbers
    assert [steps_done(s, e, d) for s, e, d in zip([10, 10, 7, 4], [0.3, 0.29, 0.0, 0.5], [1.0, 1.0, 0.0, 2.0])] == \
        got.tolist()


def test_multicast_bytes_go_to_the_first_arrival():
    arrive = np.array([2.0, 1.0, 1.0, 0.5])
    assert multicast_first(arrive, np.array([True, True, True, False])) == 1      # tie at 1.0: first in order
    assert multicast_first(arrive, np.array([False, False, False, False])) is None
