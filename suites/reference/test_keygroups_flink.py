"""Key groups bit-exact with Flink: thousands of vectors computed by Flink's own Java code
(``KeyGroupRangeAssignment``, ``MathUtils.murmurHash`` from flink-dist 2.3.0; see
``flink_vectors/regenerate.sh``): str keys with accents, CJK and non-BMP characters, ints across the
whole int32 range, longs, booleans, doubles, Tuple2/Tuple3 with null fields, nine max parallelisms."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from reference_impl.keygroups import (
    assign_key_to_parallel_operator,
    assign_to_key_group,
    assign_to_key_groups,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    java_hash,
    murmur_hash,
)

DATA = Path(__file__).parent / "data" / "flink_keygroup_vectors.jsonl.gz"


def _decode(k):
    t = k["t"]
    if t == "null":
        return None
    if t == "str":
        return struct.pack(f"<{len(k['u'])}H", *k["u"]).decode("utf-16-le", "surrogatepass")
    if t in ("int", "long"):
        return int(k["v"])
    if t == "bool":
        return k["v"]
    if t == "double":
        return struct.unpack("<d", struct.pack("<q", int(k["bits"])))[0]
    if t == "tuple":
        return tuple(_decode(f) for f in k["f"])
    raise ValueError(t)


VECTORS = [json.loads(line) for line in gzip.open(DATA, "rt")]
KEYS = [v for v in VECTORS if v["kind"] == "key"]


def test_there_are_thousands_of_vectors():
    assert len(KEYS) > 4000 and len(VECTORS) > 7000
    kinds = {v["key"]["t"] for v in KEYS}
    assert kinds == {"str", "int", "long", "bool", "double", "tuple"}


def test_every_key_vector_matches_flink():
    mismatches = []
    checked = 0
    for v in KEYS:
        key = _decode(v["key"])
        if java_hash(key) != v["hash"]:
            mismatches.append(("hash", v["key"], java_hash(key), v["hash"]))
            continue
        if murmur_hash(v["hash"]) != v["murmur"]:
            mismatches.append(("murmur", v["hash"], murmur_hash(v["hash"]), v["murmur"]))
        for max_p, (kg, ops) in v["kg"].items():
            max_p = int(max_p)
            if assign_to_key_group(key, max_p) != kg:
                mismatches.append(("kg", v["key"], max_p, kg))
            for p, idx in ops:
                checked += 1
                if assign_key_to_parallel_operator(key, max_p, p) != idx:
                    mismatches.append(("op", v["key"], max_p, p, idx))
    assert not mismatches, mismatches[:10]
    assert checked > 100_000


def test_ranges_default_max_parallelism_and_murmur_match_flink():
    for v in VECTORS:
        if v["kind"] == "range":
            r = compute_key_group_range_for_operator_index(v["max_p"], v["p"], v["i"])
            assert (r.start, r.end) == (v["start"], v["end"]), v
        elif v["kind"] == "default_max_p":
            assert compute_default_max_parallelism(v["p"]) == v["max_p"], v
        elif v["kind"] == "murmur":
            assert murmur_hash(v["code"]) == v["murmur"], v


@pytest.mark.parametrize("max_p", [7, 128, 32768])
def test_vectorised_path_matches_flink(max_p):
    ints = [v for v in KEYS if v["key"]["t"] in ("int", "long")]
    arr = np.array([int(v["key"]["v"]) for v in ints], dtype=np.int64)
    assert assign_to_key_groups(arr, max_p).tolist() == [v["kg"][str(max_p)][0] for v in ints]
    strs = [v for v in KEYS if v["key"]["t"] == "str"]
    got = assign_to_key_groups([_decode(v["key"]) for v in strs], max_p)
    assert got.tolist() == [v["kg"][str(max_p)][0] for v in strs]
