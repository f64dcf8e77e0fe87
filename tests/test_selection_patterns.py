"""Selection patterns on exact values: the replayed sequence (repeat or not, round by round),
each client's probability of the biased pattern (a scalar, a list, the staircase and its
defaults, clipped to [0, 1]) and its draws against the same stream, the cyclic patterns
given a fraction, and each built pattern's name. Written for the survivors of
`make mutate MUTATE=selection` (docs/mutation.md)."""
import numpy as np
import pytest

from devices import selectors as sel
from devices.selectors import SelectionContext
from emulator import registry


def test_sequence_replays_its_sets_round_by_round():
    sets = [[0, 2], [1], [3]]
    s = sel.SequenceSelection(sets=sets)                     # repeat by default
    assert [s.select(SelectionContext(r, range(4), 4, None)) for r in range(1, 8)] == [[0, 2], [1], [3], [0, 2], [1], [3], [0, 2]]
    assert s.select(SelectionContext(1, [2, 3], 4, None)) == [2]               # unavailable members are skipped, not replaced
    assert s.select(SelectionContext(3, [0, 1, 2], 4, None)) == []
    once = sel.SequenceSelection(sets=sets, repeat=False)
    assert [once.select(SelectionContext(r, range(4), 4, None)) for r in range(1, 7)] == [[0, 2], [1], [3], [], [], []]
    assert sel.SequenceSelection(sets=[[1]]).select(SelectionContext(5, range(3), 3, None)) == [1]     # a single set, every round
    assert sel.SequenceSelection().select(SelectionContext(1, range(3), 3, None)) == []                # no sets: nobody
    assert sel.SequenceSelection(sets=[[np.int64(2)]]).select(SelectionContext(1, [np.int64(2)], 3, None)) == [2]


def test_biased_probabilities_scalar_list_and_clipped():
    assert sel.BiasedSelection(p=0.3).probs(4).tolist() == [0.3] * 4
    assert sel.BiasedSelection(p=[-0.5, 1.5, 0.25]).probs(3).tolist() == [0.0, 1.0, 0.25]
    with pytest.raises(ValueError, match="2 probabilities for 3 clients"):
        sel.BiasedSelection(p=[0.1, 0.2]).probs(3)
    s = sel.BiasedSelection(p=0.5)
    assert len(s.probs(3)) == 3 and len(s.probs(5)) == 5     # recomputed for another fleet size


def test_biased_staircase_defaults():
    """step 0, every 1, floor 0 unless given: p_i = max(0, start - step * i)."""
    assert sel.BiasedSelection(start=0.3).probs(4).tolist() == [0.3] * 4
    assert np.allclose(sel.BiasedSelection(start=0.5, step=0.2).probs(5), [0.5, 0.3, 0.1, 0.0, 0.0])
    assert np.allclose(sel.BiasedSelection(start=0.5, step=0.2, every=2, floor=0.2).probs(5), [0.5, 0.5, 0.3, 0.3, 0.2])


def test_biased_draws_one_uniform_per_client_and_keeps_the_available_ones():
    """Client i is selected when it is available and its draw u_i < p_i; the round draws
    N uniforms from the stream whether the clients are available or not."""
    p = [1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5]
    s = sel.BiasedSelection(p=p)
    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    for r in range(1, 30):
        avail = [0, 1, 2, 4, 5, 6] if r % 2 else [1, 2, 3, 7]
        u = ref.random(8)
        want = [i for i in avail if u[i] < p[i]]
        assert s.select(SelectionContext(r, avail, 8, rng)) == want
        assert rng.bit_generator.state == ref.bit_generator.state
    assert s.select(SelectionContext(1, [0, 1, 2], 8, rng)) == [0, 1]          # p = 1 always, p = 0 never, 3 is not available


def test_cyclic_patterns_from_a_fraction():
    c = sel.CyclicSelection(fraction=0.25)                   # N = 8: S = 2
    assert [c.select(SelectionContext(r, range(8), 8, None)) for r in (1, 2, 4, 5)] == [[0, 1], [2, 3], [6, 7], [0, 1]]
    s = sel.ReshuffledCyclicSelection(fraction=0.5)          # N = 4: S = 2, M = 2
    rng, ref = np.random.default_rng(7), np.random.default_rng(7)
    perm = ref.permutation(4)
    assert s.select(SelectionContext(1, range(4), 4, rng)) == sorted(perm[:2].tolist())
    assert s.select(SelectionContext(2, range(4), 4, rng)) == sorted(perm[2:].tolist())


def test_each_built_selection_carries_its_registered_name():
    params = {"uniform": {"k": 1}, "all": {}, "cyclic": {"k": 1}, "reshuffled_cyclic": {"k": 1},
              "biased": {"p": 0.5}, "sequence": {"sets": [[0]]}, "oort": {"k": 1}, "tifl": {"k": 1},
              "fedcs": {}, "power_of_choice": {"k": 1}}
    built = {n: e for n, e in registry.table("selection").items() if e.origin == "built-in"}
    assert set(built) == set(params)
    for name, entry in built.items():
        assert entry.factory(entry.params(**params[name])).name == name
