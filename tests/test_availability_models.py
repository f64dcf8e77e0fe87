"""The availability models' exact answers: masks equal to the draws of the streams they are
documented to read (replayed here from the same seeds), boundaries met by scripted draws
(a uniform equal to the probability is offline), per-round chains and traces round by
round, continuous-time switch times in exact seconds, and the kind each model declares (the
engine a scenario gets from it)."""
import math

import numpy as np
import pytest

from conftest import Rngs, quadratic_scenario
from devices import availability as av


class Draws:
    """A generator that hands out the given uniforms in order (exponentials: the mean times
    the next one); running out is an error, never an endless loop."""

    def __init__(self, *u):
        self.u = list(u)

    def random(self, size=None):
        if size is None:
            return self.u.pop(0)
        assert len(self.u) >= size, "the script ran out"
        out, self.u = np.array(self.u[:size]), self.u[size:]
        return out

    def uniform(self, lo, hi, size=None):
        return lo + (hi - lo) * self.random(size)

    def exponential(self, scale):
        return scale * self.u.pop(0)


class Scripted:
    """The streams of a group: round r's from `rounds[r]` (a generator, or a function of
    nothing making one), client c's from `clients[c]`; records the rounds asked."""

    def __init__(self, rounds=None, clients=None):
        self.rounds, self.clients, self.asked = rounds or {}, clients or {}, []

    def round(self, r):
        self.asked.append(r)
        g = self.rounds[r]
        return g() if callable(g) else g

    def client(self, c):
        return self.clients[c]


def bound(model, n, rngs=None, labels=None):
    model.bind(np.arange(n), rngs if rngs is not None else Rngs(seed=3), labels)
    return model


def mask(model, r, now=0.0):
    return model.online_mask(np.arange(len(model.members)), r, now)


# ---------------------------------------------------------------------------- declarations
def test_each_model_declares_its_kind():
    per_round = [av.AlwaysOnline(), av.BernoulliAvailability(p=0.5),
                 av.SineAvailability(p=0.5, amplitude=0.3, period=20.0),
                 av.MarkovAvailability(p_on_off=0.1, p_off_on=0.3),
                 av.RoundTraceAvailability(table={"1": {1}}, last_round=1, repeat=True)]
    timed = [av.MarkovTimeAvailability(mean_on=10.0, mean_off=10.0),
             av.DiurnalAvailability(mean=0.5, amplitude=0.4, period=86400.0, slot=900.0),
             av.TraceAvailability(trace={"1": ([0.0], [5.0], None)})]
    assert [m.kind for m in per_round] == ["round"] * 5
    assert [m.kind for m in timed] == ["time"] * 3


def test_bind_keeps_the_labels_for_a_models_own_use():
    """A model of one's own reads what `bind` keeps: members, streams and label histograms."""

    class HasClassZero(av.RoundAvailability):
        def group_mask(self, round_):
            return self.labels[:, 0] > 0

    labels = np.array([[3, 0], [0, 2], [1, 1]])
    m = bound(HasClassZero(), 3, labels=labels)
    assert mask(m, 1).tolist() == [True, False, True]


# ---------------------------------------------------------------------------- probabilities
def test_client_probs_of_each_spec_are_the_streams_draws():
    g = lambda: np.random.default_rng(7)        # noqa: E731
    assert av.client_probs(0.25, 3, g(), None).tolist() == [0.25] * 3
    assert av.client_probs([0.1, 0.2], 2, g(), None).tolist() == [0.1, 0.2]
    with pytest.raises(ValueError, match="3 probabilities for a group of 2"):
        av.client_probs([0.1, 0.2, 0.3], 2, g(), None)
    np.testing.assert_array_equal(av.client_probs({"uniform": [0.2, 0.6]}, 5, g(), None), g().uniform(0.2, 0.6, 5))
    np.testing.assert_array_equal(av.client_probs({"beta": [2.0, 5.0]}, 5, g(), None), g().beta(2.0, 5.0, 5))
    for bad in ({"gamma": [1, 2]}, "often", None):
        with pytest.raises(ValueError, match="unknown probability spec"):
            av.client_probs(bad, 2, g(), None)


def test_label_probabilities_of_a_one_sample_client_and_of_an_empty_one():
    """A client with one sample of class 0 has p = phi_0; one with no sample has p = 0 (not NaN)."""
    labels = np.array([[1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 3]])
    u = np.random.default_rng(9)
    phi = np.concatenate([u.uniform(0, 1, 2), u.uniform(0, 0.5, 2)])
    p = av.client_probs("labels", 3, np.random.default_rng(9), labels)
    assert p[0] == phi[0] and p[1] == 0.0
    assert p[2] == pytest.approx((phi[1] + 3 * phi[3]) / 4, abs=1e-15)


