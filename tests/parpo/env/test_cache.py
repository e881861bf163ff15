"""The bounded LRU cache: answers from the batch, never loses what the call needs, stays bounded."""

from __future__ import annotations

import pytest

from parpo.env.cache import BoundedCache


def test_lookup_computes_distinct_misses_once_and_evicts_least_recently_used():
    calls: list[list[str]] = []

    def compute(keys: list[str]) -> list[str]:
        calls.append(keys)
        return [k.upper() for k in keys]

    c: BoundedCache[str, str] = BoundedCache(3)
    assert c.lookup(["a", "b", "a"], compute) == ["A", "B", "A"]
    assert c.lookup(["a", "c"], compute) == ["A", "C"]  # a is now the most recently used
    assert calls == [["a", "b"], ["c"]]
    assert c.lookup(["d"], compute) == ["D"]  # evicts b: a was inserted first but used since
    assert [k in c for k in "abcd"] == [True, False, True, True]
    # A batch larger than the cache is still answered whole, then cut to the limit.
    assert c.lookup(list("vwxyz"), compute) == list("VWXYZ")
    assert len(c) == 3 and all(k in c for k in "xyz")


def test_keep_filters_what_is_stored_and_limit_must_be_positive():
    c: BoundedCache[str, int] = BoundedCache(10)
    assert c.lookup(["a", "bb"], lambda ks: [len(k) for k in ks], keep=lambda k: len(k) > 1) == [1, 2]
    assert "a" not in c and "bb" in c
    with pytest.raises(ValueError, match="at least 1"):
        BoundedCache(0)
