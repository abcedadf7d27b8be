"""Key groups: Flink's known vectors, clear errors, KeyGroupRange, and properties (range functions
are inverses; ranges tile [0, max_p) with sizes within 1; the vectorised path equals the scalar one)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.keygroups import (
    KeyGroupRange,
    UnsupportedKeyError,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    assign_to_key_groups,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    murmur_hash,
)


def test_flink_known_vectors():
    strs = {"8": 0, "5": 1, "25": 2, "13": 3, "4": 4, "7": 5, "1": 6, "6": 7, "9": 8, "3": 9}
    assert {k: assign_to_key_group(k, 10) for k in strs} == strs
    assert [assign_to_key_group(k, 10) for k in (7, 45, 90, 10)] == [1, 6, 2, 9]
    assert assign_to_key_group("A", 128) == 104 and assign_to_key_group("B", 128) == 17
    assert murmur_hash(-2089875627) == 0  # the INT_MIN case: abs() would be wrong


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: assign_to_key_group(None, 128), "None"),
        (lambda: assign_to_key_group(object(), 128), "unsupported key type 'object'"),
        (lambda: assign_to_key_group([1], 128), "unsupported key type 'list'"),
        (lambda: assign_key_to_parallel_operator("a", 128, 129), "exceeds max_parallelism"),
        (lambda: assign_to_key_group("a", 40000), "out of range"),
        (lambda: assign_to_key_group("a", 0), "out of range"),
        (lambda: compute_key_group_range_for_operator_index(128, 0, 0), "must be positive"),
        (lambda: compute_key_group_range_for_operator_index(128, 4, 4), "operator_index=4"),
        (lambda: compute_operator_index_for_key_group(128, 4, 128), "key_group=128"),
        (lambda: compute_default_max_parallelism(0), "positive"),
    ],
)
def test_clear_errors(call, match):
    with pytest.raises((ValueError, UnsupportedKeyError), match=match):
        call()


def test_key_group_range():
    r = KeyGroupRange(3, 7)
    assert len(r) == 5 and 3 in r and 7 in r and 8 not in r and list(r) == [3, 4, 5, 6, 7]
    assert r.intersection(KeyGroupRange(6, 10)) == KeyGroupRange(6, 7)
    empty = r.intersection(KeyGroupRange(9, 10))
    assert not empty and len(empty) == 0 and list(empty) == []
    with pytest.raises(ValueError):
        KeyGroupRange(-1, 3)


@given(max_p=st.integers(1, 32768), data=st.data())
def test_ranges_tile_and_invert(max_p, data):
    p = data.draw(st.integers(1, min(max_p, 300)))
    ranges = [compute_key_group_range_for_operator_index(max_p, p, i) for i in range(p)]
    assert ranges[0].start == 0 and ranges[-1].end == max_p - 1
    for a, b in zip(ranges, ranges[1:], strict=False):
        assert b.start == a.end + 1
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    kg = data.draw(st.integers(0, max_p - 1))
    i = compute_operator_index_for_key_group(max_p, p, kg)
    assert kg in ranges[i]


@settings(max_examples=50)
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=200), st.sampled_from([1, 7, 128, 32768])
)
def test_vectorised_ints_equal_scalar(keys, max_p):
    got = assign_to_key_groups(np.array(keys, dtype=np.int64), max_p)
    assert got.tolist() == [assign_to_key_group(k, max_p) for k in keys]


@settings(max_examples=50)
@given(st.lists(st.text(), min_size=1, max_size=50), st.sampled_from([10, 128, 1000]))
def test_vectorised_strings_equal_scalar(keys, max_p):
    assert assign_to_key_groups(keys, max_p).tolist() == [assign_to_key_group(k, max_p) for k in keys]