# ---------------------------------------------------------------------------- per round
@pytest.mark.parametrize("cls", [av.BernoulliAvailability, av.SineAvailability])
def test_drawn_probabilities_come_from_the_round_0_stream(cls):
    kw = {} if cls is av.BernoulliAvailability else {"amplitude": 0.3, "period": 20.0}
    m = bound(cls(p={"uniform": [0.0, 1.0]}, **kw), 6)
    np.testing.assert_array_equal(m.probs, Rngs(seed=3).round(0).uniform(0.0, 1.0, 6))


def test_bernoulli_mask_is_the_rounds_uniforms_below_p():
    p = [0.0, 1.0, 0.3, 0.7, 0.5]
    m = bound(av.BernoulliAvailability(p=p), 5)
    for r in (1, 2, 9):
        assert mask(m, r).tolist() == (Rngs(seed=3).round(r).random(5) < np.array(p)).tolist()
    # a uniform equal to the probability is offline (P(u < p) = p for u uniform on [0, 1))
    rngs = Scripted(rounds={0: Draws(), 1: Draws(0.0, 0.5, 0.5, 0.2999, 0.9999)})
    m = bound(av.BernoulliAvailability(p=[0.0, 0.5, 0.7, 0.3, 1.0]), 5, rngs)
    assert mask(m, 1).tolist() == [False, False, True, True, True]


def test_sine_probability_closed_form_and_phase():
    m = bound(av.SineAvailability(p=0.5, amplitude=0.3, period=20.0, phase=math.pi / 2), 2)
    assert m.prob(1).tolist() == [0.5, 0.5]                       # sin(pi / 2) = 1: factor 1
    assert m.prob(11)[0] == pytest.approx(0.5 * 0.4, abs=1e-15)     # sin(3 pi / 2) = -1: factor 1 - 2a
    m = bound(av.SineAvailability(p=0.8, amplitude=0.5, period=12.0, phase=math.pi / 6), 1)
    assert m.prob(1)[0] == pytest.approx(0.8 * 0.75, abs=1e-15)     # sin(pi / 6) = 1/2
    m = bound(av.SineAvailability(p=0.8, amplitude=0.9, period=4.0, phase=0.0), 1)
    assert m.prob(4)[0] == 0.0                                       # factor 1 - 1.8 < 0: clipped at 0
    # the mask: the round's uniforms below p_i^t; one equal to it is offline
    rngs = Scripted(rounds={0: Draws(), 1: Draws(0.5, 0.4999)})
    m = bound(av.SineAvailability(p=0.5, amplitude=0.3, period=20.0, phase=math.pi / 2), 2, rngs)
    assert mask(m, 1).tolist() == [False, True]
    m = bound(av.SineAvailability(p=[0.2, 0.9, 0.6], amplitude=0.4, period=7.0, phase=1.0), 3)
    for r in (1, 3, 8):
        assert mask(m, r).tolist() == (Rngs(seed=3).round(r).random(3) < m.prob(r)).tolist()


def test_markov_chain_step_by_step_from_its_streams():
    """Round 1's state: round(0)'s uniforms below pi; round r's: from round r-1's, with
    round(r)'s uniforms (online stays online when u >= p_on_off, offline comes online when
    u < p_off_on)."""
    p_on_off, p_off_on, n = 0.3, 0.2, 8
    m = bound(av.MarkovAvailability(p_on_off=p_on_off, p_off_on=p_off_on), n)
    state = Rngs(seed=3).round(0).random(n) < p_off_on / (p_on_off + p_off_on)
    for r in range(1, 7):
        if r > 1:
            u = Rngs(seed=3).round(r).random(n)
            state = np.where(state, u >= p_on_off, u < p_off_on)
        assert mask(m, r).tolist() == state.tolist()


def test_markov_boundaries_and_the_streams_it_asks():
    """Uniforms equal to pi, p_on_off and p_off_on; each round's stream is drawn once, in
    order, and only up to the round asked."""
    rngs = Scripted(rounds={0: Draws(0.5, 0.1), 2: Draws(0.25, 0.25), 3: Draws(0.1, 0.1)})
    m = bound(av.MarkovAvailability(p_on_off=0.25, p_off_on=0.25), 2, rngs)     # pi = 0.5
    assert mask(m, 3).tolist() == [True, False]
    assert rngs.asked == [0, 2, 3]
    assert mask(m, 1).tolist() == [False, True] and mask(m, 2).tolist() == [False, True]
    assert rngs.asked == [0, 2, 3]


