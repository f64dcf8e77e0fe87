"""devices/assignment.py on its own (multi-model FL, docs/algorithms/multimodel.md): the group
split, the uniform draw of participants and the three assigners, for direct callers that
rely on the defaults (the protocol passes every option explicitly; tests/test_multimodel.py
covers it end to end). Found by the assignment mutation pair (docs/mutation.md)."""
import numpy as np
import pytest

from devices.assignment import MfaRand, MfaRR, Sequential, sample, split


def sizes(groups):
    return [len(g) for g in groups]


def test_split_by_default_keeps_every_client_in_array_split_sizes():
    groups = split(np.arange(7), 3)
    assert sizes(groups) == [3, 2, 2]
    assert np.concatenate(groups).tolist() == list(range(7))


def test_equal_groups_leave_the_last_clients_of_the_order_out():
    groups = split(np.arange(10, 17), 3, allow_unequal=False)       # 7 online, K not given
    assert sizes(groups) == [2, 2, 2]
    assert np.concatenate(groups).tolist() == list(range(10, 16))    # the 7th (16) waits
    assert all(g.dtype == np.int64 for g in groups)


def test_equal_groups_of_a_count_that_splits_are_kept_whole_even_at_K():
    groups = split(np.arange(6), 3, allow_unequal=False, K=6)
    assert sizes(groups) == [2, 2, 2]


def test_equal_groups_refuse_K_clients_that_do_not_split():
    with pytest.raises(ValueError, match="7 clients do not split into 3 equal groups"):
        split(np.arange(7), 3, allow_unequal=False, K=7)
    assert sizes(split(np.arange(7), 3, allow_unequal=False, K=9)) == [2, 2, 2]   # a short round


def test_sample_of_every_available_client_is_one_permutation_of_the_stream():
    avail = np.arange(10, 15)
    got = sample(avail, 5, np.random.default_rng(0))                  # K equals the online count
    assert got.tolist() == avail[np.random.default_rng(0).permutation(5)].tolist()
    got = sample(avail, 3, np.random.default_rng(0))
    assert got.tolist() == avail[np.random.default_rng(0).choice(5, size=3, replace=False)].tolist()


@pytest.mark.parametrize("cls", [MfaRand, MfaRR])
def test_mfa_assigners_default_to_unequal_groups(cls):
    groups = cls(M=3).assign(1, np.arange(7), np.random.default_rng(1))
    assert sorted(sizes(groups)) == [2, 2, 3]
    assert sorted(np.concatenate(groups).tolist()) == list(range(7))


def test_mfa_rr_keeps_its_frame_by_default_and_rotates_the_groups():
    rr = MfaRR(M=2)
    first = rr.assign(1, np.arange(6), np.random.default_rng(2))
    second = rr.assign(2, np.arange(6), np.random.default_rng(3))    # same frame: no new draw
    assert [g.tolist() for g in second] == [first[1].tolist(), first[0].tolist()]


def test_sequential_trains_nothing_after_every_model_had_its_rounds():
    seq = Sequential(M=2, rounds_per_model=2)
    assert [sizes(seq.assign(t, np.arange(4), np.random.default_rng(t))) for t in (1, 3, 5)] == \
        [[4, 0], [0, 4], [0, 0]]
