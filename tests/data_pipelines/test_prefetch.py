"""prefetch: the same items in the same order, errors where they happened, one item ahead."""

from __future__ import annotations

import threading

import pytest

from data_pipelines.prefetch import prefetch


def test_items_in_order_produced_off_the_calling_thread():
    producers = []

    def items():
        for i in range(5):
            producers.append(threading.current_thread())
            yield i

    assert list(prefetch(items())) == [0, 1, 2, 3, 4]
    assert threading.current_thread() not in producers
    assert list(prefetch([])) == []


def test_an_error_is_raised_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise ValueError("bad chunk")

    got = []
    with pytest.raises(ValueError, match="bad chunk"):
        for x in prefetch(items()):
            got.append(x)
    assert got == [1, 2]


def test_stopping_early_produces_at_most_one_item_ahead():
    produced = []

    def items():
        for i in range(100):
            produced.append(i)
            yield i

    for x in prefetch(items()):
        if x == 3:
            break
    assert produced == [0, 1, 2, 3, 4]