def test_round_trace_rows_wrap_and_stop():
    """Trace clients in natural order (2, 9, 10), one per member, wrapping; rounds past the
    last (3) wrap to 1, 2, 3, 1 with repeat, else nobody is online."""
    table = {"10": {2}, "2": {1, 3}, "9": {1, 2, 3}}
    want = {1: [1, 1, 0, 1, 1], 2: [0, 1, 1, 0, 1], 3: [1, 1, 0, 1, 1]}
    m = bound(av.RoundTraceAvailability(table=table, last_round=3, repeat=True), 5)
    for r, w in {**want, 4: want[1], 5: want[2], 6: want[3], 7: want[1]}.items():
        assert mask(m, r).astype(int).tolist() == w, r
    m = bound(av.RoundTraceAvailability(table=table, last_round=3, repeat=False), 5)
    for r in (1, 2, 3):
        assert mask(m, r).astype(int).tolist() == want[r]
    assert not mask(m, 4).any() and not mask(m, 100).any()
    with pytest.raises(ValueError, match="empty availability trace"):
        bound(av.RoundTraceAvailability(table={}, last_round=0, repeat=True), 2)


# ---------------------------------------------------------------------------- continuous time
def test_markov_time_switches_are_the_client_streams_draws():
    """Each client: online at 0 when its first uniform < mean_on / (mean_on + mean_off), then
    exponential periods of its state's mean, from its own stream, in exact seconds."""
    mean_on, mean_off = 100.0, 300.0
    m = bound(av.MarkovTimeAvailability(mean_on=mean_on, mean_off=mean_off), 12)
    ref = Rngs(seed=3)
    states = []
    for c in range(12):
        g = ref.client(c)
        on = g.random() < 0.25
        states.append(on)
        t1 = g.exponential(mean_on if on else mean_off)
        t2 = t1 + g.exponential(mean_off if on else mean_on)
        assert m.online(c, 0, 0.0) == on
        assert (m.online_until(c, 0.0), m.next_online(c, 0.0)) == ((t1, 0.0) if on else (0.0, t1))
        assert (m.online_until(c, t1), m.next_online(c, t1)) == ((t1, t2) if on else (t2, t1))
    assert 0 < sum(states) < 12
    # a first uniform equal to the online share is offline
    rngs = Scripted(clients={0: Draws(0.25, 2.0, 1.0)})
    m = bound(av.MarkovTimeAvailability(mean_on=mean_on, mean_off=mean_off), 1, rngs)
    assert not m.online(0, 0, 0.0) and m.next_online(0, 0.0) == 600.0 and m.online_until(0, 600.0) == 700.0


def diurnal(*draws, **kw):
    """One client, slots of 900 s, a period of 4 slots: p = 0.5, 0.9, 0.5, 0.1, 0.5, ... (phase 0)."""
    kw = {"mean": 0.5, "amplitude": 0.4, "period": 3600.0, "slot": 900.0, **kw}
    rngs = Scripted(clients={0: Draws(*draws)})
    return bound(av.DiurnalAvailability(**kw), 1, rngs), rngs.clients[0]


def test_diurnal_periods_scanned_slot_by_slot():
    # slot:   0    1     2    3     4    5     6    7
    # p:      .5   .9    .5   .1    .5   .9    .5   .1
    # u:      .5   .95   .3   .05   .2   .92   .6   .05   (a uniform equal to p is offline)
    # online: no   no    yes  yes   yes  no    no   yes
    m, script = diurnal(0.5, 0.95, 0.3, 0.05, 0.2, 0.92, 0.6, 0.05)
    assert not m.online(0, 0, 0.0) and m.next_online(0, 0.0) == 1800.0
    assert m.online_until(0, 1800.0) == 4500.0 and m.online(0, 0, 4499.0)
    assert m.next_online(0, 4500.0) == 6300.0 and not m.online(0, 0, 6299.0)
    assert script.u == []                   # one draw per slot, none ahead of need


def test_diurnal_shift_phase_and_ceiling():
    # spread 0.5 of 3600 s: the shift is 1800 x the first uniform (0.5: 900 s, one slot ahead)
    m, script = diurnal(0.5, 0.6, 0.95, spread=0.5)
    assert m.online(0, 0, 0.0) and m.online_until(0, 0.0) == 900.0       # p = 0.9, then 0.5
    assert m.prob(0.0, 0) == 0.9 and m.prob(900.0, 0) == pytest.approx(0.5, abs=1e-15)
    m, _ = diurnal(0.6, 0.7, phase=math.pi / 2)                            # p = 0.9, 0.5, ...
    assert m.online(0, 0, 0.0) and m.online_until(0, 0.0) == 900.0 and m.prob(0.0, 0) == 0.9
    m, _ = diurnal(0.6, 0.3, phase=-math.pi / 2)                           # p = 0.1, 0.5, ...
    assert m.next_online(0, 0.0) == 900.0 and m.prob(0.0, 0) == pytest.approx(0.1, abs=1e-15)
    m, _ = diurnal(0.2, 0.7, 0.9, mean=0.8, amplitude=0.4, phase=math.pi / 2)   # p = 1, 0.8, 0.4
    assert m.online_until(0, 0.0) == 1800.0
    assert m.prob(0.0, 0) == 1.0 and m.prob(900.0, 0) == pytest.approx(0.8, abs=1e-15)   # 0.8 + 0.4: at most 1


def test_diurnal_gives_up_after_max_scan_slots():
    """Every slot p = 0.5; max_scan_slots 3: a period of 3 slots ends, one of 4 is never."""
    kw = {"amplitude": 0.0, "max_scan_slots": 3}
    m, script = diurnal(0.1, 0.1, 0.1, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1, **kw)
    assert m.online_until(0, 0.0) == 2700.0 and m.next_online(0, 2700.0) == 5400.0
    assert m.online_until(0, 5400.0) == math.inf and script.u == []
    m, script = diurnal(0.1, 0.1, 0.1, 0.1, **kw)
    assert m.online_until(0, 0.0) == math.inf and script.u == []


def test_diurnal_always_online_draws_nothing():
    """p = 1 in every slot (mean - amplitude >= 1): online for ever, at once, without drawing
    a slot (scanning would draw slots 0 to 1,000,000, about a second per client)."""

    class Count:
        n = 0

        def random(self):
            self.n += 1
            return 0.5

    g = Count()
    m = bound(av.DiurnalAvailability(mean=1.0, amplitude=0.0, period=3600.0, slot=900.0), 1,
              Scripted(clients={0: g}))
    assert m.online_until(0, 0.0) == math.inf and m.next_online(0, 5e6) == 5e6 and g.n == 0


def test_trace_next_online_and_joined_intervals():
    trace = {"1": ([10.0, 30.0, 60.0], [20.0, 40.0, 70.0], 100.0),       # three intervals a period
             "2": ([0.0, 80.0], [10.0, 100.0], 100.0),                     # [80, 100) joins [0, 10)
             "3": ([0.0], [100.0], 100.0)}                                 # always online
    m = bound(av.TraceAvailability(trace=trace, repeat=True), 3)
    assert [m.next_online(0, t) for t in (0.0, 25.0, 45.0, 65.0, 75.0, 275.0)] == [10.0, 30.0, 60.0, 65.0, 110.0, 310.0]
    assert [m.online_until(0, t) for t in (15.0, 45.0, 135.0)] == [20.0, 45.0, 140.0]
    assert m.online_until(1, 85.0) == 110.0 and m.online_until(1, 185.0) == 210.0 and m.online_until(1, 5.0) == 10.0
    assert m.next_online(1, 50.0) == 80.0 and m.next_online(1, 150.0) == 180.0
    assert m.online_until(2, 50.0) == math.inf and m.next_online(2, 50.0) == 50.0
    m = bound(av.TraceAvailability(trace=trace, repeat=False), 3)
    assert [m.next_online(0, t) for t in (45.0, 75.0, 150.0)] == [60.0, math.inf, math.inf]
    assert m.online_until(1, 85.0) == 100.0 and m.online_until(2, 50.0) == 100.0
    assert mask(m, 0, 15.0).tolist() == [True, False, True] and not mask(m, 0, 115.0).any()
    m = bound(av.TraceAvailability(trace=trace, repeat=True), 3)
    assert mask(m, 0, 115.0).tolist() == [True, False, True]


# ---------------------------------------------------------------------------- the engine a model gets
@pytest.mark.parametrize("model, timed", [
    ({"model": "always"}, False),
    ({"model": "bernoulli", "p": 0.5}, False),
    ({"model": "sine", "p": 0.5}, False),
    ({"model": "markov", "p_on_off": 0.1, "p_off_on": 0.3}, False),
    ({"model": "round_trace", "path": "rounds.csv"}, False),
    ({"model": "markov_time", "mean_on": 50.0, "mean_off": 50.0}, True),
    ({"model": "diurnal"}, True),
    ({"model": "trace", "path": "intervals.csv"}, True),
])
def test_a_timed_model_makes_the_process_engine(model, timed, tmp_path):
    """A continuous-time model interrupts work when a client goes offline: the world knows
    it (and waits for someone to come online), the protocol runs the process engine and
    watches each participant; a per-round model is decided at the round's start (vector)."""
    from emulator import scenario
    from emulator.sim.world import World

    (tmp_path / "rounds.csv").write_text("round,client,available\n1,0,1\n2,0,0\n")
    (tmp_path / "intervals.csv").write_text("client,start,end,period\n0,0,30,60\n")
    sc = quadratic_scenario(n=4, rounds=2)
    sc["clients"]["groups"][0]["availability"] = {k: str(tmp_path / v) if k == "path" else v for k, v in model.items()}
    w = World(scenario.load(sc))
    assert w.time_availability is timed
    assert w.protocol.engine == ("process" if timed else "vector")
